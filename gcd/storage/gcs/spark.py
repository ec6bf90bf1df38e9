"""GCS on Spark executors: `GcsStore` and the `GcsExecutor` it connects.

Design notes: docs/internals/spark.md, `gcd.storage.gcs.spark`.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from gcd.rules.backoff import Backoff
from gcd.rules.cursor import Cursor
from gcd.storage.executor import Listed, Page, SkipAhead, in_parts, walk_pages
from gcd.storage.gcs.executor import GcsClient, GcsTarget
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.gcs.wire import MAX_BATCH
from gcd.storage.objectstore import DeleteResult, KeyFailure
from gcd.storage.sync_retry import delete_triaged, retry
from l0gc.errors import StorageError

if TYPE_CHECKING:
    pass

__all__ = ["GcsExecutor", "GcsStore"]

_PAGE = 1000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GcsStore:
    """One GCS bucket as the executors reach it (an `gcd.storage.executor.ExecutorStore`)."""

    target: GcsTarget

    @classmethod
    def of(cls, settings: GcsSettings) -> GcsStore:
        """From the daemon's settings (`gcd.cli.storage.gcs_settings`)."""
        return cls(GcsTarget.of(settings))

    @property
    def bucket(self) -> str:
        """The bucket, for messages."""
        return self.target.bucket

    @property
    def backoff(self) -> Backoff:
        """The retry schedule of every call."""
        return self.target.backoff

    def connect(self, *, pool: int = 1) -> GcsExecutor:
        """A `GcsExecutor` over one task's `GcsClient`."""
        return GcsExecutor(self.target.client(pool=pool))


@dataclass(slots=True)
class GcsExecutor:
    """One task's connection to the bucket (an `gcd.storage.executor.ExecutorClient`)."""

    client: GcsClient
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep

    def _retried(self, operation: Callable[[], T]) -> T:
        backoff = self.client.target.backoff
        return retry(operation, backoff=backoff, rng=self.rng, sleep=self.sleep)

    def list_prefix(
        self,
        prefix: str,
        *,
        skip: SkipAhead | None = None,
        on_request: Callable[[], None] = lambda: None,
    ) -> Iterator[Listed]:
        """Every object under `prefix` as source rows (key, size, updated, no version id,
        latest, not a marker), skipping live prefix directories when asked; a page token
        given again for the same start is refused (``ListingLoop``)."""
        seen: set[tuple[str | None, str]] = set()  # (start after, token): a skip starts anew

        def page(cursor: Cursor) -> Page:
            if cursor.token is not None:
                if (cursor.start_after, cursor.token) in seen:
                    raise StorageError(
                        f"objects.list {self.client.target.url}/{prefix}: the server gave "
                        f"page token {cursor.token!r} again; it would be listed forever",
                        code="ListingLoop",
                        retryable=False,
                    )
                seen.add((cursor.start_after, cursor.token))
            on_request()
            listed, token = self._retried(
                functools.partial(
                    self.client.list_page,
                    prefix,
                    after=cursor.start_after,
                    page_token=cursor.token,
                    max_keys=_PAGE,
                )
            )
            return [(key, size, updated, None, True, False) for key, size, updated in listed], token

        return walk_pages(page, prefix, skip)

    def delete_keys(
        self,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None] = lambda _count: None,
        on_request: Callable[[], None] = lambda: None,
        on_markers: Callable[[Sequence[tuple[str, str]]], None] = lambda _markers: None,
    ) -> dict[str, str | None]:
        """Delete up to 1000 keys in JSON batches of 100, each retried as a whole and per
        key; key -> None when deleted, else the final error text (``"code: message"``)."""
        del on_markers  # no delete markers on this store

        def send(batch: list[str]) -> tuple[Sequence[str], Sequence[KeyFailure]]:
            def request() -> DeleteResult:
                pace(len(batch))
                on_request()
                return self.client.delete_batch(batch)

            result = self._retried(request)
            return result.deleted, result.errors

        return in_parts(
            keys,
            MAX_BATCH,
            lambda part: delete_triaged(
                part,
                send,
                backoff=self.client.target.backoff,
                rng=self.rng,
                sleep=self.sleep,
                unanswered="not answered by the batch",
                failed=lambda exc: f"{exc.code}: {exc}",
            ),
        )

    def exists(self, key: str) -> bool:
        """True when object `key` exists (a claim probe), retried."""
        return bool(self._retried(lambda: self.client.exists(key)))

    def put_object(self, key: str, body: bytes) -> None:
        """A media upload of `key` (a journal segment), retried."""
        self._retried(lambda: self.client.upload(key, body))
