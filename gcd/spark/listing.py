"""List mode: executors list the bucket, one task per prefix range, through the store's
`gcd.storage.executor.ExecutorClient`.

Design notes: docs/internals/spark.md, `gcd.spark.listing`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gcd.rules.layout import PREFIX_COUNT, KeyLayout, listing_prefixes
from gcd.storage.executor import ExecutorStore, Listed, SkipAhead
from gcd.storage.rows import SOURCE_SCHEMA, LayoutSpec

__all__ = ["LISTING_SCHEMA", "list_objects", "listing_tasks"]

LISTING_SCHEMA = SOURCE_SCHEMA


def listing_tasks(layout: KeyLayout, task_count: int = 100) -> list[list[str]]:
    """The listing prefixes of each task (contiguous prefix ranges, in key order)."""
    if not layout.has_prefix:
        return [[layout.listing_root]]
    count = max(1, min(task_count, PREFIX_COUNT))
    return [listing_prefixes(layout, index, count) for index in range(count)]


def list_objects(
    spark: Any,
    target: ExecutorStore,
    layout: KeyLayout,
    *,
    task_count: int = 100,
    skip_above_epoch: int | None = None,
    requests: Any = None,
) -> Any:
    """The store's objects (every version, for a versioned S3 target) under the layout's
    root as `SOURCE_SCHEMA` rows; `requests`, an optional Spark accumulator, counts LISTs."""
    tasks = listing_tasks(layout, task_count)
    spec = LayoutSpec.of(layout)

    def run(partition: Iterable[list[str]]) -> Iterator[Listed]:
        skip = None if skip_above_epoch is None else SkipAhead(spec.build(), skip_above_epoch)
        count = (lambda: requests.add(1)) if requests is not None else (lambda: None)
        client = target.connect(pool=1)
        for prefix in (p for prefixes in partition for p in prefixes):
            yield from client.list_prefix(prefix, skip=skip, on_request=count)

    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(run)
    return spark.createDataFrame(rdd, LISTING_SCHEMA)
