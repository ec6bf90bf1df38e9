"""`ObjectStore` on Azure Blob Storage (one container) through azure-storage-blob's aio client.

Design notes: docs/internals/storage.md, `gcd.storage.azure.client`.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from azure.core import exceptions as azure_errors
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.storage.blob.aio import BlobServiceClient, ContainerClient
from botocore.parsers import ResponseParserError

from gcd.rules.triage import RETRYABLE_CODES
from gcd.storage.azure.settings import AzureSettings
from gcd.storage.objectstore import (
    DeleteResult,
    KeyFailure,
    ListPage,
    ObjectInfo,
    ObjectStore,
    check_batch,
    small_object,
)
from gcd.storage.s3.wire import refuse_doctype
from l0gc.errors import ConfigError, StorageError

__all__ = [
    "MAX_BATCH",
    "TRANSLATED",
    "AzureBlobStore",
    "RefuseDoctype",
    "batch_answer_failure",
    "open_container",
    "translate_error",
]

MAX_BATCH = 256
"""Sub-requests Blob Batch takes in one request."""
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def translate_error(exc: BaseException, operation: str) -> StorageError:
    """The StorageError for an azure-core exception raised by `operation`."""
    if isinstance(exc, azure_errors.HttpResponseError):
        status = int(exc.status_code or 0)
        error_code = getattr(exc, "error_code", None)  # a StorageErrorCode (str enum) or str
        code = str(getattr(error_code, "value", error_code) or status or "Unknown")
        retryable = status in _RETRYABLE_STATUS or code in RETRYABLE_CODES
        message = str(exc.message or exc).splitlines()[0]
        return StorageError(f"{operation} failed: {message}", code=code, retryable=retryable)
    if isinstance(exc, azure_errors.ClientAuthenticationError):
        return StorageError(
            f"{operation} failed: {exc}", code="AuthenticationFailed", retryable=False
        )
    if isinstance(exc, azure_errors.ServiceRequestError | azure_errors.ServiceResponseError):
        return StorageError(
            f"{operation} could not reach the endpoint: {exc}",
            code="ConnectionError",
            retryable=True,
        )
    return StorageError(f"{operation} failed: {exc!r}", code="Unknown", retryable=False)


TRANSLATED = (azure_errors.AzureError, OSError)
"""What `translate_error` turns into a StorageError."""


class RefuseDoctype(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """A pipeline policy: an XML answer with a DOCTYPE is refused before the SDK parses it
    (it decodes every answer as UTF-8, then expands internal entities): a retryable
    StorageError, as for an S3 answer that cannot be read. Streamed bodies (downloads)
    are not read here."""

    def on_response(
        self, request: PipelineRequest[Any], response: PipelineResponse[Any, Any]
    ) -> None:
        http = response.http_response
        if "xml" not in (http.headers.get("Content-Type") or "").lower():
            return
        try:
            body = http.body()
        except ValueError:  # streamed, not loaded
            return
        try:
            refuse_doctype(body, "Azure")
        except ResponseParserError as exc:
            raise StorageError(str(exc), code="InternalError", retryable=True) from None


@contextlib.asynccontextmanager
async def open_container(settings: AzureSettings) -> AsyncIterator[ContainerClient]:
    """An aio client on `settings`' container: a connection string from its file, else
    the Azure credential chain (`DefaultAzureCredential`); closed on exit."""
    credential_cm: Any = contextlib.nullcontext()
    connection = settings.connection_string()
    if connection is not None:
        service = BlobServiceClient.from_connection_string(
            connection, retry_total=0, _additional_pipeline_policies=[RefuseDoctype()]
        )
        if _endpoint(service.url) != _endpoint(settings.account_url):
            raise ConfigError(
                f"the connection string in {settings.connection_string_file!r} is for "
                f"{service.url.rstrip('/')}, not --account-url {settings.shown_url}: the "
                "binding names the account URL, so both must be the same account"
            )
    else:
        if not settings.account_url.startswith("https://"):
            raise ConfigError(
                f"--account-url {settings.shown_url} is plain http: Azure's credential chain "
                "sends tokens over https only; for an emulator give its connection string "
                "(--azure-connection-string-file), else use the https:// URL"
            )
        from azure.identity.aio import DefaultAzureCredential  # noqa: PLC0415

        credential_cm = DefaultAzureCredential()
        service = BlobServiceClient(
            settings.account_url,
            credential=credential_cm,
            retry_total=0,
            _additional_pipeline_policies=[RefuseDoctype()],
        )
    async with credential_cm, service:
        yield service.get_container_client(settings.container)


def _endpoint(url: str) -> str:
    """An account URL compared without case in scheme and host or a trailing '/'."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


