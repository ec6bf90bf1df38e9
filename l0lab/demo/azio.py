"""The demo's Azure Blob side: `DemoContainer`, the counterpart of `l0lab.demo.s3io.DemoBucket`.

One aio `ContainerClient` used by the simulated writers (Put Blob), by the end-of-run
verification (Get Blob Properties, List Blobs) and to create the container. Its
requests are not the sweeper's (an `AzureBlobStore` behind `CountingStore`), so they are
counted apart. The interface is `DemoBucket`'s, so the runner and the verification do
not know which store they talk to. Credentials as for the sweeper (`AzureBlobStore.open`):
a connection string from a file, else the Azure credential chain. Library exceptions
become `StorageError` as the sweeper's do (`gcd.storage.azure.client.translate_error`);
the SDK's own
retries stay on (the writers are not under test).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from azure.core import exceptions as azure_errors
from azure.storage.blob.aio import ContainerClient

from gcd.storage.azure.client import TRANSLATED, open_container, translate_error
from gcd.storage.azure.settings import AzureSettings

__all__ = ["DemoContainer"]

_BODY = b"l0 object written by gcd demo\n"


class DemoContainer:
    """The demo's own client on the container: put, exists, list, create."""

    def __init__(self, container: ContainerClient, name: str) -> None:
        self._container = container
        self.bucket = name
        """The container's name (named `bucket` as `DemoBucket`'s is)."""
        self.put_requests = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: AzureSettings) -> AsyncIterator[DemoContainer]:
        """A client for `settings` (closed on exit), authenticated as the sweeper's is."""
        async with open_container(settings) as container:
            yield cls(container, settings.container)

    async def ensure_bucket(self) -> None:
        """Create the container unless it exists."""
        try:
            if await self._container.exists():
                return
            await self._container.create_container()
        except azure_errors.ResourceExistsError:
            return  # created meanwhile by someone else: what we wanted
        except TRANSLATED as exc:
            raise translate_error(exc, f"Create Container {self.bucket}") from exc

    async def put(self, key: str) -> None:
        """Upload one small blob."""
        self.put_requests += 1
        try:
            await self._container.get_blob_client(key).upload_blob(_BODY, overwrite=True)
        except TRANSLATED as exc:
            raise translate_error(exc, f"Put Blob {self.bucket}/{key}") from exc

    async def exists(self, key: str) -> bool:
        """Get Blob Properties: True when the blob is there."""
        try:
            await self._container.get_blob_client(key).get_blob_properties()
        except azure_errors.ResourceNotFoundError:
            return False
        except TRANSLATED as exc:
            raise translate_error(exc, f"Get Blob Properties {self.bucket}/{key}") from exc
        return True

    async def list_keys(self, prefix: str) -> list[str]:
        """Every blob name under `prefix` (all pages)."""
        try:
            return [name async for name in self._container.list_blob_names(name_starts_with=prefix)]
        except TRANSLATED as exc:
            raise translate_error(exc, f"List Blobs {self.bucket}/{prefix}") from exc
