"""`ObjectStore` on Google Cloud Storage (one bucket) through its JSON API on aiohttp.

Design notes: docs/internals/storage.md, `gcd.storage.gcs.client`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import aiohttp

from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.gcs.wire import MAX_BATCH, batch_body, error_code, parse_answer, triage
from gcd.storage.objectstore import (
    DeleteResult,
    KeyFailure,
    ListPage,
    ObjectInfo,
    ObjectStore,
    check_batch,
    small_object,
)
from l0gc.errors import ConfigError, StorageError

__all__ = ["SCOPE", "GcsObjectStore"]

SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
"""The OAuth scope asked for (the IAM role decides what is allowed: docs/operations.md)."""
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_FIELDS = "items(name,size,updated,generation),nextPageToken"
EMPTY_PAGES_PER_CALL = 10
"""objects.list pages with nothing to return one `list_page` reads before it returns."""


def _service_file(given: str | None) -> str | io.StringIO | None:
    """The credentials the token library is given: `given`, else Application Default
    Credentials as `google.auth.default` finds them. With neither
    GOOGLE_APPLICATION_CREDENTIALS nor gcloud's well-known ADC file, that is the metadata
    server: said explicitly (an empty service document), because gcloud-aio-auth 5.5
    (the version Python 3.11.2 can install) raises instead when CLOUDSDK_CONFIG is set."""
    if given is not None or os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return given
    config = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(
        os.path.expanduser("~"), ".config", "gcloud"
    )
    if os.path.exists(os.path.join(config, "application_default_credentials.json")):
        return None
    return io.StringIO("{}")


class GcsObjectStore(ObjectStore):
    """One bucket through an aiohttp session and (unless anonymous) a token source."""

    def __init__(
        self, session: aiohttp.ClientSession, settings: GcsSettings, token: Any | None
    ) -> None:
        self._session = session
        self._token = token
        self.settings = settings
        self.bucket = settings.bucket
        self.list_requests = 0
        """objects.list requests sent: what LIST cost is counted in."""
        self.batch_requests = 0
        """Batch requests sent."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: GcsSettings) -> AsyncIterator[GcsObjectStore]:
        """A client for `settings` (closed on exit)."""
        timeout = aiohttp.ClientTimeout(
            sock_connect=settings.connect_timeout_s, sock_read=settings.read_timeout_s
        )
        async with contextlib.AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
            token = None
            if not settings.anonymous:
                from gcloud.aio.auth import Token  # noqa: PLC0415 - only with credentials

                try:
                    made = Token(
                        service_file=_service_file(settings.credentials_file), scopes=[SCOPE]
                    )
                except Exception as exc:
                    where = settings.credentials_file or "GOOGLE_APPLICATION_CREDENTIALS"
                    raise ConfigError(
                        f"cannot use the Google credentials file {where!r} ({exc!r}); point "
                        "--gcs-credentials-file at a service-account key or ADC JSON file"
                    ) from exc
                token = await stack.enter_async_context(made)
            yield cls(session, settings, token)

    # -- requests -------------------------------------------------------------------

    async def _headers(self, operation: str) -> dict[str, str]:
        if self._token is None:
            return {}
        try:
            return {"Authorization": f"Bearer {await self._token.get()}"}
        except Exception as exc:
            raise _no_credentials(operation, exc) from exc

    async def check_credentials(self) -> None:
        """Get a token once, without the token library's retries (the preflight)."""
        if self._token is None:
            return
        try:
            await self._token.refresh(timeout=5)
        except Exception as exc:
            raise _no_credentials("getting an access token", exc) from exc

    async def _send(
        self,
        method: str,
        url: str,
        operation: str,
        *,
        params: dict[str, str] | None = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes, str]:
        all_headers = {**await self._headers(operation), **(headers or {})}
        try:
            async with self._session.request(
                method, url, params=params, data=data, headers=all_headers
            ) as answer:
                body = await answer.read()
                return answer.status, body, answer.headers.get("Content-Type", "")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise StorageError(
                f"{operation} could not reach {self.settings.api_root}: {exc!r}",
                code="ConnectionError",
                retryable=True,
            ) from exc

    def _failure(
        self, operation: str, status: int, body: bytes, *, listing: bool = False
    ) -> StorageError:
        code, message = error_code(status, body.decode("utf-8", "replace"))
        if listing and status == 404:  # a listing answers 404 only for a missing bucket
            code = "NoSuchBucket"
        return StorageError(
            f"{operation} failed: {message}", code=code, retryable=status in _RETRYABLE_STATUS
        )

    def _object_url(self, key: str) -> str:
        name = urllib.parse.quote(key, safe="")
        return f"{self.settings.api_root}/storage/v1/b/{self.bucket}/o/{name}"

    # -- listing --------------------------------------------------------------------

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        after, page_token = start_after, None
        if continuation_token:
            cursor = json.loads(continuation_token)
            after, page_token = cursor.get("after"), cursor.get("page")
        url = f"{self.settings.api_root}/storage/v1/b/{self.bucket}/o"
        seen: set[str] = set()
        while True:
            params = {"prefix": prefix, "maxResults": str(max_keys), "fields": _FIELDS}
            if after is not None:
                params["startOffset"] = after  # inclusive; keys <= after are dropped below
            if page_token is not None:
                params["pageToken"] = page_token
            operation = f"objects.list gs://{self.bucket}/{prefix}"
            status, body, _ = await self._send("GET", url, operation, params=params)
            self.list_requests += 1
            if status != 200:
                raise self._failure(f"objects.list gs://{self.bucket}", status, body, listing=True)
            doc = json.loads(body)
            objects = [
                ObjectInfo(
                    item["name"],
                    int(item.get("size", 0)),
                    datetime.fromisoformat(item["updated"]).timestamp(),
                    generation=None if item.get("generation") is None else str(item["generation"]),
                )
                for item in doc.get("items", ())
                if item["name"].startswith(prefix) and (after is None or item["name"] > after)
            ]
            page_token = doc.get("nextPageToken")
            if objects or page_token is None or len(seen) >= EMPTY_PAGES_PER_CALL:
                break
            if page_token in seen:
                raise StorageError(
                    f"{operation}: the server gave page token {page_token!r} "
                    "again; it would be listed forever",
                    code="ListingLoop",
                    retryable=False,
                )
            seen.add(page_token)
        objects.sort(key=lambda info: info.key)  # code point order is UTF-8 byte order
        if len(objects) > max_keys:
            objects = objects[:max_keys]
            return ListPage(tuple(objects), _cursor(objects[-1].key, None))
        return ListPage(tuple(objects), None if page_token is None else _cursor(after, page_token))

    # -- deleting -------------------------------------------------------------------

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """JSON batch deletes, 100 per request; answers triaged per object by Content-ID."""
        check_batch(keys)
        deleted: list[str] = []
        errors: list[KeyFailure] = []
        url = f"{self.settings.api_root}/batch/storage/v1"
        operation = f"batch delete on gs://{self.bucket}"
        for start in range(0, len(keys), MAX_BATCH):
            part = list(keys[start : start + MAX_BATCH])
            body, content_type = batch_body(self.bucket, part)
            status, answer, answer_type = await self._send(
                "POST", url, operation, data=body, headers={"Content-Type": content_type}
            )
            self.batch_requests += 1
            if status != 200:
                raise self._failure(operation, status, answer)
            try:
                result = triage(part, parse_answer(answer, answer_type))
            except ValueError as exc:
                raise StorageError(
                    f"{operation}: unreadable answer ({exc})", code="500", retryable=True
                ) from exc
            deleted.extend(result.deleted)
            errors.extend(result.errors)
        return DeleteResult(tuple(deleted), tuple(errors))

    # -- soft delete (the undo window) ----------------------------------------------

    async def soft_delete_retention(self) -> float | None:
        """The bucket's soft delete retention in seconds (0: none; None: unreadable)."""
        url = f"{self.settings.api_root}/storage/v1/b/{self.bucket}"
        operation = f"buckets.get gs://{self.bucket}"
        status, body, _ = await self._send(
            "GET", url, operation, params={"fields": "softDeletePolicy"}
        )
        if status != 200:
            return None
        try:
            policy = json.loads(body).get("softDeletePolicy") or {}
            return float(policy.get("retentionDurationSeconds") or 0)
        except (ValueError, AttributeError, TypeError):
            return None

    async def undelete(self, key: str, generation: str | None) -> str:
        """objects.restore of `generation` unless an object is live under `key`."""
        if generation is None:
            return "gone"  # restore needs the generation: the journal did not record one
        operation = f"objects.restore gs://{self.bucket}/{key}#{generation}"
        status, body, _ = await self._send(
            "POST",
            self._object_url(key) + "/restore",
            operation,
            params={"generation": generation, "ifGenerationMatch": "0"},
        )
        if status == 200:
            return "restored"
        if status == 404:
            return "gone"
        if status == 412:
            return "live"
        raise self._failure(operation, status, body)

    # -- the claim ------------------------------------------------------------------

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """A small object's content (at most `max_bytes`), or None when there is none."""
        operation = f"objects.get gs://{self.bucket}/{key}"
        status, body, _ = await self._send(
            "GET", self._object_url(key), operation, params={"alt": "media"}
        )
        if status == 404:
            return None
        if status != 200:
            raise self._failure(operation, status, body)
        return small_object(body, max_bytes, f"gs://{self.bucket}/{key}")

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write a small object; with `if_absent` only if there is none (else False):
        ``ifGenerationMatch=0``, answered 412 when the object exists."""
        url = f"{self.settings.api_root}/upload/storage/v1/b/{self.bucket}/o"
        params = {"uploadType": "media", "name": key}
        if if_absent:
            params["ifGenerationMatch"] = "0"
        operation = f"objects.insert gs://{self.bucket}/{key}"
        status, answer, _ = await self._send(
            "POST",
            url,
            operation,
            params=params,
            data=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        if status == 412 and if_absent:
            return False
        if status != 200:
            raise self._failure(operation, status, answer)
        return True


def _cursor(after: str | None, page_token: str | None) -> str:
    return json.dumps({"after": after, "page": page_token}, separators=(",", ":"))


def _no_credentials(operation: str, exc: BaseException) -> StorageError:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return StorageError(
        f"{operation}: no Google credentials ({detail})", code="NoCredentials", retryable=False
    )
