"""Claims below the root in a Spark job: the subtrees no key is deleted from.

Design notes: docs/internals/spark.md, `gcd.spark.nesting`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gcd.storage.executor import ExecutorClient, ExecutorStore
from gcd.storage.rows import Action
from l0gc.contract.binding import (
    CLAIM_NAME,
    claim_key,
    covering_root,
    directories_below,
    may_precede_claim,
    nested_root,
)
from l0gc.errors import StorageError

__all__ = ["NESTED_VERDICT", "NestedClaims", "find_nested_roots", "keep_nested", "probe_claims"]

NESTED_VERDICT = "nested_root"
"""The `verdict` of a row kept because it lies under another namespace's root."""


@dataclass(frozen=True, slots=True)
class NestedClaims:
    """What a job found below its root before deleting anything."""

    roots: dict[str, str]
    """Nested root -> its claim object's key."""
    failed: tuple[str, ...] = ()
    """Directories whose claim probe failed: kept this round."""
    probes: int = 0
    """One-key ListObjectsV2 calls made."""

    @property
    def kept(self) -> frozenset[str]:
        """Every directory whose subtree is kept."""
        return frozenset(self.roots) | frozenset(self.failed)


def find_nested_roots(source: Any, root: str) -> dict[str, str]:
    """Nested root -> claim key, for every claim object strictly below `root` in `source`."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    # A cheap SQL prefilter; `nested_root` decides (the rule's one home).
    rows = (
        source.where(F.col("key").endswith("/" + CLAIM_NAME))
        .where(F.col("key").startswith(root + "/"))
        .select("key")
        .collect()
    )
    found: dict[str, str] = {}
    for row in rows:
        nested = nested_root(row["key"], root)
        if nested is not None:
            found.setdefault(nested, row["key"])
    return found


def probe_claims(
    classified: Any,
    root: str,
    target: ExecutorStore,
    known: dict[str, str],
    *,
    every_directory: bool,
    requests: Any = None,
) -> NestedClaims:
    """`known` plus the claims found by probing the directories of eligible rows."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    directories: Callable[[str, str], Iterator[str]] = (
        directories_below if every_directory else may_precede_claim
    )
    skip = frozenset(known)

    def wanted(rows: Iterable[Any]) -> Iterator[str]:
        for row in rows:
            for directory in directories(row["key"], root):
                if covering_root(directory + "/", root, skip) is None:
                    yield directory

    def probe(partition: Iterable[str]) -> Iterator[tuple[str, bool]]:
        client: ExecutorClient | None = None
        for directory in partition:
            client = client or target.connect(pool=1)
            if requests is not None:
                requests.add(1)
            try:
                if client.exists(claim_key(directory)):
                    yield directory, True
            except StorageError:
                yield directory, False

    eligible = classified.where(F.col("action") == Action.DELETE.value).select("key")
    results = eligible.rdd.mapPartitions(wanted).distinct().mapPartitions(probe).collect()
    roots = dict(known)
    failed = []
    for directory, present in sorted(results):
        if present:
            roots.setdefault(directory, claim_key(directory))
        else:
            failed.append(directory)
    return NestedClaims(roots, tuple(failed), int(requests.value) if requests else 0)


def keep_nested(classified: Any, kept: Collection[str], root: str) -> Any:
    """Rows under a directory of `kept`: action `kept_nested_root`, verdict `nested_root`."""
    if not kept:
        return classified
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    shared = classified.sparkSession.sparkContext.broadcast(frozenset(kept))

    def covered(keys: Any) -> Any:
        import pandas as pd  # noqa: PLC0415

        return pd.Series(
            [
                isinstance(k, str) and covering_root(k, root, shared.value) is not None
                for k in keys.tolist()
            ],
            dtype=bool,
        )

    import pandas as pd  # noqa: PLC0415

    covered.__annotations__ = {"keys": pd.Series, "return": pd.Series}
    under = F.pandas_udf(covered, "boolean")("key")  # type: ignore[attr-defined]
    return classified.withColumn(
        "action", F.when(under, Action.KEPT_NESTED_ROOT.value).otherwise(F.col("action"))
    ).withColumn("verdict", F.when(under, NESTED_VERDICT).otherwise(F.col("verdict")))
