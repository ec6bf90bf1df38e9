"""List mode on GCS: executors page through objects.list, one task per prefix range.

Design notes: docs/internals/spark.md, `gcd.storage.gcs.executor_listing`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any

from gcd.rules.cursor import Cursor, Skip, can_skip, next_cursor, skip
from gcd.rules.layout import KeyLayout
from gcd.storage.gcs.executor import GcsClient
from gcd.storage.sync_retry import retry
from l0gc.errors import StorageError

__all__ = ["list_prefix"]

_PAGE = 1000


def list_prefix(
    client: GcsClient,
    prefix: str,
    *,
    layout: KeyLayout | None = None,
    skip_above_epoch: int | None = None,
    on_request: Any = None,
    rng: random.Random | None = None,
    versions: bool = False,
) -> Iterator[tuple[str, int, float, str | None, bool, bool]]:
    """Every object under `prefix` as source rows (key, size, updated, no version id,
    latest, not a marker), skipping live prefix directories when asked."""
    if versions:
        raise StorageError(
            "GCS object versions are not listed by Spark jobs",
            code="InvalidRequest",
            retryable=False,
        )
    limit = skip_above_epoch if layout is not None and can_skip(layout) else None
    target = client.target
    cursor: Cursor | None = Cursor()
    seen: set[tuple[str | None, str]] = set()  # (start after, token): a skip starts anew
    while cursor is not None:
        if cursor.token is not None:
            if (cursor.start_after, cursor.token) in seen:
                raise StorageError(
                    f"objects.list {target.url}/{prefix}: the server gave page "
                    f"token {cursor.token!r} again; it would be listed forever",
                    code="ListingLoop",
                    retryable=False,
                )
            seen.add((cursor.start_after, cursor.token))
        if on_request is not None:
            on_request()
        rows, token = retry(
            functools.partial(
                client.list_page,
                prefix,
                after=cursor.start_after,
                page_token=cursor.token,
                max_keys=_PAGE,
            ),
            backoff=target.backoff,
            rng=rng,
        )
        found: Skip | None = None  # the last skip a key of this page called for
        for key, size, updated in rows:
            skip_to = found.start_after if found is not None else None
            if skip_to is not None and key <= skip_to:
                continue
            yield key, size, updated, None, True, False
            if limit is not None and layout is not None:
                found = skip(layout, prefix, layout.parse(key), limit) or found
                if found is not None and found.done:
                    break
        last = rows[-1][0] if rows else None
        cursor = next_cursor(cursor, found, last, token)
