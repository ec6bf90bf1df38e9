"""The executors' retry loops, for every store (`gcd.rules.backoff`'s policy).

Spark tasks are synchronous, so they cannot use the sweeper's async `Retrier`; each
store's executor code (`gcd.storage.s3.executor`, `gcd.storage.azure.executor`,
`gcd.storage.gcs.executor`)
calls `retry` with its own `translate`: the SDK's exception as the `StorageError` the
policy judges (None: not a storage failure, raised as it is). Nothing here imports an
SDK, so the executors of any store can import it.

`delete_triaged` is the per-key loop around a store's batch delete: each answer is
triaged per key (`gcd.rules.triage`: deleted, failed for good, or to be retried), the
keys to retry are sent again under the same policy, and a key is reported deleted
only when an answer said so.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from gcd.rules.backoff import Backoff
from gcd.rules.triage import triage
from gcd.storage.objectstore import KeyFailure
from l0gc.errors import StorageError

__all__ = ["delete_triaged", "retry"]

T = TypeVar("T")


def retry(
    operation: Callable[[], T],
    *,
    backoff: Backoff,
    translate: Callable[[Exception], StorageError | None] | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`operation()`, retried while `backoff` retries its failure; raises the last
    StorageError (a translated one chained to the SDK's exception)."""
    rng = rng or random.Random()
    attempt = 0
    while True:
        try:
            return operation()
        except StorageError as exc:
            if not backoff.retries(exc, attempt):
                raise
        except Exception as exc:
            error = None if translate is None else translate(exc)
            if error is None:
                raise
            if not backoff.retries(error, attempt):
                raise error from exc
        sleep(backoff.delay(attempt, rng.random()))
        attempt += 1


def _error_text(failure: KeyFailure) -> str:
    """``"Code: message"`` (or the code alone) for a key's decision row."""
    return f"{failure.code}: {failure.message}".rstrip(": ")


def delete_triaged(
    keys: list[str],
    send: Callable[[list[str]], tuple[Sequence[str], Sequence[KeyFailure]]],
    *,
    backoff: Backoff,
    rng: random.Random,
    sleep: Callable[[float], None],
    unanswered: str,
    failed: Callable[[StorageError], str] = str,
) -> dict[str, str | None]:
    """Delete `keys` with `send` (one request, retried as a whole, giving the keys the
    answer says were deleted and the per-key failures); retry the keys whose failure is
    retryable. key -> None when deleted, else the final error text. A key no answer
    names ends as `unanswered`; a request that failed for good fails its
    whole batch with `failed(error)`."""
    outcome: dict[str, str | None] = {}
    remaining = keys
    attempt = 0
    while remaining:
        batch = remaining
        try:
            deleted, failures = send(batch)
        except StorageError as exc:
            outcome.update(dict.fromkeys(batch, failed(exc)))
            return outcome
        sorted_keys = triage(batch, deleted, failures)
        outcome.update(dict.fromkeys(sorted_keys.deleted))
        outcome.update((failure.key, _error_text(failure)) for failure in sorted_keys.failed)
        last_error = {failure.key: _error_text(failure) for failure in sorted_keys.retry_failures}
        retry_keys = list(sorted_keys.retry)
        if not retry_keys:
            break
        if not backoff.can_retry(attempt):
            for key in retry_keys:
                outcome[key] = last_error.get(key, unanswered) + (
                    f" (gave up after {backoff.max_attempts} attempts)"
                )
            break
        sleep(backoff.delay(attempt, rng.random()))
        attempt += 1
        remaining = retry_keys
    return outcome
