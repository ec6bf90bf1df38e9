"""What a round reports: its summary (also the `--json` output), and the dry-run plan.

Design notes: docs/internals/sweep.md, `gcd.observe.report`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from l0gc.errors import ConfigError

__all__ = ["SUMMARY_VERSION", "PlanWriter", "RoundCounts", "RoundResult", "RoundSummary", "iso_utc"]

SUMMARY_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """The outcome of one round, as counted by the sweeper (fields in `--json` order)."""

    version: int = SUMMARY_VERSION
    safe_epoch: int | None = None
    cluster_epoch: int | None = None
    dry_run: bool = False
    listed: int = 0
    eligible: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    skipped_not_eligible: int = 0
    skipped_young: int = 0
    unparsable: int = 0
    errors: int = 0
    skipped_paused: int = 0
    unsafe_keys: int = 0
    list_requests: int = 0
    delete_requests: int = 0
    duration_s: float = 0.0
    blocked_reason: str | None = None
    deleted_versions: int = 0
    deleted_markers: int = 0
    locked: int = 0
    locked_reasons: dict[str, int] | None = None
    locked_earliest_retain_until: str | None = None
    store: dict[str, Any] | None = None
    skipped_nested: int = 0
    nested_roots: tuple[str, ...] = ()
    unlistable_prefixes: tuple[str, ...] = ()
    poison_keys: tuple[str, ...] = ()
    deadline_exceeded: bool = False
    round: str | None = None
    markers_written: int = 0
    versions_reclaimed: int = 0
    undo: dict[str, Any] | None = None
    reference_conflicts: int = 0
    """Keys at or below M that a partition still references: the round deleted nothing
    and paused GC (`gcd.rules.references`)."""
    conflicting_keys: tuple[str, ...] = ()
    """The first of them (`gcd.rules.references.MAX_CONFLICTS_SHOWN`)."""

    @property
    def outcome(self) -> str:
        """The metrics outcome: blocked, paused, partial, ok or idle."""
        if self.blocked_reason is not None:
            return "paused" if self.blocked_reason.startswith("paused") else "blocked"
        if self.errors or self.nested_roots:
            return "partial"
        return "ok" if self.eligible else "idle"

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return asdict(self)

    def to_json(self) -> str:
        """The summary as one line of JSON with a "version" field."""
        return json.dumps(self.to_dict())


@dataclass(slots=True)
class RoundCounts:
    """Live counters of a round in progress (the counting fields of RoundSummary)."""

    listed: int = 0
    eligible: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    skipped_not_eligible: int = 0
    skipped_young: int = 0
    unparsable: int = 0
    errors: int = 0
    skipped_paused: int = 0
    unsafe_keys: int = 0
    list_requests: int = 0
    delete_requests: int = 0
    deleted_versions: int = 0
    deleted_markers: int = 0
    locked: int = 0
    skipped_nested: int = 0
    unlistable_prefixes: list[str] = field(default_factory=list)
    poison_keys: list[str] = field(default_factory=list)
    markers_written: int = 0
    versions_reclaimed: int = 0
    pending_keys: int = field(default=0, metadata={"summary": False})
    """Undo window: keys hidden or not yet old enough, kept (in the summary's `undo`)."""
    pending_bytes: int = field(default=0, metadata={"summary": False})
    oldest_pending_s: float | None = field(default=None, metadata={"summary": False})
    foreign_markers: int = field(default=0, metadata={"summary": False})
    """Undo window: eligible keys under a delete marker l0gc did not write, kept."""
    prefixes_total: int = field(default=0, metadata={"summary": False})
    """Listing prefixes of the round, and those listed to their end (the progress line's
    percentage: prefixes differ in size, so it and its ETA are estimates)."""
    prefixes_done: int = field(default=0, metadata={"summary": False})
    abandoned: int = field(default=0, metadata={"summary": False})
    """Keys left for the next round because of a stop (not in RoundSummary)."""
    locked_targets: list[str] = field(default_factory=list, metadata={"summary": False})
    """The first locked versions of the round, for its report (not in RoundSummary)."""

    def summary_fields(self) -> dict[str, Any]:
        """The counters that are RoundSummary fields."""
        return {
            f.name: tuple(sorted(value))
            if isinstance(value := getattr(self, f.name), list)
            else value
            for f in fields(self)
            if f.metadata.get("summary", True)
        }


@dataclass(frozen=True, slots=True)
class RoundResult:
    """A summary plus what the daemon needs to schedule the next round."""

    summary: RoundSummary
    young_ready_at_s: float | None = None
    """When the oldest object skipped as too young becomes old enough (epoch seconds)."""
    complete: bool = True
    """False when the round may have left deletable objects (cap, errors, stop)."""
    max_deleted_epoch: int | None = None


def iso_utc(epoch_s: float) -> str:
    """Epoch seconds as ISO-8601 UTC with a Z suffix."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


class PlanWriter:
    """Writes the plan as JSON lines; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(path.name + ".partial")
        self.count = 0
        try:
            self._file: IO[str] = self._tmp.open("w", encoding="utf-8")
        except OSError as exc:
            msg = f"cannot write the plan file {str(path)!r} ({exc.strerror}); pick a writable path"
            raise ConfigError(msg) from exc

    def write(self, key: str, epoch: int, size: int, last_modified_s: float) -> None:
        """Add one selected key."""
        line = {"key": key, "epoch": epoch, "size": size, "last_modified": iso_utc(last_modified_s)}
        self._file.write(json.dumps(line, sort_keys=True) + "\n")
        self.count += 1

    def close(self) -> None:
        """Flush and move the finished plan into place."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._tmp.replace(self.path)

    def __enter__(self) -> PlanWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
