"""Google Cloud Storage as a `gcd.storage.backend.Backend`: ``gs://bucket/root``."""

from __future__ import annotations

import contextlib
from typing import Any

from gcd.storage.backend import (
    Backend,
    InventoryReport,
    StoreAccess,
    StoreSettings,
    StoreUrl,
    settings_of,
)
from gcd.storage.gcs.settings import GCS_EXECUTOR_REQUIREMENTS, GcsSettings
from gcd.storage.gcs.spark import GcsStore
from gcd.storage.objectstore import BucketStore, StoreFeatures
from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError, StorageError

__all__ = ["BACKEND", "GcsBackend"]


class GcsBackend:
    """The GCS backend (`BACKEND`); its client is imported when a store is opened."""

    kind = "gcs"
    scheme = "gs"

    def open(self, settings: StoreSettings) -> contextlib.AbstractAsyncContextManager[BucketStore]:
        """An open `GcsObjectStore`."""
        from gcd.storage.gcs.client import GcsObjectStore  # noqa: PLC0415 - when used

        return GcsObjectStore.open(settings_of(settings, GcsSettings))

    async def preflight(self, settings: StoreSettings, prefix: str) -> StoreFeatures | None:
        """Check the credentials and list one object; ConfigError for what only the
        operator can fix."""
        await _preflight_gcs(settings_of(settings, GcsSettings), prefix)
        return None

    def from_url(
        self, url: StoreUrl, *, endpoint_url: str | None, access: StoreAccess
    ) -> tuple[StoreSettings, str]:
        """``gs://BUCKET/ROOT``, at `endpoint_url` (an emulator's) when given."""
        return _settings(url.netloc, endpoint_url, access), url.path

    def from_target(self, target: StorageTarget, access: StoreAccess) -> StoreSettings:
        """The bound bucket (at the bound emulator); the key file `access` names, else
        Application Default Credentials."""
        return _settings(target.bucket, target.endpoint_url, access)

    executor_requirements: tuple[str, ...] = GCS_EXECUTOR_REQUIREMENTS

    def executor_store(self, settings: StoreSettings, *, versions: bool) -> GcsStore:
        """The bucket; ConfigError with `versions` (GCS versions are not read)."""
        if versions:
            raise ConfigError("GCS object versions are not listed by Spark jobs")
        return GcsStore.of(settings_of(settings, GcsSettings))

    def inventory_versions(self, settings: StoreSettings, manifest: str) -> bool:
        """False: Storage Insights rows are live objects."""
        return False

    def read_inventory(
        self, spark: Any, settings: StoreSettings, report: InventoryReport, *, versions: bool
    ) -> Any:
        """`gcd.storage.gcs.inventory.read_gcs_inventory` of this bucket's report."""
        from gcd.storage.gcs.inventory import read_gcs_inventory  # noqa: PLC0415 - Spark side

        bucket = settings_of(settings, GcsSettings).bucket
        return read_gcs_inventory(
            spark, report.manifest, inventory_root=report.root, expected_bucket=bucket
        )


async def _preflight_gcs(gcs: GcsSettings, prefix: str) -> None:
    from gcd.storage.gcs.client import GcsObjectStore  # noqa: PLC0415 - the client only when used

    where = f"GCS bucket {gcs.bucket!r}" + (f" at {gcs.endpoint_url}" if gcs.endpoint_url else "")
    try:
        async with GcsObjectStore.open(gcs) as store:
            await store.check_credentials()
            await store.list_page(prefix, max_keys=1)
    except StorageError as exc:
        if exc.code == "NoCredentials":
            raise ConfigError(
                f"no Google credentials for {where}: set GOOGLE_APPLICATION_CREDENTIALS or "
                "--gcs-credentials-file to a key file, run `gcloud auth application-default "
                "login`, or use GKE workload identity (docs/operations.md)"
            ) from exc
        if exc.code == "NoSuchBucket":
            raise ConfigError(f"{where} does not exist: check --bucket") from exc
        if exc.code in {
            "401",
            "403",
            "forbidden",
            "authError",
            "unauthorized",
            "insufficientPermissions",
            "accessDenied",
        }:
            raise ConfigError(
                f"listing {where} was refused ({exc.code}): the identity needs the l0gc "
                "sweeper role on the bucket (storage.objects.list, .delete, .get, .create; "
                "docs/operations.md)"
            ) from exc
        if exc.code == "ConnectionError":
            raise ConfigError(
                f"cannot reach {gcs.api_root}: check --endpoint-url, DNS and the network ({exc})"
            ) from exc
        raise


def _settings(bucket: str, endpoint_url: str | None, access: StoreAccess) -> GcsSettings:
    return GcsSettings(bucket, endpoint_url, access.gcs_credentials_file, access.gcs_anonymous)


BACKEND: Backend = GcsBackend()
