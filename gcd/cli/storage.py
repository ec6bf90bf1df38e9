"""Which object store a command talks to: S3 (`--bucket`) or Azure Blob Storage
(`--storage azure --account-url URL --container NAME`); `gcd.storage.open` opens it.

S3 is the default and keeps its flags. Azure credentials come from the Azure standard
chain (`DefaultAzureCredential`: workload identity, managed identity, environment) or
from a connection string in a file (`--azure-connection-string-file`), never from a flag
value. A namespace binding names the account URL and the container (kind ``azure``).
"""

from __future__ import annotations

import argparse

from gcd.storage.azsettings import AzureSettings
from watermark.errors import ConfigError
from watermark.options import Option, text

__all__ = ["AZURE_OPTIONS", "azure_settings"]

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
