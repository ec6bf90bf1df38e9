"""Pure DataFrame -> DataFrame steps of the Spark pipeline (no session, no I/O).

Design notes: docs/internals/spark.md, `gcd.storage.rows`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gcd.rules.decision import Verdict, decide
from gcd.rules.layout import KeyLayout
from l0gc.contract.binding import claim_key

__all__ = [
    "CLASSIFIED_SCHEMA",
    "SOURCE_SCHEMA",
    "VERSION_COLUMNS",
    "Action",
    "ClassifyParams",
    "LayoutSpec",
    "classify",
    "outcome_counts",
    "with_version_columns",
]

SOURCE_SCHEMA = (
    "key string, size long, last_modified_s double, version_id string, is_latest boolean, "
    "delete_marker boolean"
)
"""What every source (listing, inventory) gives: one row per object or version."""
VERSION_COLUMNS = ("version_id", "is_latest", "delete_marker")
CLASSIFIED_SCHEMA = (
    "key string, size long, last_modified_s double, version_id string, is_latest boolean, "
    "delete_marker boolean, prefix int, epoch long, verdict string, action string"
)


class Action(Enum):
    """What happened (or would happen) to one object; the `action` column."""

    DELETE = "delete"
    """Eligible, not yet acted on (the output of `classify`)."""
    DELETED = "deleted"
    WOULD_DELETE = "would_delete"
    FAILED = "failed"
    KEPT_NOT_ELIGIBLE = "kept_not_eligible"
    KEPT_TOO_YOUNG = "kept_too_young"
    KEPT_UNPARSABLE = "kept_unparsable"
    KEPT_OUTSIDE_ROOT = "kept_outside_root"
    KEPT_NESTED_ROOT = "kept_nested_root"
    """Under another namespace's root claimed below this one (`gcd.spark.nesting`)."""
    LOCKED = "locked"
    """An eligible version Object Lock keeps (retention or legal hold): refused, kept."""
    SKIPPED_PAUSED = "skipped_paused"
    """Eligible, never sent: the job was paused (`gcd pause`) or its pause state could not
    be read (`gcd.spark.brake`)."""
    HIDE = "hide"
    """An undo window's first step on a versioned bucket (`gcd.spark.undo`): delete the
    key without a version id, so a delete marker hides every version (planned)."""
    HIDDEN = "hidden"
    WOULD_HIDE = "would_hide"
    KEPT_UNDO = "kept_undo_window"
    """Held by the undo window: a version a marker of l0gc hides (restorable until a
    later run reclaims it once the window has passed)."""
    KEPT_FOREIGN_MARKER = "kept_foreign_marker"
    """Under a delete marker no journal names: another writer's, never touched."""
    KEPT_REFERENCED = "kept_referenced"
    """A partition still references the key (the rule's guard; a job whose M is past a
    referenced key does not start: `gcd.rules.references`)."""

    @classmethod
    def for_verdict(cls, verdict: Verdict) -> Action:
        """The classifier's action for a verdict."""
        return _ACTION_OF[verdict]


_ACTION_OF = {
    Verdict.DELETE: Action.DELETE,
    Verdict.NOT_ELIGIBLE: Action.KEPT_NOT_ELIGIBLE,
    Verdict.TOO_YOUNG: Action.KEPT_TOO_YOUNG,
    Verdict.UNPARSABLE: Action.KEPT_UNPARSABLE,
    Verdict.OUTSIDE_ROOT: Action.KEPT_OUTSIDE_ROOT,
    Verdict.REFERENCED: Action.KEPT_REFERENCED,
}


@dataclass(frozen=True, slots=True)
class LayoutSpec:
    """A key layout as plain values, to ship to executors and rebuild there."""

    spec: str
    """``"default"`` or the key pattern (regex)."""
    root: str
    epoch_width: int | None = None
    template: str | None = None

    @classmethod
    def of(cls, layout: KeyLayout) -> LayoutSpec:
        """The spec that `build` turns back into an equal layout."""
        if layout == KeyLayout.default(layout.root):
            return cls("default", layout.root)
        return cls(layout.pattern, layout.root, layout.epoch_width, layout.template)

    def build(self) -> KeyLayout:
        """The layout (validated by `KeyLayout`)."""
        if self.spec == "default":
            return KeyLayout.default(self.root)
        return KeyLayout.from_spec(
            self.spec, self.root, epoch_width=self.epoch_width, template=self.template
        )


@dataclass(frozen=True, slots=True)
class ClassifyParams:
    """The round's constants, identical on every executor."""

    layout: LayoutSpec
    safe_epoch: int
    now_s: float
    grace_s: float


