"""List mode: executors list the bucket with ListObjectsV2, one task per prefix range.

Design notes: docs/internals/spark.md, `gcd.spark.listing`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Iterator
from typing import Any

from gcd.rules.cursor import Cursor, Skip, can_skip, next_cursor, skip
from gcd.rules.layout import PREFIX_COUNT, KeyLayout, listing_prefixes
from gcd.storage.executor import ExecutorStore
from gcd.storage.rows import SOURCE_SCHEMA, LayoutSpec
from gcd.storage.s3.executor import S3Target, call_with_retries, make_client

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
        if not isinstance(target, S3Target):  # another store (`gcd.storage.executor`)
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
