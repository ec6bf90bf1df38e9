"""The demo's GCS side: `DemoGcsBucket`, the counterpart of `l0lab.demo.s3io.DemoBucket`.

A second `GcsObjectStore` (its own connections and counters) used by the simulated
writers (objects.insert), by the end-of-run verification (objects.get, objects.list);
the sweeper's store behind `CountingStore` is another one, so the demo's requests are
counted apart. The interface is `DemoBucket`'s. The bucket is not created here: the
demo's own emulator gets it from `LocalGcs.create_bucket`; on GCS it must exist.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from gcd.storage.gcs.client import GcsObjectStore
from gcd.storage.gcs.settings import GcsSettings

__all__ = ["DemoGcsBucket"]

_BODY = b"l0 object written by gcd demo\n"


class DemoGcsBucket:
    """The demo's own client on the bucket: put, exists, list."""

    def __init__(self, store: GcsObjectStore) -> None:
        self._store = store
        self.bucket = store.bucket
        self.put_requests = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: GcsSettings) -> AsyncIterator[DemoGcsBucket]:
        """A client on `settings`' bucket (closed on exit)."""
        async with GcsObjectStore.open(settings) as store:
            yield cls(store)

    async def ensure_bucket(self) -> None:
        """Check that the bucket exists (ConfigError naming it when not)."""
        page = await self._store.list_page("", max_keys=1)
        del page

    async def put(self, key: str) -> None:
        """Upload one small object."""
        self.put_requests += 1
        await self._store.put_object(key, _BODY, if_absent=False)

    async def exists(self, key: str) -> bool:
        """True when the object is there."""
        return await self._store.get_object(key, max_bytes=len(_BODY)) is not None

    async def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`."""
        keys: list[str] = []
        token: str | None = None
        while True:
            page = await self._store.list_page(prefix, continuation_token=token)
            keys.extend(info.key for info in page.objects)
            if page.next_token is None:
                return keys
            token = page.next_token