def _modified_or_now(value: object) -> float:
    """LastModified in seconds; infinity (always too young) when it is missing."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(seconds) else seconds


@functools.lru_cache(maxsize=8)
def _layout_of(spec: LayoutSpec) -> KeyLayout:
    """The layout of a spec, built once per executor process."""
    return spec.build()


def classify_rows(
    keys: list[str | None], modified: list[object], params: ClassifyParams
) -> tuple[list[int | None], list[int | None], list[str]]:
    """(prefix, epoch, verdict) columns for plain lists of keys and LastModified."""
    layout = _layout_of(params.layout)
    prefixes: list[int | None] = []
    epochs: list[int | None] = []
    verdicts: list[str] = []
    for key, last_modified in zip(keys, modified, strict=True):
        if key is None:
            verdict, parsed = Verdict.UNPARSABLE, None
        else:
            verdict, parsed = decide(
                key,
                _modified_or_now(last_modified),
                layout,
                params.safe_epoch,
                params.now_s,
                params.grace_s,
            )
        prefixes.append(None if parsed is None else parsed.prefix)
        epochs.append(None if parsed is None else parsed.epoch)
        verdicts.append(verdict.value)
    return prefixes, epochs, verdicts


def classify(
    df: Any,
    layout: KeyLayout | LayoutSpec,
    safe_epoch: int,
    now_s: float,
    grace_s: float,
) -> Any:
    """``(key, size, last_modified_s)`` -> the same plus ``prefix, epoch, verdict, action``.

    A vectorised (pandas) UDF sends only the key and LastModified to Python and gets
    back (prefix, epoch, verdict); the action is named from the verdict in SQL.
    """
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    spec = layout if isinstance(layout, LayoutSpec) else LayoutSpec.of(layout)
    params = ClassifyParams(spec, safe_epoch, float(now_s), float(grace_s))
    spec.build()  # fail on the driver, not in every task, if the spec is bad
    shared = df.sparkSession.sparkContext.broadcast(params)

    def run(keys: Any, modified: Any) -> Any:
        import pandas as pd  # noqa: PLC0415

        texts = [k if isinstance(k, str) else None for k in keys.tolist()]
        prefixes, epochs, verdicts = classify_rows(texts, modified.tolist(), shared.value)
        return pd.DataFrame(
            {
                "prefix": pd.array(prefixes, dtype="Int32"),
                "epoch": pd.array(epochs, dtype="Int64"),
                "verdict": verdicts,
            }
        )

    # Spark picks the UDF kind (Series -> DataFrame) from the annotations; pandas is
    # only imported here, so they are set as objects rather than written as strings.
    import pandas as pd  # noqa: PLC0415

    run.__annotations__ = {"keys": pd.Series, "modified": pd.Series, "return": pd.DataFrame}
    schema = "prefix int, epoch long, verdict string"
    decide_udf = F.pandas_udf(run, schema)  # type: ignore[attr-defined]
    verdict = F.col("verdict")
    action = F.lit(None).cast("string")
    for each in Verdict:
        action = F.when(verdict == each.value, Action.for_verdict(each).value).otherwise(action)
    return (
        with_version_columns(df)
        .select("key", "size", "last_modified_s", *VERSION_COLUMNS)
        .where(F.col("key") != F.lit(claim_key(spec.root)))  # the binding, not an L0 object
        .withColumn("decided", decide_udf("key", "last_modified_s"))
        .select(
            "key",
            "size",
            "last_modified_s",
            *VERSION_COLUMNS,
            "decided.prefix",
            "decided.epoch",
            "decided.verdict",
        )
        .withColumn("action", action)
    )


def with_version_columns(df: Any) -> Any:
    """`df` with the version columns an unversioned source lacks: no version id, the
    current version, not a delete marker."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    defaults = {
        "version_id": F.lit(None).cast("string"),
        "is_latest": F.lit(True),
        "delete_marker": F.lit(False),
    }
    for name, value in defaults.items():
        if name not in df.columns:
            df = df.withColumn(name, value)
    return df


def outcome_counts(df: Any) -> Any:
    """``(action, objects, bytes, versions, markers)`` over a DataFrame with ``action``
    and ``size`` columns: `versions` are rows with a version id that hold bytes (not
    delete markers), `markers` the delete markers (both 0 without version columns)."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    df = with_version_columns(df)
    marker = F.coalesce(F.col("delete_marker"), F.lit(False))
    version = F.col("version_id").isNotNull() & ~marker
    return df.groupBy("action").agg(
        F.count(F.lit(1)).alias("objects"),
        F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"),
        F.sum(F.when(version, 1).otherwise(0)).alias("versions"),
        F.sum(F.when(marker, 1).otherwise(0)).alias("markers"),
    )
