"""One store type: `StoreSettings`, and opening and checking the store it names.

Design notes: docs/internals/storage.md, `gcd.storage.open`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, assert_never

from gcd.storage.azsettings import AzureSettings
from gcd.storage.gcssettings import GcsSettings
from gcd.storage.s3 import S3ObjectStore, S3Settings, preflight
from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError, StorageError

__all__ = ["StoreSettings", "open_objects", "open_store", "preflight_store", "target_of"]

StoreSettings = S3Settings | AzureSettings | GcsSettings
"""The object store a command talks to."""


@contextlib.asynccontextmanager
async def open_store(settings: StoreSettings) -> AsyncIterator[Any]:
    """An open `S3ObjectStore`, `AzureBlobStore` or `GcsObjectStore` (each a sweeper store
    and a claim store), closed on exit."""
    match settings:
        case S3Settings():
            async with S3ObjectStore.open(settings) as s3_store:
                yield s3_store
        case AzureSettings():
            from gcd.storage.azure import AzureBlobStore  # noqa: PLC0415 - the SDK only when used

            async with AzureBlobStore.open(settings) as azure_store:
                yield azure_store
        case GcsSettings():
            from gcd.storage.gcs import GcsObjectStore  # noqa: PLC0415 - the client only when used

            async with GcsObjectStore.open(settings) as gcs_store:
                yield gcs_store
        case _:
            assert_never(settings)


async def preflight_store(settings: StoreSettings, prefix: str) -> None:
    """One listing of `prefix` before any round: ConfigError (exit 2) naming what only the
    operator can fix (missing container or bucket, refused or missing credentials,
    unreachable endpoint)."""
    match settings:
        case S3Settings():
            await preflight(settings, prefix)  # logs what it detected (s3.detected)
        case AzureSettings():
            await _preflight_azure(settings, prefix)
        case GcsSettings():
            await _preflight_gcs(settings, prefix)
        case _:
            assert_never(settings)


def _chosen(
    s3: S3Settings | None, azure: AzureSettings | None, gcs: GcsSettings | None
) -> StoreSettings:
    chosen = gcs or azure or s3
    assert chosen is not None, "no store settings given"
    return chosen


def target_of(
    s3: S3Settings | None, azure: AzureSettings | None, root: str, *, gcs: GcsSettings | None = None
) -> StorageTarget:
    """`_chosen(...).target(root)`: the older form, for the demo."""
    return _chosen(s3, azure, gcs).target(root)


def open_objects(
    s3: S3Settings | None, azure: AzureSettings | None, *, gcs: GcsSettings | None = None
) -> contextlib.AbstractAsyncContextManager[Any]:
    """`open_store` of the one settings given: the older form, for the demo."""
    return open_store(_chosen(s3, azure, gcs))


async def _preflight_azure(azure: AzureSettings, prefix: str) -> None:
    from gcd.storage.azure import AzureBlobStore  # noqa: PLC0415 - the SDK only when used

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


async def _preflight_gcs(gcs: GcsSettings, prefix: str) -> None:
    from gcd.storage.gcs import GcsObjectStore  # noqa: PLC0415 - the client only when used

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
