"""Which object store a command talks to: S3 (`--bucket`), Azure Blob Storage
(`--storage azure --account-url URL --container NAME`) or Google Cloud Storage
(`--storage gcs --bucket NAME`): `store_settings` turns the flags into the one
`gcd.storage.registry.StoreSettings` value; `gcd.storage.registry` opens it.

S3 is the default and keeps its flags. Azure credentials come from the Azure standard
chain (`DefaultAzureCredential`: workload identity, managed identity, environment) or
from a connection string in a file (`--azure-connection-string-file`), never from a flag
value. A namespace binding names the account URL and the container (kind ``azure``).
GCS credentials are Application Default Credentials (GKE workload identity through the
metadata server) or a key file (`--gcs-credentials-file`); a binding of kind ``gcs``
names the bucket and the endpoint when one is given (an emulator).
"""

from __future__ import annotations

import argparse
import dataclasses

from gcd.storage.azure.settings import AzureSettings
from gcd.storage.backend import StoreAccess, StoreSettings
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.registry import store_from_url
from gcd.storage.s3.settings import S3Settings
from l0gc.errors import ConfigError
from l0gc.options import Option, boolean, text

__all__ = [
    "AZURE_OPTIONS",
    "GCS_OPTIONS",
    "NO_BUCKET",
    "access_of",
    "azure_settings",
    "gcs_settings",
    "store_settings",
]

STORAGES = ("s3", "azure", "gcs")
NO_BUCKET = (
    "no bucket given: pass --bucket NAME or set L0GC_BUCKET (or --storage azure "
    "--account-url URL --container NAME)"
)
"""The error when no store is named at all."""
AZURE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--storage", text, "s3", "object store: s3 (default), azure or gcs", "KIND", values=STORAGES
    ),
    Option(
        "--account-url",
        text,
        None,
        "--storage azure: the account's blob endpoint, e.g. https://ACCOUNT.blob.core.windows.net",
        "URL",
    ),
    Option("--container", text, None, "--storage azure: the container of the L0 objects", "NAME"),
    Option(
        "--azure-connection-string-file",
        text,
        None,
        "--storage azure: read a connection string from this file (default: the Azure "
        "credential chain: workload identity, managed identity, environment)",
        "FILE",
    ),
)


GCS_OPTIONS: tuple[Option, ...] = (
    Option(
        "--gcs-credentials-file",
        text,
        None,
        "--storage gcs: a service-account key or ADC file (default: Application Default "
        "Credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud, GKE workload identity)",
        "FILE",
    ),
    Option(
        "--gcs-anonymous",
        boolean,
        False,
        "--storage gcs: send no credentials (an emulator at --endpoint-url)",
        switch=True,
    ),
)


def _storage(args: argparse.Namespace) -> str:
    storage = getattr(args, "storage", "s3") or "s3"
    if storage not in STORAGES:
        raise ConfigError(f"--storage {storage!r}: choose s3, azure or gcs")
    return str(storage)


def gcs_settings(args: argparse.Namespace) -> GcsSettings | None:
    """The GCS settings when `--storage gcs` (`--bucket`, `--endpoint-url`), else None."""
    storage = _storage(args)
    credentials = getattr(args, "gcs_credentials_file", None)
    anonymous = bool(getattr(args, "gcs_anonymous", False))
    if storage != "gcs":
        if credentials is not None or anonymous:
            flag = "--gcs-credentials-file" if credentials is not None else "--gcs-anonymous"
            raise ConfigError(f"{flag} is for Google Cloud Storage: add --storage gcs")
        return None
    if getattr(args, "bucket", None) is None:
        raise ConfigError("--storage gcs needs --bucket NAME (or L0GC_BUCKET)")
    return GcsSettings(args.bucket, getattr(args, "endpoint_url", None), credentials, anonymous)


def azure_settings(args: argparse.Namespace) -> AzureSettings | None:
    """The Azure settings when `--storage azure`, else None (S3); ConfigError on a mix."""
    storage = _storage(args)
    azure_flags = [
        name
        for name in ("account_url", "container", "azure_connection_string_file")
        if getattr(args, name, None) is not None
    ]
    if storage != "azure":
        if azure_flags:
            flag = "--" + azure_flags[0].replace("_", "-")
            raise ConfigError(f"{flag} is for Azure Blob Storage: add --storage azure")
        return None
    if getattr(args, "bucket", None) is not None:
        raise ConfigError(
            "--bucket is for S3; with --storage azure give --account-url and --container"
        )
    if args.account_url is None or args.container is None:
        raise ConfigError("--storage azure needs --account-url URL and --container NAME")
    return AzureSettings(args.account_url, args.container, args.azure_connection_string_file)


def access_of(args: argparse.Namespace, *, max_pool_connections: int | None = None) -> StoreAccess:
    """The credential and client flags of every store kind, as the backends read them."""
    return StoreAccess(
        region=getattr(args, "region", None),
        max_pool_connections=max_pool_connections,
        azure_connection_string_file=getattr(args, "azure_connection_string_file", None),
        gcs_credentials_file=getattr(args, "gcs_credentials_file", None),
        gcs_anonymous=bool(getattr(args, "gcs_anonymous", False)),
    )


def _from_url(args: argparse.Namespace, access: StoreAccess) -> StoreSettings | None:
    """The store `--store URL` names, with the credential flags of its kind; None without."""
    url = getattr(args, "store", None)
    if url is None:
        return None
    named = [
        f"--{name.replace('_', '-')}"
        for name in ("bucket", "container", "account_url")
        if getattr(args, name, None) is not None
    ]
    if named or _storage(args) != "s3":
        flags = ", ".join(named) or f"--storage {_storage(args)}"
        raise ConfigError(f"--store {url!r} names the store already: drop {flags}")
    endpoint_url = getattr(args, "endpoint_url", None)
    settings, root = store_from_url(url, endpoint_url=endpoint_url, access=access)
    args.root = root or getattr(args, "root", None)
    return settings


def store_settings(
    args: argparse.Namespace, *, no_bucket: str = NO_BUCKET, max_pool_connections: int | None = None
) -> StoreSettings:
    """The store the flags name: the one of `--store URL` (whose root becomes `args.root`),
    Azure's or GCS's settings with `--storage azure|gcs`, else S3's (`--bucket`,
    `--endpoint-url`, `--region`; `max_pool_connections` when given); ConfigError
    (`no_bucket` when no bucket is given) on what is missing or mixed."""
    named = _from_url(args, access_of(args, max_pool_connections=max_pool_connections))
    if named is not None:
        return named
    chosen = azure_settings(args) or gcs_settings(args)
    if chosen is not None:
        return chosen
    if args.bucket is None:
        raise ConfigError(no_bucket)
    s3 = S3Settings(bucket=args.bucket, endpoint_url=args.endpoint_url, region=args.region)
    if max_pool_connections is None:
        return s3
    return dataclasses.replace(s3, max_pool_connections=max_pool_connections)
