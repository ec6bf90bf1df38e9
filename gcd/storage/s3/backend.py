"""S3 (and S3-compatible servers) as a `gcd.storage.backend.Backend`: ``s3://bucket/root``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from gcd.storage.backend import StoreSettings, StoreUrl, settings_of
from gcd.storage.objectstore import BucketStore, StoreFeatures
from gcd.storage.s3.client import S3ObjectStore, preflight
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.binding import StorageTarget

__all__ = ["BACKEND", "S3Backend"]


class S3Backend:
    """The S3 backend (`BACKEND`)."""

    kind = "s3"
    scheme = "s3"

    @contextlib.asynccontextmanager
    async def open(self, settings: StoreSettings) -> AsyncIterator[BucketStore]:
        """An open `S3ObjectStore`."""
        async with S3ObjectStore.open(settings_of(settings, S3Settings)) as store:
            yield store

    async def preflight(self, settings: StoreSettings, prefix: str) -> StoreFeatures:
        """`gcd.storage.s3.client.preflight` (it logs what it detected)."""
        return await preflight(settings_of(settings, S3Settings), prefix)

    def from_url(self, url: StoreUrl, *, endpoint_url: str | None) -> tuple[StoreSettings, str]:
        """``s3://BUCKET/ROOT``: the bucket, at `endpoint_url` (AWS when None)."""
        return S3Settings(url.netloc, endpoint_url), url.path

    def from_target(self, target: StorageTarget) -> StoreSettings:
        """The bound bucket at the bound endpoint; credentials from botocore's chain."""
        return S3Settings(target.bucket, target.endpoint_url)


BACKEND = S3Backend()
