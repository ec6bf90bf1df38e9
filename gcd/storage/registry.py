"""The registry of stores: each kind's backend, found by kind, and a store named by a URL.

Adding a store is a folder under gcd/storage/ with a `backend` module, and one line in
`BACKENDS` (docs/internals/storage.md). Backends are imported when first used, so a
command on S3 never imports the Azure SDK.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator
from typing import Final, cast

from gcd.storage.backend import Backend, StoreAccess, StoreSettings, StoreUrl
from gcd.storage.objectstore import BucketStore, StoreFeatures
from l0gc.errors import ConfigError

__all__ = [
    "BACKENDS",
    "backend",
    "open_store",
    "preflight_store",
    "store_from_url",
]

BACKENDS: Final = {
    "s3": "gcd.storage.s3.backend",
    "azure": "gcd.storage.azure.backend",
    "gcs": "gcd.storage.gcs.backend",
}
"""Each store kind's backend module (its `BACKEND`)."""


def backend(kind: str) -> Backend:
    """The backend of store kind `kind` ("s3", "azure", "gcs")."""
    module = BACKENDS.get(kind)
    if module is None:
        raise ConfigError(f"no store of kind {kind!r}: choose one of {', '.join(BACKENDS)}")
    return cast(Backend, importlib.import_module(module).BACKEND)


@contextlib.asynccontextmanager
async def open_store(settings: StoreSettings) -> AsyncIterator[BucketStore]:
    """The open store `settings` names (a sweeper store and a claim store), closed on exit."""
    async with backend(settings.kind).open(settings) as store:
        yield store


async def preflight_store(settings: StoreSettings, prefix: str) -> StoreFeatures | None:
    """One listing of `prefix` before any round (`Backend.preflight`), and what it
    detected of the store where it reads that (S3: versioning, Object Lock)."""
    return await backend(settings.kind).preflight(settings, prefix)


def store_from_url(
    url: str, *, endpoint_url: str | None = None, access: StoreAccess | None = None
) -> tuple[StoreSettings, str]:
    """The store and root a URL names: ``s3://bucket/root``, ``az://account/container/root``,
    ``gs://bucket/root`` (`endpoint_url`: an S3-compatible server's or an emulator's;
    `access`: the command's credential flags)."""
    scheme, sep, rest = url.partition("://")
    netloc, _, path = rest.partition("/")
    for kind in BACKENDS:
        found = backend(kind)
        if sep and scheme == found.scheme and netloc:
            return found.from_url(
                StoreUrl(scheme, netloc, path.strip("/")),
                endpoint_url=endpoint_url,
                access=access or StoreAccess(),
            )
    schemes = ", ".join(f"{backend(kind).scheme}://" for kind in BACKENDS)
    raise ConfigError(f"store URL {url!r} is not one of {schemes} (e.g. s3://my-bucket/level_zero)")
