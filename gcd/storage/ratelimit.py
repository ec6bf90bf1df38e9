"""Request pacing for the sweeper: a token bucket for deletes per second, and an AIMD
concurrency limiter that backs off when the store throttles us.

Design notes: docs/internals/storage.md, `gcd.storage.ratelimit`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from l0gc.errors import ConfigError

__all__ = ["AimdLimiter", "Slot", "TokenBucket"]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    """`rate` tokens per second with a `burst` reserve; callers may go into debt."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not rate > 0:
            raise ConfigError(f"rate {rate!r} must be > 0 per second; omit it for no limit")
        self.rate = float(rate)
        self.burst = float(burst) if burst is not None else max(1.0, self.rate)
        if not self.burst > 0:
            raise ConfigError(f"burst {burst!r} must be > 0")
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._stamp = clock()

    @property
    def tokens(self) -> float:
        """Current balance (negative while callers are waiting out a debt)."""
        self._refill()
        return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._stamp)
        self._stamp = now
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate)

    def reserve(self, count: float) -> float:
        """Take `count` tokens now; return how many seconds the caller must wait."""
        if count < 0:
            raise ValueError(f"cannot reserve a negative number of tokens ({count})")
        self._refill()
        self._tokens -= count
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    async def acquire(self, count: float = 1.0) -> None:
        """Wait until `count` tokens are paid for."""
        wait = self.reserve(count)
        if wait > 0:
            await self._sleep(wait)


@dataclass(frozen=True, slots=True)
class Slot:
    """A granted in-flight slot; `generation` is the limiter's cut count when granted."""

    generation: int


class AimdLimiter:
    """Additive-increase / multiplicative-decrease limit on requests in flight."""

    def __init__(self, maximum: int, *, minimum: int = 1, increase_after: int = 10) -> None:
        if maximum < 1:
            raise ConfigError(f"concurrency {maximum!r} must be >= 1")
        if not 1 <= minimum <= maximum:
            raise ConfigError(f"minimum concurrency {minimum!r} must be 1-{maximum}")
        if increase_after < 1:
            raise ConfigError(f"increase_after {increase_after!r} must be >= 1")
        self.maximum = maximum
        self.minimum = minimum
        self.increase_after = increase_after
        self.limit = maximum
        self.in_flight = 0
        self.generation = 0
        self.cuts = 0
        self._successes = 0
        self._changed = asyncio.Condition()

    async def acquire(self) -> Slot:
        """Wait for a free slot under the current limit."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1
            return Slot(self.generation)

    def on_success(self) -> None:
        """A request succeeded: after `increase_after` in a row, allow one more in flight."""
        self._successes += 1
        if self._successes >= self.increase_after:
            self._successes = 0
            self.limit = min(self.maximum, self.limit + 1)

    def on_throttle(self, slot: Slot) -> None:
        """The store throttled a request: halve the limit, once per generation."""
        self._successes = 0
        if slot.generation != self.generation:
            return
        self.generation += 1
        self.cuts += 1
        self.limit = max(self.minimum, self.limit // 2)

    async def release(self, slot: Slot, *, throttled: bool = False, ok: bool = True) -> None:
        """Give a slot back, telling the limiter how the request went."""
        if throttled:
            self.on_throttle(slot)
        elif ok:
            self.on_success()
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()
