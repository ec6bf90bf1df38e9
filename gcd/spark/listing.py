"""List mode: executors list the bucket with ListObjectsV2, one task per prefix range.

The driver splits the prefixes 000-999 into `task_count` contiguous ranges with the
sweeper's own sharding (`gcd.rules.layout.listing_prefixes`: `shard_range`, then
`compress_range` to the fewest listing prefixes), so 100 tasks list ``root/00``,
``root/01``, ... ``root/99``. A layout without a prefix group is one task over the
whole root. Each task builds its own boto3 client and yields `SOURCE_SCHEMA` rows
(`gcd.spark.transforms`).

Versioned buckets (`versions=True`: versioning enabled or suspended, `--versions
reclaim`): the task pages through ListObjectVersions instead, one row per version and
delete marker with its version id, as the async sweeper's `list_versions_page` does
(`gcd.storage.s3`): the skip point is the KeyMarker, the continuation token is the
answer's NextKeyMarker and NextVersionIdMarker, and the same skip-ahead applies (every
version of a key has the key's epoch). Unversioned rows have no version id.

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
from gcd.spark.stores import ExecutorStore
from gcd.spark.transforms import SOURCE_SCHEMA, LayoutSpec

__all__ = ["LISTING_SCHEMA", "Listed", "list_objects", "list_prefix", "listing_tasks"]

LISTING_SCHEMA = SOURCE_SCHEMA
_PAGE = 1000
_MARKER_SEPARATOR = "\x00"  # KeyMarker and VersionIdMarker in one continuation token

Listed = tuple[str, int, float, str | None, bool, bool]
"""(key, size, last_modified_s, version_id, is_latest, delete_marker): one source row."""


def _objects_page(
    client: Any, params: dict[str, Any], cursor: Cursor
) -> tuple[list[Listed], str | None]:
    if cursor.token is not None:
        params["ContinuationToken"] = cursor.token
    elif cursor.start_after is not None:
        params["StartAfter"] = cursor.start_after
    page = client.list_objects_v2(**params)
    rows: list[Listed] = [
        (
            str(item["Key"]),
            int(item.get("Size", 0)),
            float(item["LastModified"].timestamp()),
            None,
            True,
            False,
        )
        for item in page.get("Contents", ())
    ]
    return rows, page.get("NextContinuationToken") if page.get("IsTruncated") else None


def _versions_page(
    client: Any, params: dict[str, Any], cursor: Cursor
) -> tuple[list[Listed], str | None]:
    """One ListObjectVersions page as rows, keys ascending (S3's order within a key kept)."""
    if cursor.token is not None:
        key_marker, _, version_marker = cursor.token.partition(_MARKER_SEPARATOR)
        params["KeyMarker"] = key_marker
        if version_marker:
            params["VersionIdMarker"] = version_marker
    elif cursor.start_after is not None:
        params["KeyMarker"] = cursor.start_after
    page = client.list_object_versions(**params)
    rows: list[Listed] = [
        (
            item["Key"],
            int(item.get("Size", 0)),
            float(item["LastModified"].timestamp()),
            str(item["VersionId"]),
            bool(item.get("IsLatest", False)),
            marker,
        )
        for marker, items in (
            (False, page.get("Versions", ())),
            (True, page.get("DeleteMarkers", ())),
        )
        for item in items
    ]
    rows.sort(key=lambda row: row[0])  # stable: versions and markers of a key stay together
    token = None
    if page.get("IsTruncated"):
        token = str(page.get("NextKeyMarker") or (rows[-1][0] if rows else ""))
        if page.get("NextVersionIdMarker"):
            token += _MARKER_SEPARATOR + str(page["NextVersionIdMarker"])
    return rows, token


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
    versions: bool = False,
) -> Iterator[Listed]:
    """Every object (or version) under `prefix`, skipping live prefix dirs when asked."""
    limit = skip_above_epoch if layout is not None and can_skip(layout) else None
    lister, operation = (
        (_versions_page, "ListObjectVersions") if versions else (_objects_page, "ListObjectsV2")
    )
    cursor: Cursor | None = Cursor()
    while cursor is not None:
        params: dict[str, Any] = {"Bucket": target.bucket, "Prefix": prefix, "MaxKeys": _PAGE}
        if on_request is not None:
            on_request()
        rows, token = call_with_retries(
            functools.partial(lister, client, params, cursor),
            what=f"{operation} s3://{target.bucket}/{prefix}",
            backoff=target.backoff,
            rng=rng,
        )
        found: Skip | None = None  # the last skip a key of this page called for
        for row in rows:
            key = row[0]
            skip_to = found.start_after if found is not None else None
            if skip_to is not None and key <= skip_to:
                continue
            yield row
            if limit is not None and layout is not None:
                found = skip(layout, prefix, layout.parse(key), limit) or found
                if found is not None and found.done:
                    break
        last = rows[-1][0] if rows else None
        cursor = next_cursor(cursor, found, last, token)


def list_objects(
    spark: Any,
    target: S3Target | ExecutorStore,
    layout: KeyLayout,
    *,
    task_count: int = 100,
    skip_above_epoch: int | None = None,
    requests: Any = None,
    versions: bool = False,
) -> Any:
    """The bucket's objects (every version with `versions`) under the layout's root as
    `SOURCE_SCHEMA` rows.

    `requests` is an optional Spark accumulator counting LIST calls.
    """
    tasks = listing_tasks(layout, task_count)
    spec = LayoutSpec.of(layout)

    def run(partition: Iterable[list[str]]) -> Iterator[Listed]:
        built = spec.build()
        count = (lambda: requests.add(1)) if requests is not None else None
        if not isinstance(target, S3Target):  # another store (`gcd.spark.stores`)
            other = target.client(pool=1)
            for prefix in (p for prefixes in partition for p in prefixes):
                yield from target.list_prefix(
                    other, prefix, layout=built, skip_above_epoch=skip_above_epoch, on_request=count
                )
            return
        client = make_client(target, pool=1)
        for prefixes in partition:
            for prefix in prefixes:
                yield from list_prefix(
                    client,
                    target,
                    prefix,
                    layout=built,
                    skip_above_epoch=skip_above_epoch,
                    on_request=count,
                    versions=versions,
                )

    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(run)
    return spark.createDataFrame(rdd, LISTING_SCHEMA)
