"""The demo's S3 side: its own client for writers and read-back, and a watching store.

`DemoBucket` is one aiobotocore client used by the simulated writers (PutObject), by
the end-of-run verification (HeadObject, ListObjectsV2) and to create the bucket. Its
requests are not the sweeper's, so they are counted apart.

`CountingStore` wraps the sweeper's real `ObjectStore` (`S3ObjectStore`, or
`AzureBlobStore` for `--storage azure`): it passes every request through unchanged,
counts LIST and DELETE requests, and reports each completed delete to the ledger the
moment it completes, so a referenced object that the sweeper deletes is noticed at once
(`demo.live_object_deleted`), not only at the end. It counts the sweeper's calls: on
Azure one delete batch may be up to four Blob Batch requests (256 blobs each).

The Azure counterpart of `DemoBucket` is `l0lab.demo.azio.DemoContainer`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

import structlog
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore import exceptions as botocore_errors

from gcd.storage.objectstore import BucketStore, DeleteResult, ListOptions, ListPage
from gcd.storage.s3.errors import translate_error
from gcd.storage.s3.settings import S3Settings
from l0gc.errors import StorageError
from l0lab.testing.ledger import Ledger

__all__ = ["CountingStore", "DemoBucket", "RequestCounts"]

_log = structlog.get_logger("gcd.demo")
_BODY = b"l0 object written by gcd demo\n"
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})


@dataclass(slots=True)
class RequestCounts:
    """Requests the sweeper sent, and what they did."""

    list_requests: int = 0
    delete_requests: int = 0
    deleted: int = 0


class CountingStore:
    """An `ObjectStore` that counts the sweeper's requests and tells the ledger what went."""

    def __init__(self, inner: BucketStore, ledger: Ledger, clock: Callable[[], float]) -> None:
        self._inner = inner
        self._ledger = ledger
        self._clock = clock
        self.counts = RequestCounts()
        self.deleted_at: list[tuple[float, int]] = []  # (time, deleted so far), for rates

    async def list_page(self, prefix: str, **options: Unpack[ListOptions]) -> ListPage:
        """ListObjectsV2, counted."""
        self.counts.list_requests += 1
        return await self._inner.list_page(prefix, **options)

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """A small object (a claim), from the store itself."""
        return await self._inner.get_object(key, max_bytes=max_bytes)

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """A small object (a claim, a journal segment), to the store itself."""
        return await self._inner.put_object(key, body, if_absent=if_absent)

    def __getattr__(self, name: str) -> Any:
        """What else the store can do (detect, versions, soft delete), as the store does it."""
        return getattr(self._inner, name)

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """DeleteObjects, counted; deleted keys go to the ledger as soon as it answers."""
        self.counts.delete_requests += 1
        result = await self._inner.delete_batch(keys)
        self.counts.deleted += len(result.deleted)
        self.deleted_at.append((self._clock(), self.counts.deleted))
        for loss in self._ledger.deleted(result.deleted):
            _log.error(
                "demo.live_object_deleted", key=loss.key, partition=loss.partition, epoch=loss.epoch
            )
        return result

    def delete_rate(self, now: float, window_s: float = 5.0) -> float:
        """Objects deleted per second over the last `window_s` seconds."""
        start = now - window_s
        before = 0
        for at, total in self.deleted_at:
            if at <= start:
                before = total
        return max(0, self.counts.deleted - before) / window_s


class DemoBucket:
    """The demo's own client on the bucket: put, head, list, create."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self.bucket = bucket
        self.put_requests = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: S3Settings) -> AsyncIterator[DemoBucket]:
        """A client for `settings` (botocore retries on: the writers are not under test)."""
        config = AioConfig(
            retries={"max_attempts": 5, "mode": "standard"},
            max_pool_connections=settings.max_pool_connections,
        )
        context = get_session().create_client(
            "s3", endpoint_url=settings.endpoint_url, region_name=settings.region, config=config
        )
        try:
            client = await context.__aenter__()
        except (botocore_errors.BotoCoreError, botocore_errors.ClientError) as exc:
            raise translate_error(exc, "opening the demo's S3 client") from exc
        try:
            yield cls(client, settings.bucket)
        finally:
            await context.__aexit__(None, None, None)

    async def _call(self, operation: str, **params: Any) -> Any:
        try:
            return await getattr(self._client, operation)(Bucket=self.bucket, **params)
        except (
            botocore_errors.BotoCoreError,
            botocore_errors.ClientError,
            OSError,
            TimeoutError,
        ) as exc:
            raise translate_error(exc, f"{operation} on s3://{self.bucket}") from exc

    async def ensure_bucket(self) -> None:
        """Create the bucket unless it exists."""
        try:
            await self._call("head_bucket")
        except StorageError as exc:
            if exc.code not in _NOT_FOUND | {"NoSuchBucket"}:
                raise
            await self._call("create_bucket")

    async def put(self, key: str) -> None:
        """Upload one small object."""
        self.put_requests += 1
        await self._call("put_object", Key=key, Body=_BODY)

    async def exists(self, key: str) -> bool:
        """HeadObject: True when the object is there."""
        try:
            await self._call("head_object", Key=key)
        except StorageError as exc:
            if exc.code in _NOT_FOUND:
                return False
            raise
        return True

    async def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (all pages)."""
        keys: list[str] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Prefix": prefix}
            if token is not None:
                params["ContinuationToken"] = token
            page = await self._call("list_objects_v2", **params)
            keys.extend(item["Key"] for item in page.get("Contents", ()))
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if token is None:
                return keys
