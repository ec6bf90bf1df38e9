"""List mode: executors list the bucket with ListObjectsV2, one task per prefix range.

The driver splits the prefixes 000-999 into `task_count` contiguous ranges with the
sweeper's own sharding (`gcd.rules.layout.listing_prefixes`: `shard_range`, then
`compress_range` to the fewest listing prefixes), so 100 tasks list ``root/00``,
``root/01``, ... ``root/99``. A layout without a prefix group is one task over the
whole root. Each task builds its own boto3 client and yields
``(key, size, last_modified_s)`` rows.

Skip-ahead (sweeps only, padded layouts with a prefix): within one prefix directory
keys are in epoch order, so once a key's epoch is above `skip_above_epoch` (M) the
rest of that directory is live; the listing goes on at the next directory, or ends
when its listing prefix has none left. Where is the async sweeper's own rule,
`gcd.rules.cursor` (`skip` per key, `next_cursor` per page), so LIST cost follows the
garbage exactly as there. A report lists everything.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Iterator
from typing import Any

from gcd.rules.cursor import Cursor, Skip, can_skip, next_cursor, skip
from gcd.rules.layout import PREFIX_COUNT, KeyLayout, listing_prefixes
from gcd.spark.s3client import S3Target, call_with_retries, make_client
from gcd.spark.transforms import LayoutSpec

__all__ = ["LISTING_SCHEMA", "list_objects", "list_prefix", "listing_tasks"]

LISTING_SCHEMA = "key string, size long, last_modified_s double"
_PAGE = 1000


def listing_tasks(layout: KeyLayout, task_count: int = 100) -> list[list[str]]:
    """The listing prefixes of each task (contiguous prefix ranges, in key order)."""
    if not layout.has_prefix:
        return [[layout.listing_root]]
    count = max(1, min(task_count, PREFIX_COUNT))
    return [listing_prefixes(layout, index, count) for index in range(count)]


def list_prefix(
    client: Any,
    target: S3Target,
    prefix: str,
    *,
    layout: KeyLayout | None = None,
    skip_above_epoch: int | None = None,
    on_request: Any = None,
    rng: random.Random | None = None,
) -> Iterator[tuple[str, int, float]]:
    """Every object under `prefix`, skipping live prefix dirs when asked (see module)."""
    limit = skip_above_epoch if layout is not None and can_skip(layout) else None
    cursor: Cursor | None = Cursor()
    while cursor is not None:
        params: dict[str, Any] = {"Bucket": target.bucket, "Prefix": prefix, "MaxKeys": _PAGE}
        if cursor.token is not None:
            params["ContinuationToken"] = cursor.token
        elif cursor.start_after is not None:
            params["StartAfter"] = cursor.start_after
        if on_request is not None:
            on_request()
        page = call_with_retries(
            functools.partial(client.list_objects_v2, **params),
            what=f"ListObjectsV2 s3://{target.bucket}/{prefix}",
            backoff=target.backoff,
            rng=rng,
        )
        contents = page.get("Contents", ())
        found: Skip | None = None  # the last skip a key of this page called for
        for item in contents:
            key = item["Key"]
            skip_to = found.start_after if found is not None else None
            if skip_to is not None and key <= skip_to:
                continue
            yield key, int(item.get("Size", 0)), float(item["LastModified"].timestamp())
            if limit is not None and layout is not None:
                found = skip(layout, prefix, layout.parse(key), limit) or found
                if found is not None and found.done:
                    break
        token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
        last = contents[-1]["Key"] if contents else None
        cursor = next_cursor(cursor, found, last, token)


def list_objects(
    spark: Any,
    target: S3Target,
    layout: KeyLayout,
    *,
    task_count: int = 100,
    skip_above_epoch: int | None = None,
    requests: Any = None,
) -> Any:
    """The bucket's objects under the layout's root as ``(key, size, last_modified_s)``.

    `requests` is an optional Spark accumulator counting ListObjectsV2 calls.
    """
    tasks = listing_tasks(layout, task_count)
    spec = LayoutSpec.of(layout)

    def run(partition: Iterable[list[str]]) -> Iterator[tuple[str, int, float]]:
        built = spec.build()
        client = make_client(target, pool=1)
        count = (lambda: requests.add(1)) if requests is not None else None
        for prefixes in partition:
            for prefix in prefixes:
                yield from list_prefix(
                    client,
                    target,
                    prefix,
                    layout=built,
                    skip_above_epoch=skip_above_epoch,
                    on_request=count,
                )

    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(run)
    return spark.createDataFrame(rdd, LISTING_SCHEMA)
