"""S3 (and S3-compatible servers) as a `gcd.storage.backend.Backend`: ``s3://bucket/root``."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from gcd.storage.backend import (
    Backend,
    InventoryReport,
    StoreAccess,
    StoreSettings,
    StoreUrl,
    settings_of,
)
from gcd.storage.objectstore import BucketStore, StoreFeatures
from gcd.storage.s3.client import S3ObjectStore, preflight
from gcd.storage.s3.executor import S3Target
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.binding import StorageTarget

__all__ = ["BACKEND", "S3Backend"]


class S3Backend:
    """The S3 backend (`BACKEND`)."""

    kind = "s3"
    scheme = "s3"

    def open(self, settings: StoreSettings) -> contextlib.AbstractAsyncContextManager[BucketStore]:
        """An open `S3ObjectStore`."""
        return S3ObjectStore.open(settings_of(settings, S3Settings))

    async def preflight(self, settings: StoreSettings, prefix: str) -> StoreFeatures:
        """`gcd.storage.s3.client.preflight` (it logs what it detected)."""
        return await preflight(settings_of(settings, S3Settings), prefix)

    def from_url(
        self, url: StoreUrl, *, endpoint_url: str | None, access: StoreAccess
    ) -> tuple[StoreSettings, str]:
        """``s3://BUCKET/ROOT``: the bucket, at `endpoint_url` (AWS when None)."""
        return _settings(url.netloc, endpoint_url, access), url.path

    def from_target(self, target: StorageTarget, access: StoreAccess) -> StoreSettings:
        """The bound bucket at the bound endpoint; credentials from botocore's chain."""
        return _settings(target.bucket, target.endpoint_url, access)

    executor_requirements: tuple[str, ...] = ()

    def executor_store(self, settings: StoreSettings, *, versions: bool) -> S3Target:
        """The bucket at its endpoint and region (every version with `versions`)."""
        s3 = settings_of(settings, S3Settings)
        return S3Target(s3.bucket, s3.endpoint_url, s3.region, versions=versions)

    def inventory_versions(self, settings: StoreSettings, manifest: str) -> bool:
        """True when the S3 Inventory lists versions (`InventoryManifest.has_versions`)."""
        from gcd.storage.s3.inventory import InventoryManifest  # noqa: PLC0415 - Spark side

        return InventoryManifest.load(manifest).has_versions

    def read_inventory(
        self, spark: Any, settings: StoreSettings, report: InventoryReport, *, versions: bool
    ) -> Any:
        """`gcd.storage.s3.inventory.read_inventory` of this bucket's report."""
        from gcd.storage.s3.inventory import read_inventory  # noqa: PLC0415 - Spark side

        bucket = settings_of(settings, S3Settings).bucket
        return read_inventory(
            spark,
            report.manifest,
            inventory_root=report.root,
            expected_bucket=bucket,
            versions=versions,
        )


def _settings(bucket: str, endpoint_url: str | None, access: StoreAccess) -> S3Settings:
    settings = S3Settings(bucket, endpoint_url, access.region)
    if access.max_pool_connections is None:
        return settings
    return dataclasses.replace(settings, max_pool_connections=access.max_pool_connections)


BACKEND: Backend = S3Backend()
