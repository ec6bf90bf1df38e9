"""One HEAD of one key, on each kind of store, as a `HeadAnswer` (never an exception).

The stores of `gcd.storage` list, delete and read small objects; none has a HEAD of its
own, so this module asks each one's open client for the object's metadata: S3
HeadObject, Azure Get Blob Properties, GCS objects.get without ``alt=media`` (metadata
only, no body). A store of another kind (a test's fake) offers `HeadStore.head`. What
an answer means is `gcd.scrub.findings.verdict`'s decision, not this module's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from gcd.scrub.findings import HeadAnswer
from gcd.storage.objectstore import ObjectStore
from l0gc.errors import ConfigError, StorageError

__all__ = ["Head", "HeadStore", "head_of", "timed"]

Head = Callable[[str], Awaitable[HeadAnswer]]
"""HEAD one key."""


@runtime_checkable
class HeadStore(Protocol):
    """A store that HEADs a key itself."""

    async def head(self, key: str) -> HeadAnswer:
        """The answer to one HEAD of `key`."""
        ...


def timed(head: Head, deadline_s: float) -> Head:
    """`head` with a deadline: past it the answer is a "Timeout" (unknown, re-checked)."""

    async def bounded(key: str) -> HeadAnswer:
        try:
            async with asyncio.timeout(deadline_s):
                return await head(key)
        except TimeoutError:
            return HeadAnswer(None, "Timeout", f"no answer within {deadline_s:g}s")

    return bounded


def head_of(store: ObjectStore) -> Head:
    """The HEAD of `store`'s kind; ConfigError for a store that cannot HEAD."""
    if isinstance(store, HeadStore):
        return store.head
    module = type(store).__module__
    if module == "gcd.storage.s3.client":
        return lambda key: _s3_head(store, key)
    if module == "gcd.storage.azure.client":
        return lambda key: _azure_head(store, key)
    if module == "gcd.storage.gcs.client":
        return lambda key: _gcs_head(store, key)
    raise ConfigError(f"gcd scrub cannot HEAD a key on a {type(store).__name__}")


async def _s3_head(store: Any, key: str) -> HeadAnswer:
    """HeadObject. A HEAD answer has no body: a missing key is status 404, code "404"."""
    from botocore import exceptions as botocore_errors  # noqa: PLC0415 - S3 stores only

    from gcd.storage.s3.errors import translate_error  # noqa: PLC0415

    try:
        await store._client.head_object(Bucket=store.bucket, Key=key)
    except botocore_errors.ClientError as exc:
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode") or 0) or None
        code = str(exc.response.get("Error", {}).get("Code") or status or "Unknown")
        return HeadAnswer(status, code, f"HeadObject s3://{store.bucket}/{key}: {code}")
    except Exception as exc:  # noqa: BLE001 - every failure is an answer: unknown
        failure = translate_error(exc, f"HeadObject s3://{store.bucket}/{key}")
        return HeadAnswer(None, failure.code, str(failure))
    return HeadAnswer(200)


async def _azure_head(store: Any, key: str) -> HeadAnswer:
    """Get Blob Properties."""
    from azure.core import exceptions as azure_errors  # noqa: PLC0415 - Azure stores only

    from gcd.storage.azure.client import translate_error  # noqa: PLC0415

    operation = f"Get Blob Properties {store.bucket}/{key}"
    try:
        await store._container.get_blob_client(key).get_blob_properties()
    except azure_errors.HttpResponseError as exc:
        failure = translate_error(exc, operation)
        return HeadAnswer(int(exc.status_code or 0) or None, failure.code, str(failure))
    except Exception as exc:  # noqa: BLE001 - every failure is an answer: unknown
        failure = translate_error(exc, operation)
        return HeadAnswer(None, failure.code, str(failure))
    return HeadAnswer(200)


async def _gcs_head(store: Any, key: str) -> HeadAnswer:
    """objects.get of the metadata (no ``alt=media``: the body is not read)."""
    from gcd.storage.gcs.wire import error_code  # noqa: PLC0415 - GCS stores only

    operation = f"objects.get gs://{store.bucket}/{key} (metadata)"
    try:
        status, body, _ = await store._send("GET", store._object_url(key), operation)
    except StorageError as exc:
        return HeadAnswer(None, exc.code, str(exc))
    if 200 <= status < 300:
        return HeadAnswer(status)
    code, message = error_code(status, body.decode("utf-8", "replace"))
    return HeadAnswer(status, code, f"{operation}: {message}")
