"""Azure Blob Storage on Spark executors: `AzureTarget`, a `gcd.storage.executor.ExecutorStore`.

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
from gcd.rules.cursor import Cursor, Skip, can_skip, next_cursor, skip
from gcd.storage.azure.settings import AzureSettings
from gcd.storage.objectstore import KeyFailure
from gcd.storage.sync_retry import delete_triaged, retry
from l0gc.errors import StorageError

if TYPE_CHECKING:
    from gcd.rules.layout import KeyLayout
    from gcd.storage.executor import Listed

__all__ = ["AzureTarget", "call_with_retries"]

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
    """One container as executors reach it: plain values (module docstring)."""

    settings: AzureSettings
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.2, cap_s=10.0))

    @property
    def bucket(self) -> str:
        """The container."""
        return self.settings.container

    def client(self, *, pool: int = 1) -> Any:
        """A sync `ContainerClient` (thread-safe), SDK retries off; `pool` is advisory
        (the SDK's requests transport keeps its own pool of connections)."""
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
        return service.get_container_client(self.settings.container)

    # -- listing --------------------------------------------------------------------

    def list_prefix(
        self,
        client: Any,
        prefix: str,
        *,
        layout: KeyLayout | None = None,
        skip_above_epoch: int | None = None,
        on_request: Callable[[], None] | None = None,
        rng: random.Random | None = None,
    ) -> Iterator[Listed]:
        """Every blob under `prefix` in name order, skipping live prefix directories
        (`gcd.rules.cursor`, as `gcd.spark.listing.list_prefix` does for S3)."""
        limit = skip_above_epoch if layout is not None and can_skip(layout) else None
        count = on_request or (lambda: None)
        cursor: Cursor | None = Cursor()
        while cursor is not None:
            rows, token = call_with_retries(
                functools.partial(self.list_page, client, prefix, cursor, count),
                what=f"List Blobs {self.bucket}/{prefix}",
                backoff=self.backoff,
                rng=rng,
            )
            found: Skip | None = None
            for row in rows:
                skip_to = found.start_after if found is not None else None
                if skip_to is not None and row[0] <= skip_to:
                    continue
                yield row
                if limit is not None and layout is not None:
                    found = skip(layout, prefix, layout.parse(row[0]), limit) or found
                    if found is not None and found.done:
                        break
            cursor = next_cursor(cursor, found, rows[-1][0] if rows else None, token)

    def list_page(
        self, client: Any, prefix: str, cursor: Cursor, count: Callable[[], None]
    ) -> tuple[list[Listed], str | None]:
        """One page under `prefix` from `cursor` (`AzureBlobStore.list_page`, sync):
        rows, and the continuation token (None: the prefix is done)."""
        walk = _Walk.decode(cursor.token) if cursor.token is not None else None
        if walk is None:
            start = cursor.start_after
            pending = (
                (prefix,) if start is None else tuple(self._after(client, prefix, start, count))
            )
            walk = _Walk(pending, None)
        rows: list[Listed] = []
        while walk.pending and not rows:
            current = walk.pending[0]
            if not current.endswith("/") and current != prefix:  # a blob the walk found
                count()
                rows.extend(self._info(client, current))
                walk = _Walk(walk.pending[1:], None)
                continue
            count()
            pages = client.list_blobs(name_starts_with=current, results_per_page=_PAGE).by_page(
                continuation_token=walk.token
            )
            rows.extend(_row(b) for b in next(pages, ()))
            token = getattr(pages, "continuation_token", None)
            walk = _Walk(walk.pending if token else walk.pending[1:], token)
        return rows, (walk.encode() if walk.pending else None)

    def _after(
        self, client: Any, prefix: str, start_after: str, count: Callable[[], None]
    ) -> list[str]:
        """The directories and blobs under `prefix` sorting after `start_after`, in byte
        order (`AzureBlobStore._after`: one delimiter listing per level)."""
        names: list[str] = []
        inside: str | None = None
        for page in client.walk_blobs(name_starts_with=prefix, delimiter="/").by_page():
            count()
            for item in page:
                if item.name > start_after:
                    names.append(item.name)
                elif item.name.endswith("/") and start_after.startswith(item.name):
                    inside = item.name
        if inside is not None and inside != prefix:
            names += self._after(client, inside, start_after, count)
        return sorted(names, key=str.encode)

    def _info(self, client: Any, name: str) -> list[Listed]:
        """The blob the walk found, or nothing when it is gone since."""
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        try:
            props = client.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError:
            return []
        return [_row(props)]

    # -- deleting -------------------------------------------------------------------

    def delete_keys(
        self,
        client: Any,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None] = lambda _count: None,
        on_request: Callable[[], None] = lambda: None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, str | None]:
        """Blob Batch deletes of `keys`, `MAX_BATCH` per request, retried (module docs)."""
        from gcd.storage.azure.client import MAX_BATCH  # noqa: PLC0415

        outcome: dict[str, str | None] = {}
        for start in range(0, len(keys), MAX_BATCH):
            part = list(keys[start : start + MAX_BATCH])
            outcome.update(
                self._delete_part(
                    client,
                    part,
                    pace=pace,
                    on_request=on_request,
                    rng=rng or random.Random(),
                    sleep=sleep,
                )
            )
        return outcome

    def _delete_part(
        self,
        client: Any,
        keys: list[str],
        *,
        pace: Callable[[int], None],
        on_request: Callable[[], None],
        rng: random.Random,
        sleep: Callable[[float], None],
    ) -> dict[str, str | None]:
        def send(batch: list[str]) -> tuple[Sequence[str], Sequence[KeyFailure]]:
            def request() -> list[Any]:
                pace(len(batch))
                on_request()
                return list(client.delete_blobs(*batch, raise_on_any_failure=False))

            answers = call_with_retries(
                request,
                what=f"Blob Batch delete on {self.bucket}",
                backoff=self.backoff,
                rng=rng,
                sleep=sleep,
            )
            return self._answers(batch, answers)

        return delete_triaged(
            keys,
            send,
            backoff=self.backoff,
            rng=rng,
            sleep=sleep,
            unanswered="not answered by Blob Batch",
        )

    def _answers(self, batch: list[str], answers: list[Any]) -> tuple[list[str], list[KeyFailure]]:
        """(deleted, failures) of one Blob Batch answer, judged as the daemon judges them
        (`gcd.storage.azure.client.batch_answer_failure`); a key without an answer is retried."""
        from gcd.storage.azure.client import batch_answer_failure  # noqa: PLC0415 - the SDK

        deleted: list[str] = []
        failures: list[KeyFailure] = []
        for key, answer in zip(batch, answers, strict=False):
            failure = batch_answer_failure(self.bucket, key, answer)
            if failure is None:
                deleted.append(key)
            else:
                failures.append(failure)
        return deleted, failures

    # -- probing --------------------------------------------------------------------

    def exists(self, client: Any, key: str) -> bool:
        """True when blob `key` exists (one Get Blob Properties, retried)."""
        return bool(
            call_with_retries(
                lambda: client.get_blob_client(key).exists(),
                what=f"Get Blob Properties {self.bucket}/{key}",
                backoff=self.backoff,
            )
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
