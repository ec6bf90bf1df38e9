"""The executors' one retry loop, for every store (`gcd.rules.backoff`'s policy).

Spark tasks are synchronous, so they cannot use the sweeper's async `Retrier`; each
store's executor code (`gcd.spark.s3client`, `gcd.spark.azure`, `gcd.spark.gcsclient`)
calls `retry` with its own `translate`: the SDK's exception as the `StorageError` the
policy judges (None: not a storage failure, raised as it is). Nothing here imports an
SDK, so the executors of any store can import it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from gcd.errors import StorageError
from gcd.rules.backoff import Backoff

__all__ = ["retry"]

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
