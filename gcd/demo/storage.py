"""Which object store a demo runs on, S3 or Azure Blob Storage, chosen in this one place.

`open_storage` opens two clients on the same bucket or container: the demo's own
(`DemoBucket` on S3, `DemoContainer` on Azure; both are `DemoObjects`), which the
writers and the verification use, and the sweeper's store (`S3ObjectStore` or
`AzureBlobStore`), which `CountingStore` wraps unchanged and the namespace binding
claims. `storage_target` names the storage as `gcd namespace bind` would bind it.
The Azure SDK is imported only for an Azure run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from gcd.azsettings import AzureSettings
from gcd.binding import ClaimStore
from gcd.demo.s3io import DemoBucket
from gcd.objectstore import ObjectStore
from gcd.s3store import S3ObjectStore, S3Settings
from watermark.binding import StorageTarget

__all__ = ["DemoObjects", "DemoStorage", "SweptStore", "open_storage", "storage_target"]


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


class SweptStore(ObjectStore, ClaimStore, Protocol):
    """The sweeper's store: lists and deletes, and holds the namespace binding's claim."""


@dataclass(frozen=True, slots=True)
class DemoStorage:
    """The storage of one run: S3 settings, or (`azure` set) an Azure container."""

    s3: S3Settings | None = None
    azure: AzureSettings | None = None

    def __post_init__(self) -> None:
        if (self.s3 is None) == (self.azure is None):
            raise ValueError("a demo runs on S3 or on Azure Blob Storage: give exactly one")

    @property
    def kind(self) -> str:
        """ "s3" or "azure"."""
        return "s3" if self.azure is None else "azure"

    @property
    def name(self) -> str:
        """The bucket or container."""
        return self.azure.container if self.azure is not None else self._s3.bucket

    @property
    def endpoint_url(self) -> str | None:
        """The S3 endpoint (None: AWS) or the Azure account URL."""
        return self.azure.account_url if self.azure is not None else self._s3.endpoint_url

    @property
    def _s3(self) -> S3Settings:
        assert self.s3 is not None
        return self.s3


def storage_target(storage: DemoStorage, root: str) -> StorageTarget:
    """The storage as a namespace binding names it (`gcd namespace bind` binds the same)."""
    if storage.azure is not None:
        return StorageTarget(storage.azure.container, root, storage.azure.account_url,
                             kind="azure")  # fmt: skip
    return StorageTarget(storage.name, root, storage.endpoint_url)


@contextlib.asynccontextmanager
async def open_storage(storage: DemoStorage) -> AsyncIterator[tuple[DemoObjects, SweptStore]]:
    """The demo's own client and the sweeper's store on `storage` (both closed on exit)."""
    if storage.azure is not None:
        from gcd.azstore import AzureBlobStore  # noqa: PLC0415 - the SDK only when used
        from gcd.demo.azio import DemoContainer  # noqa: PLC0415

        async with (
            DemoContainer.open(storage.azure) as container,
            AzureBlobStore.open(storage.azure) as blobs,
        ):
            yield container, blobs
        return
    assert storage.s3 is not None
    async with DemoBucket.open(storage.s3) as bucket, S3ObjectStore.open(storage.s3) as s3store:
        yield bucket, s3store
