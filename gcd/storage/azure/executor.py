"""Azure Blob Storage on Spark executors: `AzureTarget` and the `AzureExecutor` it connects.

Design notes: docs/internals/spark.md, `gcd.storage.azure.executor`.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gcd.rules.backoff import Backoff
from gcd.rules.cursor import Cursor
from gcd.storage.azure.settings import AzureSettings
from gcd.storage.executor import Listed, Page, SkipAhead, in_parts, walk_pages
from gcd.storage.objectstore import KeyFailure
from gcd.storage.sync_retry import delete_triaged, retry
from l0gc.errors import StorageError

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient


__all__ = ["AzureExecutor", "AzureTarget", "call_with_retries"]

_PAGE = 1000
T = TypeVar("T")


def call_with_retries(
    operation: Callable[[], T],
    *,
    what: str,
    backoff: Backoff,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`operation()`, retried while the policy retries (`gcd.storage.sync_retry.retry`);
    Azure's exceptions translated by the daemon's `translate_error`."""
    from gcd.storage.azure.client import TRANSLATED, translate_error  # noqa: PLC0415 - the SDK

    def translate(exc: Exception) -> StorageError | None:
        return translate_error(exc, what) if isinstance(exc, TRANSLATED) else None

    return retry(operation, backoff=backoff, translate=translate, rng=rng, sleep=sleep)


@dataclass(frozen=True, slots=True)
class _Walk:
    """Where a listing goes on: names still to list (directories end in '/', blobs the
    walk found do not) and the current one's continuation token."""

    pending: tuple[str, ...]
    token: str | None

    def encode(self) -> str:
        return json.dumps(
            {"pending": list(self.pending), "token": self.token}, separators=(",", ":")
        )

    @staticmethod
    def decode(text: str) -> _Walk:
        doc = json.loads(text)
        return _Walk(tuple(doc["pending"]), doc["token"])


@dataclass(frozen=True, slots=True)
class AzureTarget:
    """One container as executors reach it: plain values, an
    `gcd.storage.executor.ExecutorStore` (module docstring)."""

    settings: AzureSettings
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.2, cap_s=10.0))

    @property
    def bucket(self) -> str:
        """The container."""
        return self.settings.container

    def connect(self, *, pool: int = 1) -> AzureExecutor:
        """An `AzureExecutor` over a sync `ContainerClient` (thread-safe), SDK retries
        off; `pool` is advisory (the SDK's requests transport keeps its own pool)."""
        del pool
        from azure.storage.blob import BlobServiceClient  # noqa: PLC0415 - executor dependency

        from gcd.storage.azure.client import RefuseDoctype  # noqa: PLC0415

        options: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": 10,
            "read_timeout": 60,
            "_additional_pipeline_policies": [RefuseDoctype()],
        }
        connection = self.settings.connection_string()
        if connection is not None:
            service = BlobServiceClient.from_connection_string(connection, **options)
        else:
            from azure.identity import DefaultAzureCredential  # noqa: PLC0415

            service = BlobServiceClient(
                self.settings.account_url, credential=DefaultAzureCredential(), **options
            )
        return AzureExecutor(self, service.get_container_client(self.settings.container))


