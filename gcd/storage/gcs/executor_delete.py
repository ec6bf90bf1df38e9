"""The delete stage on GCS: JSON batches of 100 from the executors, paced, retried.

Design notes: docs/internals/spark.md, `gcd.storage.gcs.executor_delete`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from gcd.storage.gcs.executor import GcsClient
from gcd.storage.gcs.wire import MAX_BATCH
from gcd.storage.objectstore import DeleteResult, KeyFailure
from gcd.storage.sync_retry import delete_triaged
from gcd.storage.sync_retry import retry as call_retried

__all__ = ["delete_keys"]


def _delete_batch(
    client: GcsClient,
    keys: list[str],
    *,
    pace: Callable[[int], None],
    on_request: Callable[[], None],
    rng: random.Random,
    sleep: Callable[[float], None],
) -> dict[str, str | None]:
    """One batch of <= 100 keys, retried as a whole and per key (module docs)."""
    backoff = client.target.backoff

    def send(batch: list[str]) -> tuple[Sequence[str], Sequence[KeyFailure]]:
        def request() -> DeleteResult:
            pace(len(batch))
            on_request()
            return client.delete_batch(batch)

        result = call_retried(request, backoff=backoff, rng=rng, sleep=sleep)
        return result.deleted, result.errors

    return delete_triaged(
        keys,
        send,
        backoff=backoff,
        rng=rng,
        sleep=sleep,
        unanswered="not answered by the batch",
        failed=lambda exc: f"{exc.code}: {exc}",
    )


def delete_keys(
    client: GcsClient,
    keys: Sequence[str],
    *,
    pace: Callable[[int], None] = lambda _count: None,
    on_request: Callable[[], None] = lambda: None,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str | None]:
    """Delete up to 1000 keys in batches of 100; key -> None when deleted, else the final
    error text (``"code: message"``)."""
    rng = rng or random.Random()
    outcome: dict[str, str | None] = {}
    for start in range(0, len(keys), MAX_BATCH):
        part = list(keys[start : start + MAX_BATCH])
        outcome.update(
            _delete_batch(client, part, pace=pace, on_request=on_request, rng=rng, sleep=sleep)
        )
    return outcome
