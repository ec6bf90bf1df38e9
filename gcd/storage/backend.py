"""What a kind of object store provides to the rest of gcd: one `Backend` per store folder.

A store folder (`gcd.storage.s3`, `gcd.storage.azure`, `gcd.storage.gcs`) holds its
settings, wire format, async client, Spark executor client and inventory reader, and a
`backend` module whose `BACKEND` is this protocol: open the store, check it before a
first round, and read a store URL (``s3://bucket/root``). `gcd.storage.registry` finds a
backend by its kind; docs/internals/storage.md says how to add a store.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from gcd.storage.executor import ExecutorStore
from gcd.storage.objectstore import BucketStore, StoreFeatures
from l0gc.contract.binding import StorageTarget

__all__ = [
    "Backend",
    "InventoryReport",
    "StoreAccess",
    "StoreSettings",
    "StoreUrl",
    "settings_of",
]


class StoreSettings(Protocol):
    """What names one store: its kind, and how a namespace binding names it."""

    kind: ClassVar[str]

    def target(self, root: str) -> StorageTarget:
        """The store and `root` as a binding and the deletion journal name them."""
        ...


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A store URL split up: ``SCHEME://NETLOC/PATH`` (the path has no leading '/')."""

    scheme: str
    netloc: str
    path: str


@dataclass(frozen=True, slots=True)
class InventoryReport:
    """An inventory report a Spark job reads: its manifest (`--inventory`), and where its
    data files are when not beside it (`--inventory-root`)."""

    manifest: str
    root: str | None = None


@dataclass(frozen=True, slots=True)
class StoreAccess:
    """How this process reaches a store besides its name: the credential and client flags
    of every kind (`gcd.cli.storage.access_of`); each backend reads its own."""

    region: str | None = None
    """S3: `--region` (None: botocore's chain)."""
    max_pool_connections: int | None = None
    """S3: connections of the client pool (None: the settings' default)."""
    azure_connection_string_file: str | None = None
    """Azure: `--azure-connection-string-file` (None: the Azure credential chain)."""
    gcs_credentials_file: str | None = None
    """GCS: `--gcs-credentials-file` (None: Application Default Credentials)."""
    gcs_anonymous: bool = False
    """GCS: `--gcs-anonymous` (an emulator)."""


class Backend(Protocol):
    """One kind of object store."""

    kind: str
    """Its `StoreSettings.kind` and `--storage` value: "s3", "azure", "gcs"."""
    scheme: str
    """The scheme of its store URLs: "s3", "az", "gs"."""

    def open(self, settings: StoreSettings) -> contextlib.AbstractAsyncContextManager[BucketStore]:
        """The open store (a sweeper store and a claim store), closed on exit."""
        ...

    async def preflight(self, settings: StoreSettings, prefix: str) -> StoreFeatures | None:
        """One listing of `prefix` before any round: ConfigError (exit 2) naming what only
        the operator can fix (missing bucket, refused credentials, unreachable endpoint);
        what it detected of the store (versioning, Object Lock) where it reads that."""
        ...

    def from_url(
        self, url: StoreUrl, *, endpoint_url: str | None, access: StoreAccess
    ) -> tuple[StoreSettings, str]:
        """The settings and the root a store URL names (`endpoint_url`: the flag's)."""
        ...

    def from_target(self, target: StorageTarget, access: StoreAccess) -> StoreSettings:
        """How to reach the store a namespace binding names (`access`: the command's
        credential flags; `StoreAccess()`: the SDK's default chain)."""
        ...

    # -- the Spark side (`gcd.spark`) ---------------------------------------------------

    executor_requirements: tuple[str, ...]
    """What Spark executors need for this store besides `gcd.spark.package`'s own."""

    def executor_store(self, settings: StoreSettings, *, versions: bool) -> ExecutorStore:
        """The store as Spark executors reach it (`versions`: every version, by id)."""
        ...

    def inventory_versions(self, settings: StoreSettings, manifest: str) -> bool:
        """True when the inventory report at `manifest` lists versions; ConfigError when it
        is not this store's."""
        ...

    def read_inventory(
        self, spark: Any, settings: StoreSettings, report: InventoryReport, *, versions: bool
    ) -> Any:
        """The report's rows as a `gcd.storage.rows.SOURCE_SCHEMA` DataFrame."""
        ...


_S = TypeVar("_S")


def settings_of(settings: StoreSettings, kind: type[_S]) -> _S:
    """`settings` as its backend's own type (a backend handed another kind's: a bug)."""
    if not isinstance(settings, kind):
        raise TypeError(f"not {kind.__name__}: {settings!r}")
    return settings