@dataclass(slots=True)
class AzureExecutor:
    """One task's connection to the container (an `gcd.storage.executor.ExecutorClient`)."""

    target: AzureTarget
    client: ContainerClient
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep

    def _call(self, operation: Callable[[], T], what: str) -> T:
        return call_with_retries(
            operation, what=what, backoff=self.target.backoff, rng=self.rng, sleep=self.sleep
        )

    # -- listing --------------------------------------------------------------------

    def list_prefix(
        self,
        prefix: str,
        *,
        skip: SkipAhead | None = None,
        on_request: Callable[[], None] = lambda: None,
    ) -> Iterator[Listed]:
        """Every blob under `prefix` in name order, skipping live prefix directories
        (`gcd.storage.executor.walk_pages`, as for S3)."""
        what = f"List Blobs {self.target.bucket}/{prefix}"
        return walk_pages(
            lambda cursor: self._call(
                functools.partial(self.list_page, prefix, cursor, on_request), what
            ),
            prefix,
            skip,
        )

    def list_page(self, prefix: str, cursor: Cursor, count: Callable[[], None]) -> Page:
        """One page under `prefix` from `cursor` (`AzureBlobStore.list_page`, sync):
        rows, and the continuation token (None: the prefix is done)."""
        walk = _Walk.decode(cursor.token) if cursor.token is not None else None
        if walk is None:
            start = cursor.start_after
            pending = (prefix,) if start is None else tuple(self._after(prefix, start, count))
            walk = _Walk(pending, None)
        rows: list[Listed] = []
        while walk.pending and not rows:
            current = walk.pending[0]
            if not current.endswith("/") and current != prefix:  # a blob the walk found
                count()
                rows.extend(self._info(current))
                walk = _Walk(walk.pending[1:], None)
                continue
            count()
            pages = self.client.list_blobs(
                name_starts_with=current, results_per_page=_PAGE
            ).by_page(continuation_token=walk.token)
            rows.extend(_row(b) for b in next(pages, ()))
            token = getattr(pages, "continuation_token", None)
            walk = _Walk(walk.pending if token else walk.pending[1:], token)
        return rows, (walk.encode() if walk.pending else None)

    def _after(self, prefix: str, start_after: str, count: Callable[[], None]) -> list[str]:
        """The directories and blobs under `prefix` sorting after `start_after`, in byte
        order (`AzureBlobStore._after`: one delimiter listing per level)."""
        names: list[str] = []
        inside: str | None = None
        for page in self.client.walk_blobs(name_starts_with=prefix, delimiter="/").by_page():
            count()
            for item in page:
                if item.name > start_after:
                    names.append(item.name)
                elif item.name.endswith("/") and start_after.startswith(item.name):
                    inside = item.name
        if inside is not None and inside != prefix:
            names += self._after(inside, start_after, count)
        return sorted(names, key=str.encode)

    def _info(self, name: str) -> list[Listed]:
        """The blob the walk found, or nothing when it is gone since."""
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        try:
            props = self.client.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError:
            return []
        return [_row(props)]

    # -- deleting -------------------------------------------------------------------

    def delete_keys(
        self,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None] = lambda _count: None,
        on_request: Callable[[], None] = lambda: None,
        on_markers: Callable[[Sequence[tuple[str, str]]], None] = lambda _markers: None,
    ) -> dict[str, str | None]:
        """Blob Batch deletes of `keys`, `MAX_BATCH` per request, retried (module docs)."""
        del on_markers  # no delete markers on this store
        from gcd.storage.azure.client import MAX_BATCH  # noqa: PLC0415

        return in_parts(keys, MAX_BATCH, functools.partial(self._delete_part, pace, on_request))

    def _delete_part(
        self, pace: Callable[[int], None], on_request: Callable[[], None], keys: list[str]
    ) -> dict[str, str | None]:
        def send(batch: list[str]) -> tuple[Sequence[str], Sequence[KeyFailure]]:
            def request() -> list[Any]:
                pace(len(batch))
                on_request()
                return list(self.client.delete_blobs(*batch, raise_on_any_failure=False))

            answers = self._call(request, f"Blob Batch delete on {self.target.bucket}")
            return self._answers(batch, answers)

        return delete_triaged(
            keys,
            send,
            backoff=self.target.backoff,
            rng=self.rng,
            sleep=self.sleep,
            unanswered="not answered by Blob Batch",
        )

    def _answers(self, batch: list[str], answers: list[Any]) -> tuple[list[str], list[KeyFailure]]:
        """(deleted, failures) of one Blob Batch answer, judged as the daemon judges them
        (`gcd.storage.azure.client.batch_answer_failure`); a key without an answer is retried."""
        from gcd.storage.azure.client import batch_answer_failure  # noqa: PLC0415 - the SDK

        deleted: list[str] = []
        failures: list[KeyFailure] = []
        for key, answer in zip(batch, answers, strict=False):
            failure = batch_answer_failure(self.target.bucket, key, answer)
            if failure is None:
                deleted.append(key)
            else:
                failures.append(failure)
        return deleted, failures

    # -- probing --------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        """True when blob `key` exists (one Get Blob Properties, retried)."""
        return bool(
            self._call(
                lambda: self.client.get_blob_client(key).exists(),
                f"Get Blob Properties {self.target.bucket}/{key}",
            )
        )

    def put_object(self, key: str, body: bytes) -> None:
        """Put Blob `key` (a journal segment), retried."""
        self._call(
            lambda: self.client.upload_blob(key, body, overwrite=True),
            f"Put Blob {self.target.bucket}/{key}",
        )


def _row(blob: Any) -> Listed:
    """A listed (or walked-to) blob as a source row: no versions on Azure."""
    return (
        str(blob.name),
        int(blob.size or 0),
        float(blob.last_modified.timestamp()),
        None,
        True,
        False,
    )
