"""Token bucket and AIMD concurrency limiter."""

from __future__ import annotations

import asyncio

import pytest

from gcd.storage.ratelimit import AimdLimiter, TokenBucket
from l0gc.errors import ConfigError


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_bucket_allows_burst_then_paces() -> None:
    """A full bucket pays a burst at once; after that callers wait count/rate seconds."""
    clock = FakeClock()
    bucket = TokenBucket(100, 100, clock=clock, sleep=clock.sleep)
    await bucket.acquire(100)
    assert clock.slept == []
    await bucket.acquire(50)
    assert clock.slept == [pytest.approx(0.5)]


async def test_bucket_long_run_rate_is_exact() -> None:
    """Batches larger than the burst still average out to the configured rate."""
    clock = FakeClock()
    bucket = TokenBucket(200, 10, clock=clock, sleep=clock.sleep)
    for _ in range(10):
        await bucket.acquire(1000)
    # 10 000 tokens at 200/s minus the initial 10 of burst
    assert clock.now == pytest.approx((10_000 - 10) / 200)


async def test_bucket_refills_with_time() -> None:
    """Time passing refills the bucket up to the burst, not beyond."""
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock, sleep=clock.sleep)
    await bucket.acquire(5)
    clock.now += 100
    assert bucket.tokens == 5
    assert bucket.reserve(5) == 0


def test_bucket_rejects_bad_rate() -> None:
    """A zero or negative rate is a ConfigError."""
    with pytest.raises(ConfigError):
        TokenBucket(0)


async def test_aimd_halves_once_per_generation_and_grows_back() -> None:
    """Throttles from requests in flight at a cut halve once; successes add one at a time."""
    limiter = AimdLimiter(8, increase_after=2)
    slots = [await limiter.acquire() for _ in range(8)]
    for slot in slots:
        await limiter.release(slot, throttled=True)
    assert limiter.limit == 4
    assert limiter.cuts == 1
    slot = await limiter.acquire()
    await limiter.release(slot, throttled=True)
    assert limiter.limit == 2
    for _ in range(4):
        await limiter.release(await limiter.acquire())
    assert limiter.limit == 4
    for _ in range(100):
        await limiter.release(await limiter.acquire())
    assert limiter.limit == 8


async def test_aimd_never_below_minimum() -> None:
    """Repeated throttling stops at the minimum limit."""
    limiter = AimdLimiter(4)
    for _ in range(10):
        await limiter.release(await limiter.acquire(), throttled=True)
    assert limiter.limit == 1


async def test_aimd_bounds_requests_in_flight() -> None:
    """No more than `limit` slots are held at once; a release lets a waiter in."""
    limiter = AimdLimiter(2)
    first = await limiter.acquire()
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    await limiter.release(first)
    await asyncio.wait_for(waiter, timeout=5)
    assert limiter.in_flight == 2


def test_aimd_rejects_bad_bounds() -> None:
    """A maximum below 1 or a minimum above the maximum is a ConfigError."""
    with pytest.raises(ConfigError):
        AimdLimiter(0)
    with pytest.raises(ConfigError):
        AimdLimiter(2, minimum=3)
