"""Which object store a demo runs on, S3, Azure Blob Storage or GCS, chosen in this one place.

`open_storage` opens two clients on the same bucket or container: the demo's own
(`DemoBucket` on S3, `DemoContainer` on Azure; both are `DemoObjects`), which the
writers and the verification use, and the sweeper's store (`S3ObjectStore` or
`AzureBlobStore`), which `CountingStore` wraps unchanged and the namespace binding
claims (the binding target is `gcd.cli.storage.target_of`'s, as `gcd namespace bind`
makes it). The Azure SDK is imported only for an Azure run, the GCS client (`DemoGcsBucket`,
`GcsObjectStore`) only for a GCS run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from gcd.storage.azure.settings import AzureSettings
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.objectstore import BucketStore
from gcd.storage.registry import open_objects
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
    """The storage of one run: S3 settings, or (`azure` set) an Azure container, or (`gcs`
    set) a GCS bucket."""

    s3: S3Settings | None = None
    azure: AzureSettings | None = None
    gcs: GcsSettings | None = None

    def __post_init__(self) -> None:
        if [self.s3, self.azure, self.gcs].count(None) != 2:
            raise ValueError("a demo runs on S3, Azure Blob Storage or GCS: give exactly one")

    @property
    def kind(self) -> str:
        """ "s3", "azure" or "gcs"."""
        return "gcs" if self.gcs is not None else "s3" if self.azure is None else "azure"

    @property
    def name(self) -> str:
        """The bucket or container."""
        if self.gcs is not None:
            return self.gcs.bucket
        return self.azure.container if self.azure is not None else self._s3.bucket

    @property
    def endpoint_url(self) -> str | None:
        """The S3 endpoint (None: AWS), the Azure account URL or the GCS endpoint."""
        if self.gcs is not None:
            return self.gcs.endpoint_url
        return self.azure.account_url if self.azure is not None else self._s3.endpoint_url

    @property
    def _s3(self) -> S3Settings:
        assert self.s3 is not None
        return self.s3


@contextlib.asynccontextmanager
async def open_storage(storage: DemoStorage) -> AsyncIterator[tuple[DemoObjects, SweptStore]]:
    """The demo's own client and the sweeper's store on `storage` (both closed on exit)."""
    async with open_objects(storage.s3, storage.azure, gcs=storage.gcs) as swept:  # as `gcd sweep`
        if storage.gcs is not None:
            from l0lab.demo.gcsio import DemoGcsBucket  # noqa: PLC0415 - the client only when used

            async with DemoGcsBucket.open(storage.gcs) as gcs_bucket:
                yield gcs_bucket, swept
            return
        if storage.azure is not None:
            from l0lab.demo.azio import DemoContainer  # noqa: PLC0415 - the SDK only when used

            async with DemoContainer.open(storage.azure) as container:
                yield container, swept
            return
        assert storage.s3 is not None
        async with DemoBucket.open(storage.s3) as bucket:
            yield bucket, swept
