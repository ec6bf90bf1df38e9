"""Azure Blob Storage as a `gcd.storage.backend.Backend`: ``az://account/container/root``."""

from __future__ import annotations

import contextlib
from typing import Any

from gcd.storage.azure.executor import AzureTarget
from gcd.storage.azure.settings import AZURE_EXECUTOR_REQUIREMENTS, AzureSettings
from gcd.storage.backend import (
    Backend,
    InventoryReport,
    StoreAccess,
    StoreSettings,
    StoreUrl,
    settings_of,
)
from gcd.storage.objectstore import BucketStore, StoreFeatures
from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError, StorageError

__all__ = ["BACKEND", "AzureBackend"]


class AzureBackend:
    """The Azure backend (`BACKEND`); the SDK is imported when a store is opened."""

    kind = "azure"
    scheme = "az"

    def open(self, settings: StoreSettings) -> contextlib.AbstractAsyncContextManager[BucketStore]:
        """An open `AzureBlobStore`."""
        from gcd.storage.azure.client import AzureBlobStore  # noqa: PLC0415 - the SDK when used

        return AzureBlobStore.open(settings_of(settings, AzureSettings))

    async def preflight(self, settings: StoreSettings, prefix: str) -> StoreFeatures | None:
        """List one blob; ConfigError for a missing container, refused credentials or an
        unreachable account."""
        await _preflight_azure(settings_of(settings, AzureSettings), prefix)
        return None

    def from_url(
        self, url: StoreUrl, *, endpoint_url: str | None, access: StoreAccess
    ) -> tuple[StoreSettings, str]:
        """``az://ACCOUNT/CONTAINER/ROOT``: the account's blob endpoint (or `endpoint_url`,
        an emulator's, e.g. Azurite's http://127.0.0.1:10000/devstoreaccount1)."""
        container, _, root = url.path.partition("/")
        account_url = endpoint_url or f"https://{url.netloc}.blob.core.windows.net"
        if not container:
            shown = f"az://{url.netloc}"
            raise ConfigError(
                f"store URL {shown!r} names no container: give az://ACCOUNT/CONTAINER/ROOT"
            )
        return AzureSettings(account_url, container, access.azure_connection_string_file), root

    def from_target(self, target: StorageTarget, access: StoreAccess) -> StoreSettings:
        """The bound container at the bound account URL; the connection string file
        `access` names, else credentials from the Azure chain."""
        if target.endpoint_url is None:
            raise ConfigError(f"{target.describe()} names no account URL: bind it again")
        connection = access.azure_connection_string_file
        return AzureSettings(target.endpoint_url, target.bucket, connection)

    executor_requirements: tuple[str, ...] = AZURE_EXECUTOR_REQUIREMENTS

    def executor_store(self, settings: StoreSettings, *, versions: bool) -> AzureTarget:
        """The container (base blobs only: versioned Azure is not swept)."""
        del versions
        return AzureTarget(settings_of(settings, AzureSettings))

    def inventory_versions(self, settings: StoreSettings, manifest: str) -> bool:
        """False (rows of versions are dropped); ConfigError for a report of another
        container (`BlobInventoryManifest.check_covers`)."""
        from gcd.storage.azure.inventory import BlobInventoryManifest  # noqa: PLC0415 - Spark

        azure = settings_of(settings, AzureSettings)
        BlobInventoryManifest.load(manifest).check_covers(
            azure.account_url, azure.container, where=manifest
        )
        return False

    def read_inventory(
        self, spark: Any, settings: StoreSettings, report: InventoryReport, *, versions: bool
    ) -> Any:
        """`gcd.storage.azure.inventory.read_blob_inventory` of this container's rows."""
        from gcd.storage.azure.inventory import read_blob_inventory  # noqa: PLC0415 - Spark

        azure = settings_of(settings, AzureSettings)
        return read_blob_inventory(
            spark,
            report.manifest,
            account_url=azure.account_url,
            container=azure.container,
            inventory_root=report.root,
        )


async def _preflight_azure(azure: AzureSettings, prefix: str) -> None:
    from gcd.storage.azure.client import AzureBlobStore  # noqa: PLC0415 - the SDK when used

    where = f"container {azure.container!r} at {azure.shown_url}"
    try:
        async with AzureBlobStore.open(azure) as store:
            await store.list_page(prefix, max_keys=1)
    except StorageError as exc:
        if exc.code == "ContainerNotFound":
            raise ConfigError(
                f"{where} does not exist: check --container and --account-url"
            ) from exc
        if exc.code in {
            "AuthenticationFailed",
            "AuthorizationFailure",
            "AuthorizationPermissionMismatch",
            "403",
        }:
            raise ConfigError(
                f"listing {where} was refused ({exc.code}): the identity needs the Storage "
                "Blob Data Contributor role on the container (docs/operations.md), or the "
                "connection string is wrong"
            ) from exc
        if exc.code == "ConnectionError":
            raise ConfigError(
                f"cannot reach {azure.shown_url}: check --account-url, DNS and the network ({exc})"
            ) from exc
        raise


BACKEND: Backend = AzureBackend()
