"""The async retry loop: runs a request under the retry policy (`gcd.rules.backoff`).

`Retrier.call` awaits a request and, while the policy says a failure is worth another
attempt, sleeps the jittered backoff and sends it again; the last failure is raised.
The sweeper's lister and the deleter's per-key retries (`Retrier.can_retry`,
`Retrier.wait`) use the same retrier, so one random source and one counter see every
retry of a sweeper. The policy itself (which errors, how many attempts, how long) is
`gcd.rules.backoff.Backoff`'s; this module only sleeps.

The sleep and the random source are injected, so tests run without waiting and the
simulation's runs are reproducible: every retry draws exactly one number, after the
policy said "retry" and before the sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gcd.rules.backoff import Backoff
from l0gc.errors import StorageError

__all__ = ["REQUEST_DEADLINE_S", "Retrier", "deadline"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[StorageError, int, float], None]


def _never() -> bool:
    return False


REQUEST_DEADLINE_S = 120.0
"""Default `--request-deadline`: a request's whole answer within 2 min (twice the read
timeout, which a store dripping one byte at a time restarts with every byte)."""


@contextlib.asynccontextmanager
async def deadline(seconds: float, what: str) -> AsyncIterator[None]:
    """Bound one store request, its whole answer read, to `seconds`: a store that drips its
    answer one byte at a time restarts a read timeout with every byte, not this. Past it,
    the request is cancelled and a retryable `StorageError` ("Timeout") raised."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as exc:
        raise StorageError(
            f"{what}: no complete answer within {seconds:g} s (the request "
            "deadline, --request-deadline)",
            code="Timeout",
            retryable=True,
        ) from exc


@dataclass(slots=True)
class Retrier:
    """Runs calls under a `Backoff`, with injectable sleep and randomness."""

    backoff: Backoff = field(default_factory=Backoff)
    sleep: Sleep = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)
    retries: int = 0
    """Retries made so far (for logs and tests)."""

    async def wait(self, attempt: int) -> float:
        """Sleep the jittered backoff after failed attempt `attempt`; return the wait."""
        delay = self.backoff.delay(attempt, self.rng.random())
        self.retries += 1
        await self.sleep(delay)
        return delay

    def can_retry(self, attempt: int) -> bool:
        """True when attempt number `attempt` (0-based) may be followed by another."""
        return self.backoff.can_retry(attempt)

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        on_retry: OnRetry | None = None,
        stopped: Callable[[], bool] = _never,
    ) -> T:
        """Await `operation()`, retrying what the policy retries; re-raise the last failure.

        `stopped` is asked after each retryable failure: once it says True (shutting
        down), that failure is raised instead of retried.
        """
        attempt = 0
        while True:
            try:
                return await operation()
            except StorageError as exc:
                if not self.backoff.retries(exc, attempt) or stopped():
                    raise
                delay = self.backoff.delay(attempt, self.rng.random())
                if on_retry is not None:
                    on_retry(exc, attempt, delay)
                self.retries += 1
                await self.sleep(delay)
                attempt += 1
