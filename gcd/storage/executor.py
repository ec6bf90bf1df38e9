"""How Spark executors reach a store: `ExecutorStore`, the `ExecutorClient` it connects,
and the listing and batching loops every store shares.

Design notes: docs/internals/spark.md, `gcd.storage.executor`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gcd.rules.backoff import Backoff
from gcd.rules.cursor import Cursor, Skip, can_skip, next_cursor, skip

if TYPE_CHECKING:
    from gcd.rules.layout import KeyLayout

__all__ = [
    "ExecutorClient",
    "ExecutorStore",
    "Listed",
    "Page",
    "SkipAhead",
    "in_parts",
    "walk_pages",
]

Listed = tuple[str, int, float, str | None, bool, bool]
"""(key, size, last_modified_s, version_id, is_latest, delete_marker): one source row."""
Page = tuple[list[Listed], str | None]
"""One page of a listing: its rows in key order, and the token of the next (None: done)."""


@dataclass(frozen=True, slots=True)
class SkipAhead:
    """A sweep's listing skips past a prefix directory whose rest is above `above_epoch`
    (M) under `layout` (`gcd.rules.cursor`); a report lists everything (no SkipAhead)."""

    layout: KeyLayout
    above_epoch: int


class ExecutorClient(Protocol):
    """A store as one Spark task calls it: a connection made on the executor."""

    def list_prefix(
        self, prefix: str, *, skip: SkipAhead | None = None, on_request: Callable[[], None] = ...
    ) -> Iterator[Listed]:
        """Every object under `prefix`, skipping live prefix directories when asked."""
        ...

    def delete_keys(
        self,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None] = ...,
        on_request: Callable[[], None] = ...,
        on_markers: Callable[[Sequence[tuple[str, str]]], None] = ...,
    ) -> dict[str, str | None]:
        """Delete up to 1000 keys; key -> None when deleted, else the final error.
        `on_markers` gets (key, version id) of each delete marker a delete wrote (a key
        deleted without a version id on a versioned bucket: the undo window's hide)."""
        ...

    def exists(self, key: str) -> bool:
        """True when an object named `key` exists (a claim probe)."""
        ...

    def put_object(self, key: str, body: bytes) -> None:
        """Store `body` as object `key` (a journal segment), retried; StorageError."""
        ...


@runtime_checkable
class ExecutorStore(Protocol):
    """A store as the driver ships it to executors: plain values, picklable."""

    @property
    def bucket(self) -> str:
        """The bucket or container, for messages."""
        ...

    @property
    def backoff(self) -> Backoff:
        """The retry schedule of every call."""
        ...

    def connect(self, *, pool: int = 1) -> ExecutorClient:
        """A thread-safe client for `pool` concurrent requests, credentials found here."""
        ...


def walk_pages(
    page: Callable[[Cursor], Page], prefix: str, skip_ahead: SkipAhead | None
) -> Iterator[Listed]:
    """The rows of the pages `page` gives from each cursor, skipping ahead as asked."""
    walk = skip_ahead if skip_ahead is not None and can_skip(skip_ahead.layout) else None
    cursor: Cursor | None = Cursor()
    while cursor is not None:
        rows, token = page(cursor)
        found: Skip | None = None  # the last skip a key of this page called for
        for row in rows:
            skip_to = found.start_after if found is not None else None
            if skip_to is not None and row[0] <= skip_to:
                continue
            yield row
            if walk is not None:
                parsed = walk.layout.parse(row[0])
                found = skip(walk.layout, prefix, parsed, walk.above_epoch) or found
                if found is not None and found.done:
                    break
        cursor = next_cursor(cursor, found, rows[-1][0] if rows else None, token)


def in_parts(
    keys: Sequence[str], size: int, delete: Callable[[list[str]], dict[str, str | None]]
) -> dict[str, str | None]:
    """`delete` of `keys` in parts of at most `size` (a store's batch limit), merged."""
    outcome: dict[str, str | None] = {}
    for start in range(0, len(keys), size):
        outcome.update(delete(list(keys[start : start + size])))
    return outcome
