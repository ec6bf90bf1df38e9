"""`gcd spark-report`: what is in the bucket, what is garbage, and what it costs.

Design notes: docs/internals/spark.md, `gcd.spark.report`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gcd.rules.decision import Verdict
from gcd.rules.prices import DEFAULT_PRICES
from gcd.spark.chart import save_chart
from gcd.spark.nesting import NESTED_VERDICT

__all__ = [
    "DEFAULT_PRICE_PER_GB_MONTH",
    "ReportSettings",
    "epoch_table",
    "list_requests",
    "monthly_cost",
    "prefix_table",
    "versions_split",
    "write_report",
]

# The one price table of gcd (`gcd.rules.prices`): `gcd sweep` and `gcd status` price with it too.
DEFAULT_PRICE_PER_GB_MONTH: Final = DEFAULT_PRICES["s3"].storage_gb_month
PRICE_PER_1000_LIST_REQUESTS: Final = DEFAULT_PRICES["s3"].list_per_1000  # S3 Standard
REPORT_VERSION: Final = 1
GIB: Final = 2**30
PAGE_SIZE: Final = 1000  # keys per ListObjectsV2 page
_GARBAGE = (Verdict.DELETE.value, Verdict.TOO_YOUNG.value)
_PARSED = (*_GARBAGE, Verdict.NOT_ELIGIBLE.value)


@dataclass(frozen=True, slots=True)
class ReportSettings:
    """The round's constants as the report shows them."""

    safe_epoch: int | None
    cluster_epoch: int | None
    now_s: float
    grace_s: float
    price_per_gb_month: float = DEFAULT_PRICE_PER_GB_MONTH
    sample_size: int = 20
    blocked_reason: str | None = None
    source: str = "inventory"
    nested_roots: tuple[str, ...] = ()
    """Other namespaces' roots claimed below this root (`gcd.spark.nesting`)."""
    versions: bool = False
    """The rows are every version and delete marker of a versioned bucket."""


def monthly_cost(garbage_bytes: int, price_per_gb_month: float) -> float:
    """USD per month of storing `garbage_bytes` at `price_per_gb_month` (GB = 2**30 bytes)."""
    return garbage_bytes / GIB * price_per_gb_month


def list_requests(objects: int, garbage_objects: int, prefixes_with_live: int) -> tuple[int, int]:
    """LIST requests (full listing, sweep) for a root of `objects` keys.

    A full listing reads every key, `PAGE_SIZE` a page. A sweep reads the garbage and,
    in each prefix holding live objects, stops at the first live key and starts a new
    request at the next prefix: about one page per `PAGE_SIZE` garbage keys plus one
    request per prefix with live objects. Estimates: real pages also end at listing
    stream boundaries.

    The full listing is one listing of the whole root, the sweep one per prefix: with
    few keys per prefix the sweep is the dearer one (75k garbage and 25k live keys over
    1,000 prefixes: ~100 vs ~1,075 requests); it is the cheaper once live keys fill more
    than a page per prefix. README's "20x fewer" compares the sweep with a sweeper that
    lists every prefix to its end (docs/spark.md explains both).
    """
    full = max(1, math.ceil(objects / PAGE_SIZE))
    sweep = max(1, math.ceil(garbage_objects / PAGE_SIZE) + prefixes_with_live)
    return full, sweep


def _counts(F: Any, condition: Any, name: str) -> list[Any]:  # noqa: N803 - pyspark idiom
    return [
        F.sum(F.when(condition, 1).otherwise(0)).alias(f"{name}_objects"),
        F.sum(F.when(condition, F.col("size")).otherwise(0)).alias(f"{name}_bytes"),
    ]


