"""Which object store a demo runs on, S3, Azure Blob Storage or GCS, chosen in this one place.

`DemoStorage` holds the one store's settings, as `gcd sweep` takes them. `open_storage`
opens two clients on the same bucket or container: the demo's own (`DemoBucket` on S3,
`DemoContainer` on Azure, `DemoGcsBucket` on GCS; all `DemoObjects`), which the writers
and the verification use, and the sweeper's store (`gcd.storage.registry.open_store`),
which `CountingStore` wraps unchanged and the namespace binding claims. The Azure SDK is
imported only for an Azure run, the GCS client only for a GCS run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from gcd.storage.azure.settings import AzureSettings
from gcd.storage.backend import StoreSettings, settings_of
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.objectstore import BucketStore
from gcd.storage.registry import open_store
from gcd.storage.s3.settings import S3Settings
from l0lab.demo.s3io import DemoBucket

__all__ = ["DemoObjects", "DemoStorage", "SweptStore", "open_storage"]


class DemoObjects(Protocol):
    """The demo's own client on the storage (`DemoBucket`, `DemoContainer`)."""

    @property
    def bucket(self) -> str:
        """The bucket's or container's name."""
        ...

    @property
    def put_requests(self) -> int:
        """Uploads sent so far."""
        ...

    async def ensure_bucket(self) -> None:
        """Create the bucket or container unless it exists."""
        ...

    async def put(self, key: str) -> None:
        """Upload one small object."""
        ...

    async def exists(self, key: str) -> bool:
        """True when the object is there."""
        ...

    async def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`."""
        ...


class SweptStore(BucketStore, Protocol):
    """The sweeper's store: lists and deletes, and holds the namespace binding's claim."""


@dataclass(frozen=True, slots=True)
class DemoStorage:
    """The storage of one run: the settings of its one store, as `gcd sweep` takes them."""

    settings: StoreSettings

    @property
    def kind(self) -> str:
        """ "s3", "azure" or "gcs"."""
        return self.settings.kind

    @property
    def name(self) -> str:
        """The bucket or container."""
        return self.settings.target("").bucket

    @property
    def endpoint_url(self) -> str | None:
        """The S3 endpoint (None: AWS), the Azure account URL or the GCS endpoint."""
        return self.settings.target("").endpoint_url


@contextlib.asynccontextmanager
async def open_storage(storage: DemoStorage) -> AsyncIterator[tuple[DemoObjects, SweptStore]]:
    """The demo's own client and the sweeper's store on `storage` (both closed on exit)."""
    settings = storage.settings
    async with open_store(settings) as swept:  # as `gcd sweep`
        if isinstance(settings, GcsSettings):
            from l0lab.demo.gcsio import DemoGcsBucket  # noqa: PLC0415 - the client only when used

            async with DemoGcsBucket.open(settings) as gcs_bucket:
                yield gcs_bucket, swept
        elif isinstance(settings, AzureSettings):
            from l0lab.demo.azio import DemoContainer  # noqa: PLC0415 - the SDK only when used

            async with DemoContainer.open(settings) as container:
                yield container, swept
        else:
            async with DemoBucket.open(settings_of(settings, S3Settings)) as bucket:
                yield bucket, swept