class AzureBlobStore(ObjectStore):
    """One container through an open aio `ContainerClient`."""

    def __init__(self, container: ContainerClient, settings: AzureSettings) -> None:
        self._container = container
        self.settings = settings
        self.bucket = settings.container
        self.list_requests = 0
        """List Blobs requests sent (walks included): what LIST cost is counted in."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: AzureSettings) -> AsyncIterator[AzureBlobStore]:
        """A client for `settings` (closed on exit)."""
        async with open_container(settings) as container:
            yield cls(container, settings)

    # -- listing --------------------------------------------------------------------

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        state = _Cursor.decode(continuation_token) if continuation_token else None
        if state is None:
            if start_after is None:
                state = _Cursor([prefix], None)
            else:
                state = _Cursor(await self._after(prefix, start_after), None)
        objects: list[ObjectInfo] = []
        while state.pending and not objects:
            current = state.pending[0]
            if not current.endswith("/") and current != prefix:  # a blob the walk found
                objects.append(await self._info(current))
                state = _Cursor(state.pending[1:], None)
                continue
            page, token = await self._page(current, state.token, max_keys)
            objects.extend(page)
            state = _Cursor(state.pending if token else state.pending[1:], token)
        next_token = state.encode() if state.pending else None
        return ListPage(tuple(objects), next_token, None)

    async def _page(
        self, prefix: str, token: str | None, max_keys: int
    ) -> tuple[list[ObjectInfo], str | None]:
        try:
            pages = self._container.list_blobs(
                name_starts_with=prefix, results_per_page=max_keys
            ).by_page(continuation_token=token)
            self.list_requests += 1
            items = [
                ObjectInfo(b.name, int(b.size or 0), b.last_modified.timestamp())
                async for b in await pages.__anext__()
            ]
        except StopAsyncIteration:
            return [], None
        except TRANSLATED as exc:
            raise translate_error(exc, f"List Blobs {self.bucket}/{prefix}") from exc
        return items, getattr(pages, "continuation_token", None)

    async def _after(self, prefix: str, start_after: str) -> list[str]:
        """The directories and blobs under `prefix` that sort after `start_after`, in
        order: one delimiter listing (paged) per level. The directory holding
        `start_after` sorts before it, yet its names after it are wanted: it is walked
        one level down the same way (one more listing per level of `start_after`)."""
        names: list[str] = []
        inside: str | None = None  # the directory `start_after` lies in, at this level
        try:
            walk = self._container.walk_blobs(name_starts_with=prefix, delimiter="/")
            async for page in walk.by_page():
                self.list_requests += 1
                async for item in page:
                    if item.name > start_after:
                        names.append(item.name)
                    elif item.name.endswith("/") and start_after.startswith(item.name):
                        inside = item.name
        except TRANSLATED as exc:
            raise translate_error(
                exc, f"List Blobs {self.bucket}/{prefix} (delimiter '/')"
            ) from exc
        if inside is not None and inside != prefix:
            names += await self._after(inside, start_after)
        return sorted(names, key=str.encode)

    async def _info(self, name: str) -> ObjectInfo:
        try:
            props = await self._container.get_blob_client(name).get_blob_properties()
        except TRANSLATED as exc:
            raise translate_error(exc, f"Get Blob Properties {self.bucket}/{name}") from exc
        return ObjectInfo(name, int(props.size or 0), props.last_modified.timestamp())

    # -- deleting -------------------------------------------------------------------

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """Blob Batch deletes, 256 per request; per-blob answers triaged (module docstring)."""
        check_batch(keys)
        deleted: list[str] = []
        errors: list[KeyFailure] = []
        for start in range(0, len(keys), MAX_BATCH):
            part = list(keys[start : start + MAX_BATCH])
            try:
                answers = [
                    a
                    async for a in await self._container.delete_blobs(
                        *part, raise_on_any_failure=False
                    )
                ]
            except TRANSLATED as exc:
                raise translate_error(exc, f"Blob Batch delete on {self.bucket}") from exc
            for key, answer in zip(part, answers, strict=True):
                failure = batch_answer_failure(self.bucket, key, answer)
                if failure is None:
                    deleted.append(key)
                else:
                    errors.append(failure)
        return DeleteResult(tuple(deleted), tuple(errors))

    # -- soft delete (the undo window) ----------------------------------------------

    async def soft_delete_retention(self) -> float | None:
        """The account's blob soft delete retention in seconds (0: off; None: unreadable)."""
        service = self._container._get_blob_service_client()  # shares the container's pipeline
        try:
            properties = await service.get_service_properties()
        except azure_errors.AzureError:
            return None
        policy = properties.get("delete_retention_policy")
        if policy is None or not policy.enabled:
            return 0.0
        return float(policy.days or 0) * 86400.0

    async def undelete(self, key: str, generation: str | None) -> str:
        """Undelete Blob, unless a blob is live under `key`; "gone" when none comes back."""
        del generation  # Azure restores by name
        blob = self._container.get_blob_client(key)
        operation = f"Undelete Blob {self.bucket}/{key}"
        try:
            if await blob.exists():
                return "live"
            await blob.undelete_blob()
            return "restored" if await blob.exists() else "gone"
        except azure_errors.ResourceNotFoundError:
            return "gone"
        except azure_errors.AzureError as exc:
            raise translate_error(exc, operation) from exc

    # -- the claim ------------------------------------------------------------------

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """A small blob's content (at most `max_bytes`), or None when there is none."""
        try:
            stream = await self._container.get_blob_client(key).download_blob(
                offset=0, length=max_bytes + 1
            )
            data: bytes = await stream.readall()
        except azure_errors.ResourceNotFoundError:
            return None
        except TRANSLATED as exc:
            raise translate_error(exc, f"Get Blob {self.bucket}/{key}") from exc
        return small_object(data, max_bytes, f"{self.bucket}/{key}")

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write a small blob; with `if_absent` only if there is none (else False)."""
        try:  # overwrite=False sends If-None-Match: * (create only)
            await self._container.get_blob_client(key).upload_blob(body, overwrite=not if_absent)
        except azure_errors.ResourceExistsError:
            if if_absent:
                return False
            raise
        except TRANSLATED as exc:
            raise translate_error(exc, f"Put Blob {self.bucket}/{key}") from exc
        return True


def batch_answer_failure(container: str, key: str, answer: Any) -> KeyFailure | None:
    """Blob `key`'s outcome in a Blob Batch answer (None: deleted, or already gone), for
    the daemon and the Spark executors alike. The sub-response must be the one for `key`
    (its request's path ends with /{container}/{key}; Azurite puts the account before
    it): a key is never counted deleted from another blob's answer."""
    request = getattr(answer, "request", None)
    path = "" if request is None else urllib.parse.unquote(urllib.parse.urlsplit(request.url).path)
    if not path.endswith(f"/{container}/{key}"):
        return KeyFailure(
            key, "UnmatchedAnswer", "the batch answered another blob in this blob's place"
        )
    status = int(answer.status_code)
    if status in (200, 202, 404):
        return None
    code = answer.headers.get("x-ms-error-code") or str(status)
    return KeyFailure(key, _code(code, status), f"HTTP {status}")


def _code(code: str, status: int) -> str:
    """Azure's per-blob error code in the sweeper's vocabulary: throttling is "503"."""
    return "503" if code == "ServerBusy" or status == 503 else code


@dataclass(frozen=True, slots=True)
class _Cursor:
    """Where a listing goes on: prefixes still to list and the current one's token."""

    pending: list[str]
    token: str | None

    def encode(self) -> str:
        return json.dumps({"pending": self.pending, "token": self.token}, separators=(",", ":"))

    @staticmethod
    def decode(text: str) -> _Cursor:
        doc = json.loads(text)
        return _Cursor(list(doc["pending"]), doc["token"])