def epoch_table(classified: Any) -> Any:
    """Per epoch: objects, bytes, status, eligible / in-grace counts, oldest LastModified."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    verdict = F.col("verdict")
    parsed = classified.where(F.col("epoch").isNotNull())
    return (
        parsed.groupBy("epoch")
        .agg(
            F.count(F.lit(1)).alias("objects"),
            F.sum("size").alias("bytes"),
            F.max(F.when(verdict.isin(*_GARBAGE), 1).otherwise(0)).alias("garbage"),
            *_counts(F, verdict == Verdict.DELETE.value, "eligible"),
            *_counts(F, verdict == Verdict.TOO_YOUNG.value, "in_grace"),
            *_counts(F, verdict == Verdict.NOT_ELIGIBLE.value, "live"),
            F.min("last_modified_s").alias("oldest_last_modified_s"),
        )
        .withColumn("status", F.when(F.col("garbage") == 1, "garbage").otherwise("live"))
        .drop("garbage")
        .orderBy("epoch")
    )


def prefix_table(classified: Any, now_s: float) -> Any:
    """Per prefix: objects, bytes, garbage, epoch range, age of the oldest (garbage) object."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    garbage = F.col("verdict").isin(*_GARBAGE)
    return (
        classified.where(F.col("prefix").isNotNull())
        .groupBy("prefix")
        .agg(
            F.count(F.lit(1)).alias("objects"),
            F.sum("size").alias("bytes"),
            *_counts(F, garbage, "garbage"),
            F.min("epoch").alias("min_epoch"),
            F.max("epoch").alias("max_epoch"),
            (F.lit(now_s) - F.min("last_modified_s")).alias("oldest_age_s"),
            (F.lit(now_s) - F.min(F.when(garbage, F.col("last_modified_s")))).alias(
                "oldest_garbage_age_s"
            ),
        )
        .orderBy("prefix")
    )


def _totals(classified: Any) -> dict[str, tuple[int, int]]:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    rows = classified.groupBy("verdict").agg(
        F.count(F.lit(1)).alias("objects"), F.coalesce(F.sum("size"), F.lit(0)).alias("bytes")
    )
    found = {row["verdict"]: (int(row["objects"]), int(row["bytes"])) for row in rows.collect()}
    totals = {verdict.value: found.get(verdict.value, (0, 0)) for verdict in Verdict}
    totals[NESTED_VERDICT] = found.get(NESTED_VERDICT, (0, 0))
    return totals


