"""Retries with jittered exponential backoff ("full jitter", as AWS recommends).

Attempt n (0-based) waits a uniform random time in [0, min(cap, base * 2**n)]. Random
waits spread the retries of many concurrent requests (and of many sweepers) so they
do not hit the store again in lockstep. botocore's own retries are switched off: this
module is the only place that retries, so retries are counted, logged and bounded.

The sleep and the random source are injected, so tests run without waiting.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gcd.errors import StorageError
from watermark.errors import ConfigError

__all__ = ["Backoff", "Retrier"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[StorageError, int, float], None]


@dataclass(frozen=True, slots=True)
class Backoff:
    """The backoff schedule: `max_attempts` tries in all, waits capped at `cap_s`."""

    base_s: float = 0.2
    cap_s: float = 20.0
    max_attempts: int = 10

    def __post_init__(self) -> None:
        if not self.base_s >= 0 or not self.cap_s >= self.base_s:
            msg = f"backoff base {self.base_s!r} s and cap {self.cap_s!r} s need 0 <= base <= cap"
            raise ConfigError(msg)
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts {self.max_attempts!r} must be >= 1")

    def ceiling(self, attempt: int) -> float:
        """The longest wait after failed attempt number `attempt` (0-based)."""
        return min(self.cap_s, self.base_s * 2.0 ** min(attempt, 62))

    def delay(self, attempt: int, uniform: float) -> float:
        """The wait after attempt `attempt`, given a uniform random number in [0, 1)."""
        return self.ceiling(attempt) * uniform


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
        return attempt + 1 < self.backoff.max_attempts

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        on_retry: OnRetry | None = None,
    ) -> T:
        """Await `operation()`, retrying retryable StorageErrors; re-raise the last one."""
        attempt = 0
        while True:
            try:
                return await operation()
            except StorageError as exc:
                if not exc.retryable or not self.can_retry(attempt):
                    raise
                delay = self.backoff.delay(attempt, self.rng.random())
                if on_retry is not None:
                    on_retry(exc, attempt, delay)
                self.retries += 1
                await self.sleep(delay)
                attempt += 1
