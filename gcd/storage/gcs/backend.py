"""Google Cloud Storage as a `gcd.storage.backend.Backend`: ``gs://bucket/root``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from gcd.storage.backend import StoreSettings, StoreUrl, settings_of
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.objectstore import BucketStore, StoreFeatures
from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError, StorageError

__all__ = ["BACKEND", "GcsBackend"]


class GcsBackend:
    """The GCS backend (`BACKEND`); its client is imported when a store is opened."""

    kind = "gcs"
    scheme = "gs"

    @contextlib.asynccontextmanager
    async def open(self, settings: StoreSettings) -> AsyncIterator[BucketStore]:
        """An open `GcsObjectStore`."""
        from gcd.storage.gcs.client import GcsObjectStore  # noqa: PLC0415 - when used

        async with GcsObjectStore.open(settings_of(settings, GcsSettings)) as store:
            yield store

    async def preflight(self, settings: StoreSettings, prefix: str) -> StoreFeatures | None:
        """Check the credentials and list one object; ConfigError for what only the
        operator can fix."""
        await _preflight_gcs(settings_of(settings, GcsSettings), prefix)
        return None

    def from_url(self, url: StoreUrl, *, endpoint_url: str | None) -> tuple[StoreSettings, str]:
        """``gs://BUCKET/ROOT``, at `endpoint_url` (an emulator's) when given."""
        return GcsSettings(url.netloc, endpoint_url), url.path

    def from_target(self, target: StorageTarget) -> StoreSettings:
        """The bound bucket (at the bound emulator); Application Default Credentials."""
        return GcsSettings(target.bucket, target.endpoint_url)


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


BACKEND = GcsBackend()