def versions_split(classified: Any) -> dict[str, int]:
    """Objects and bytes under the root, and of the garbage, split into current versions,
    non-current versions and delete markers (`is_latest`, `delete_marker` columns)."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    verdict = F.col("verdict")
    under_root = verdict.isin(*_PARSED, Verdict.UNPARSABLE.value)
    garbage = verdict.isin(*_GARBAGE)
    marker = F.coalesce(F.col("delete_marker"), F.lit(False))
    current = F.coalesce(F.col("is_latest"), F.lit(True)) & ~marker
    noncurrent = ~F.coalesce(F.col("is_latest"), F.lit(True)) & ~marker
    parts = {"current": current, "noncurrent": noncurrent}
    columns: list[Any] = []
    for scope, within in (("", under_root), ("garbage_", garbage)):
        for name, condition in parts.items():
            columns += _counts(F, within & condition, f"{scope}{name}")
        columns.append(
            F.sum(F.when(within & marker, 1).otherwise(0)).alias(f"{scope}delete_markers")
        )
    row = classified.agg(*columns).collect()[0]
    return {name: int(row[name] or 0) for name in row.asDict()}


def _summary(
    totals: dict[str, tuple[int, int]],
    epochs: Any,
    prefixes: Any,
    sample: list[str | None],
    settings: ReportSettings,
) -> dict[str, Any]:
    def pair(*verdicts: str) -> tuple[int, int]:
        return (
            sum(totals[v][0] for v in verdicts),
            sum(totals[v][1] for v in verdicts),
        )

    under_root = pair(*_PARSED, Verdict.UNPARSABLE.value)
    garbage = pair(*_GARBAGE)
    oldest = prefixes["oldest_garbage_age_s"].dropna()
    with_live = int((prefixes["objects"] > prefixes["garbage_objects"]).sum())
    full_listing, sweep = list_requests(under_root[0], garbage[0], with_live)
    doc: dict[str, Any] = {
        "version": REPORT_VERSION,
        "source": settings.source,
        "safe_epoch": settings.safe_epoch,
        "cluster_epoch": settings.cluster_epoch,
        "blocked_reason": settings.blocked_reason,
        "now_s": settings.now_s,
        "grace_s": settings.grace_s,
        "objects": under_root[0],
        "bytes": under_root[1],
        "garbage_objects": garbage[0],
        "garbage_bytes": garbage[1],
        "eligible_objects": totals[Verdict.DELETE.value][0],
        "eligible_bytes": totals[Verdict.DELETE.value][1],
        "in_grace_objects": totals[Verdict.TOO_YOUNG.value][0],
        "in_grace_bytes": totals[Verdict.TOO_YOUNG.value][1],
        "live_objects": totals[Verdict.NOT_ELIGIBLE.value][0],
        "live_bytes": totals[Verdict.NOT_ELIGIBLE.value][1],
        "unparsable_objects": totals[Verdict.UNPARSABLE.value][0],
        "unparsable_bytes": totals[Verdict.UNPARSABLE.value][1],
        "unparsable_sample": sample,
        "outside_root_objects": totals[Verdict.OUTSIDE_ROOT.value][0],
        "outside_root_bytes": totals[Verdict.OUTSIDE_ROOT.value][1],
        "nested_root_objects": totals[NESTED_VERDICT][0],
        "nested_root_bytes": totals[NESTED_VERDICT][1],
        "nested_roots": list(settings.nested_roots),
        "epochs": len(epochs),
        "min_epoch": None if epochs.empty else int(epochs["epoch"].min()),
        "max_epoch": None if epochs.empty else int(epochs["epoch"].max()),
        "prefixes": len(prefixes),
        "oldest_garbage_age_s": None if oldest.empty else float(oldest.max()),
        "price_per_gb_month": settings.price_per_gb_month,
        "garbage_monthly_cost_usd": monthly_cost(garbage[1], settings.price_per_gb_month),
        "list_requests_full_listing": full_listing,
        "list_requests_sweep": sweep,
        "price_per_1000_list_requests": PRICE_PER_1000_LIST_REQUESTS,
        "list_cost_full_listing_usd": full_listing / 1000 * PRICE_PER_1000_LIST_REQUESTS,
        "list_cost_sweep_usd": sweep / 1000 * PRICE_PER_1000_LIST_REQUESTS,
    }
    return doc


def write_report(classified: Any, output: str | Path, settings: ReportSettings) -> dict[str, Any]:
    """Write the tables, summary and chart to `output`; return the summary."""
    from pyspark import StorageLevel  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    # Cache only what the aggregates read: the key is kept for unparsable rows alone
    # (the sample), which keeps the cache a fraction of the input.
    unparsable = F.col("verdict") == Verdict.UNPARSABLE.value
    narrow = classified.select(
        F.when(unparsable, F.col("key")).alias("key"),
        "size",
        "last_modified_s",
        "prefix",
        "epoch",
        "verdict",
        "is_latest",
        "delete_marker",
    )
    cached = narrow.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        totals = _totals(cached)
        split = versions_split(cached)
        epochs = epoch_table(cached).toPandas()
        prefixes = prefix_table(cached, settings.now_s).toPandas()
        sample_rows = (
            cached.where(unparsable)
            .select("key")
            .orderBy("key")
            .limit(settings.sample_size)
            .collect()
        )
    finally:
        cached.unpersist()
    sample = [row["key"] for row in sample_rows]
    # Prefixes as the keys write them ("007"), so a CSV reader does not see the number 7.
    prefixes["prefix"] = [f"{int(prefix):03d}" for prefix in prefixes["prefix"]]
    for name, table in (("by_epoch", epochs), ("by_prefix", prefixes)):
        table.to_parquet(out / f"{name}.parquet", index=False)
        table.to_csv(out / f"{name}.csv", index=False)
    summary = _summary(totals, epochs, prefixes, sample, settings)
    summary["versions"] = settings.versions
    summary.update(split)
    save_chart(epochs, summary, out / "report.png")
    summary["files"] = {
        name: str(out / name)
        for name in (
            "report.json",
            "by_epoch.parquet",
            "by_epoch.csv",
            "by_prefix.parquet",
            "by_prefix.csv",
            "report.png",
        )
    }
    text = json.dumps(summary, indent=2, allow_nan=False, default=_json_default)
    (out / "report.json").write_text(text + "\n", encoding="utf-8")
    return summary


def _json_default(value: Any) -> Any:
    # numpy scalars from pandas aggregates; a NaN/inf would be a bug, so it stays loud.
    item = value.item() if hasattr(value, "item") else str(value)
    if isinstance(item, float) and not math.isfinite(item):
        raise ValueError(f"non-finite number {item!r} in the report summary")
    return item
