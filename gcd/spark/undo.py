"""The undo window in a Spark job on a versioned bucket: hide, then reclaim.

Every version of an eligible key is planned together, by `gcd.rules.undo.plan_key`, as
the daemon plans it: a key whose latest version is data is hidden (deleted without a
version id: a delete marker, every byte kept); a key under a marker l0gc wrote (the
journal names it) older than the window is reclaimed (its versions and l0gc's markers
deleted by version id); a younger one is held; one under another writer's marker is
never touched. The other rules (the M of one window ago, the store's own soft delete)
are decided on the driver (`gcd.cli.spark`). Design notes: docs/internals/spark.md,
`gcd.spark.undo`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gcd.rules.undo import KeyPlan, UndoAction, VersionEntry, plan_key
from gcd.storage.rows import CLASSIFIED_SCHEMA, Action

__all__ = ["HIDES_SCHEMA", "JobUndo", "plan_undo", "planned_rows"]

HIDES_SCHEMA: Final = CLASSIFIED_SCHEMA + ", hides array<string>"
"""The classified rows with, on a row to hide, the versions its marker will hide."""
_WAITING = (Action.DELETE.value, Action.KEPT_TOO_YOUNG.value)
_Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobUndo:
    """A job's undo window: its rule, and what the rule needs (module docs)."""

    window_s: float
    rule: str
    ledger: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """hide-then-reclaim: key -> the delete markers the journal says l0gc wrote."""
    delayed_safe_epoch: int | None = None
    """delayed-m: the M of one window ago (None: the history is younger than a window)."""
    store_retention_s: float | None = None
    note: str | None = None

    def limit(self, safe_epoch: int) -> int:
        """The highest epoch the job may delete: M, or under the delayed M the lower of
        M and the M of one window ago (-1, nothing, while the history is too young)."""
        if self.rule != "delayed-m":
            return safe_epoch
        return -1 if self.delayed_safe_epoch is None else min(self.delayed_safe_epoch, safe_epoch)

    def report(self, pending_keys: int, pending_bytes: int, foreign: int) -> dict[str, Any]:
        """The summary's `undo`, as `gcd sweep --json` gives it."""
        return {
            "window_s": self.window_s,
            "rule": self.rule,
            "delayed_safe_epoch": self.delayed_safe_epoch,
            "pending_keys": pending_keys,
            "pending_bytes": pending_bytes,
            "oldest_pending": None,
            "foreign_markers": foreign,
            "note": self.note,
            "store_retention_s": self.store_retention_s,
            "ledger_markers": sum(len(markers) for markers in self.ledger.values()),
        }


def planned_rows(
    rows: Sequence[_Row], ours: Sequence[str], now_s: float, window_s: float
) -> list[_Row]:
    """The rows of ONE eligible key (every version, DELETE or too young), each with the
    action its plan gives it and a `hides` list (None but on the row to hide)."""
    entries = [
        VersionEntry(
            str(row["version_id"]),
            bool(row["delete_marker"]),
            bool(row["is_latest"]),
            float(row["last_modified_s"]),
            int(row["size"]),
            row["action"] == Action.KEPT_TOO_YOUNG.value,
        )
        for row in rows
    ]
    plan = plan_key(entries, set(ours), now_s, window_s)
    return [{**row, "action": _action(plan, row), "hides": _hides(plan, row)} for row in rows]


def _action(plan: KeyPlan, row: _Row) -> str:
    kind = plan.action
    if kind is UndoAction.HIDE:
        return str((Action.HIDE if row["is_latest"] else Action.KEPT_UNDO).value)
    if kind is UndoAction.RECLAIM:
        targets = {entry.version_id for entry in plan.targets}
        chosen = str(row["version_id"]) in targets
        return str((Action.DELETE if chosen else Action.KEPT_FOREIGN_MARKER).value)
    if kind is UndoAction.PENDING:
        return Action.KEPT_UNDO.value
    if kind is UndoAction.FOREIGN:
        return Action.KEPT_FOREIGN_MARKER.value
    return Action.KEPT_TOO_YOUNG.value  # WAIT: a version in its grace period, or no latest


def _hides(plan: KeyPlan, row: _Row) -> list[str] | None:
    return list(plan.hides) if plan.action is UndoAction.HIDE and row["is_latest"] else None


def plan_undo(
    classified: Any, ledger: Mapping[str, Sequence[str]], now_s: float, window_s: float
) -> Any:
    """`classified` (every version listed) with each eligible key planned (module docs);
    `ledger`: key -> version ids of the delete markers the journal says l0gc wrote."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    shared = classified.sparkSession.sparkContext.broadcast(dict(ledger))
    waiting = F.col("epoch").isNotNull() & F.col("action").isin(*_WAITING)

    def plan(frame: Any) -> Any:
        import pandas as pd  # noqa: PLC0415

        rows = frame.to_dict("records")
        key = str(rows[0]["key"])
        planned = planned_rows(rows, shared.value.get(key, ()), now_s, window_s)
        return pd.DataFrame.from_records(planned, columns=[*frame.columns, "hides"])

    rest = classified.where(~waiting).withColumn("hides", F.lit(None).cast("array<string>"))
    grouped = classified.where(waiting).groupBy("key").applyInPandas(plan, HIDES_SCHEMA)
    return rest.unionByName(grouped)
