"""Where an Azure Blob container is and how to authenticate (no Azure SDK imported here:
`gcd sweep` on S3 does not pay for it; `gcd.storage.azure.client` is the client)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError

__all__ = ["AZURE_EXECUTOR_REQUIREMENTS", "AzureSettings", "redact_url"]

AZURE_EXECUTOR_REQUIREMENTS = ("azure-storage-blob", "azure-identity")
"""What Spark executors need for this store besides the common ones (azure-identity
only without a connection string file; `gcd.spark.package.STORE_REQUIREMENTS`)."""

_CONTAINER = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
"""Blob Storage's container names (3-63 characters; no leading, trailing or double '-')."""
_MAX_CONNECTION_STRING = 64 * 1024


def redact_url(url: str) -> str:
    """`url` without the values of its query: a SAS token (``?sv=...&sig=...``) is a
    credential, and no message, log line or binding may carry it (as no AccountKey)."""
    base, mark, query = url.partition("?")
    if not mark:
        return url
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    return base + "?" + "&".join(f"{name}=REDACTED" for name in names)


@dataclass(frozen=True, slots=True)
class AzureSettings:
    """Where the container is and how to authenticate (one of
    `gcd.storage.registry.StoreSettings`)."""

    kind: ClassVar[str] = "azure"
    account_url: str
    container: str
    connection_string_file: str | None = None

    def __post_init__(self) -> None:
        if not self.account_url.startswith(("https://", "http://")):
            raise ConfigError(
                f"account URL {self.shown_url!r} must start with https:// (or http:// for "
                "an emulator), e.g. --account-url https://ACCOUNT.blob.core.windows.net"
            )
        name = self.container
        if not _CONTAINER.fullmatch(name):
            raise ConfigError(
                f"container {name!r} is not a container name (3-63 lower-case ASCII letters, "
                "digits and single hyphens, starting and ending with a letter or digit); give "
                "--container NAME"
            )

    @property
    def shown_url(self) -> str:
        """The account URL as messages show it (`redact_url`)."""
        return redact_url(self.account_url)

    def target(self, root: str) -> StorageTarget:
        """The container at its account URL (without its query: a SAS token is neither
        identity nor to be stored) and `root`, as a namespace binding and the deletion
        journal name them (the container in the `bucket` field, kind "azure")."""
        return StorageTarget(
            self.container, root, self.account_url.partition("?")[0], kind=self.kind
        )

    def connection_string(self) -> str | None:
        """The connection string from its file, or None (the standard credential chain)."""
        if self.connection_string_file is None:
            return None
        path = Path(self.connection_string_file)
        try:
            with path.open("rb") as file:
                raw = file.read(_MAX_CONNECTION_STRING + 1)
        except OSError as exc:
            raise ConfigError(
                f"cannot read the Azure connection string file {str(path)!r} "
                f"({exc.strerror}); point --azure-connection-string-file at a readable file"
            ) from exc
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = ""
        if (
            len(raw) > _MAX_CONNECTION_STRING
            or not text.isprintable()
            or ("AccountName=" not in text and "BlobEndpoint=" not in text)
        ):
            raise ConfigError(
                f"{str(path)!r} does not hold an Azure Storage connection string "
                "(AccountName=...;AccountKey=...;BlobEndpoint=...)"
            )
        return text
