"""Which object store a command talks to: S3 (`--bucket`) or Azure Blob Storage
(`--storage azure --account-url URL --container NAME`), and how to open and check it.

S3 is the default and keeps its flags. Azure credentials come from the Azure standard
chain (`DefaultAzureCredential`: workload identity, managed identity, environment) or
from a connection string in a file (`--azure-connection-string-file`), never from a flag
value. A namespace binding names the account URL and the container (kind ``azure``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gcd.azsettings import AzureSettings
from gcd.cli.options import Option, text
from gcd.errors import ConfigError, StorageError
from gcd.s3store import S3ObjectStore, S3Settings, preflight
from watermark.binding import StorageTarget

__all__ = ["AZURE_OPTIONS", "azure_settings", "open_objects", "preflight_storage", "target_of"]

STORAGES = ("s3", "azure")
AZURE_OPTIONS: tuple[Option, ...] = (
    Option("--storage", text, "s3", "object store: s3 (default) or azure", "KIND"),
    Option("--account-url", text, None,
           "--storage azure: the account's blob endpoint, "
           "e.g. https://ACCOUNT.blob.core.windows.net", "URL"),
    Option("--container", text, None, "--storage azure: the container of the L0 objects",
           "NAME"),
    Option("--azure-connection-string-file", text, None,
           "--storage azure: read a connection string from this file (default: the Azure "
           "credential chain: workload identity, managed identity, environment)", "FILE"),
)  # fmt: skip


def azure_settings(args: argparse.Namespace) -> AzureSettings | None:
    """The Azure settings when `--storage azure`, else None (S3); ConfigError on a mix."""
    storage = getattr(args, "storage", "s3") or "s3"
    if storage not in STORAGES:
        raise ConfigError(f"--storage {storage!r}: choose s3 or azure")
    azure_flags = [name for name in ("account_url", "container", "azure_connection_string_file")
                   if getattr(args, name, None) is not None]  # fmt: skip
    if storage == "s3":
        if azure_flags:
            flag = "--" + azure_flags[0].replace("_", "-")
            raise ConfigError(f"{flag} is for Azure Blob Storage: add --storage azure")
        return None
    if getattr(args, "bucket", None) is not None:
        raise ConfigError("--bucket is for S3; with --storage azure give --account-url and "
                          "--container")  # fmt: skip
    if args.account_url is None or args.container is None:
        raise ConfigError("--storage azure needs --account-url URL and --container NAME")
    return AzureSettings(args.account_url, args.container, args.azure_connection_string_file)


def target_of(s3: S3Settings | None, azure: AzureSettings | None, root: str) -> StorageTarget:
    """The storage a command sweeps, as a namespace binding names it."""
    if azure is not None:
        return StorageTarget(azure.container, root, azure.account_url, kind="azure")
    assert s3 is not None
    return StorageTarget(s3.bucket, root, s3.endpoint_url)


@contextlib.asynccontextmanager
async def open_objects(s3: S3Settings | None, azure: AzureSettings | None) -> AsyncIterator[Any]:
    """An open `S3ObjectStore` or `AzureBlobStore` (both are sweeper stores and claim stores)."""
    if azure is not None:
        from gcd.azstore import AzureBlobStore  # noqa: PLC0415 - the SDK only when used

        async with AzureBlobStore.open(azure) as store:
            yield store
        return
    assert s3 is not None
    async with S3ObjectStore.open(s3) as s3_store:
        yield s3_store


async def preflight_storage(s3: S3Settings | None, azure: AzureSettings | None,
                            prefix: str) -> None:  # fmt: skip
    """One listing of `prefix` before any round: ConfigError (exit 2) naming what only the
    operator can fix (missing container, refused credentials, unreachable endpoint)."""
    if azure is None:
        assert s3 is not None
        await preflight(s3, prefix)
        return
    from gcd.azstore import AzureBlobStore  # noqa: PLC0415 - the SDK only when used

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
