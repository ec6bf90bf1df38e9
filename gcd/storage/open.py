"""Open and check the object store a command names: S3, Azure Blob Storage or GCS.

`target_of` gives the `StorageTarget` a namespace binding names; `open_objects` opens the
store (the Azure SDK and the GCS client are imported only when used); `preflight_storage`
lists once before any round and turns what only the operator can fix into a ConfigError.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gcd.errors import StorageError
from gcd.storage.azsettings import AzureSettings
from gcd.storage.gcssettings import GcsSettings
from gcd.storage.s3 import S3ObjectStore, S3Settings, preflight
from watermark.core.binding import StorageTarget
from watermark.errors import ConfigError

__all__ = ["open_objects", "preflight_storage", "target_of"]


def target_of(s3: S3Settings | None, azure: AzureSettings | None, root: str, *,
              gcs: GcsSettings | None = None) -> StorageTarget:  # fmt: skip
    """The storage a command sweeps, as a namespace binding names it."""
    if gcs is not None:
        return StorageTarget(gcs.bucket, root, gcs.endpoint_url, kind="gcs")
    if azure is not None:
        return StorageTarget(azure.container, root, azure.account_url, kind="azure")
    assert s3 is not None
    return StorageTarget(s3.bucket, root, s3.endpoint_url)


@contextlib.asynccontextmanager
async def open_objects(s3: S3Settings | None, azure: AzureSettings | None, *,
                       gcs: GcsSettings | None = None) -> AsyncIterator[Any]:  # fmt: skip
    """An open `S3ObjectStore`, `AzureBlobStore` or `GcsObjectStore` (each a sweeper store
    and a claim store)."""
    if gcs is not None:
        from gcd.storage.gcs import GcsObjectStore  # noqa: PLC0415 - the client only when used

        async with GcsObjectStore.open(gcs) as gcs_store:
            yield gcs_store
        return
    if azure is not None:
        from gcd.storage.azure import AzureBlobStore  # noqa: PLC0415 - the SDK only when used

        async with AzureBlobStore.open(azure) as store:
            yield store
        return
    assert s3 is not None
    async with S3ObjectStore.open(s3) as s3_store:
        yield s3_store


async def preflight_storage(s3: S3Settings | None, azure: AzureSettings | None,
                            prefix: str, *, gcs: GcsSettings | None = None) -> None:  # fmt: skip
    """One listing of `prefix` before any round: ConfigError (exit 2) naming what only the
    operator can fix (missing container or bucket, refused or missing credentials,
    unreachable endpoint)."""
    if gcs is not None:
        await _preflight_gcs(gcs, prefix)
        return
    if azure is None:
        assert s3 is not None
        await preflight(s3, prefix)  # logs what it detected (s3.detected)
        return
    from gcd.storage.azure import AzureBlobStore  # noqa: PLC0415 - the SDK only when used

    where = f"container {azure.container!r} at {azure.account_url}"
    try:
        async with AzureBlobStore.open(azure) as store:
            await store.list_page(prefix, max_keys=1)
    except StorageError as exc:
        if exc.code == "ContainerNotFound":
            raise ConfigError(f"{where} does not exist: check --container and "
                              "--account-url") from exc  # fmt: skip
        if exc.code in {"AuthenticationFailed", "AuthorizationFailure",
                        "AuthorizationPermissionMismatch", "403"}:  # fmt: skip
            raise ConfigError(
                f"listing {where} was refused ({exc.code}): the identity needs the Storage "
                "Blob Data Contributor role on the container (docs/operations.md), or the "
                "connection string is wrong"
            ) from exc
        if exc.code == "ConnectionError":
            raise ConfigError(f"cannot reach {azure.account_url}: check --account-url, DNS "
                              f"and the network ({exc})") from exc  # fmt: skip
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
        if exc.code in {"401", "403", "forbidden", "authError", "unauthorized",
                        "insufficientPermissions", "accessDenied"}:  # fmt: skip
            raise ConfigError(
                f"listing {where} was refused ({exc.code}): the identity needs the l0gc "
                "sweeper role on the bucket (storage.objects.list, .delete, .get, .create; "
                "docs/operations.md)"
            ) from exc
        if exc.code == "ConnectionError":
            raise ConfigError(f"cannot reach {gcs.api_root}: check --endpoint-url, DNS and "
                              f"the network ({exc})") from exc  # fmt: skip
        raise
