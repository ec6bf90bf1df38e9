"""The writer-side epoch clock caches the cluster epoch; the stamping rule takes the max."""

from __future__ import annotations

import asyncio

import pytest

from l0gc.errors import ConfigError, EtcdUnavailable, WatermarkUnavailable
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from watermark.service.clock import EpochClock, stamp_epoch


class FakeClock:
    """A virtual monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ScriptedSource:
    """An epoch source returning queued values (or raising queued errors), counting reads."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.reads = 0
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def get_cluster_epoch(self) -> int:
        self.reads += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_stamp_is_max_of_cached_and_creation_epochs() -> None:
    """An object's epoch is never below the creation epoch of any partition it holds."""
    assert stamp_epoch(10, []) == 10
    assert stamp_epoch(10, [3, 7]) == 10
    assert stamp_epoch(10, [3, 12, 11]) == 12
    assert stamp_epoch(5, iter([5])) == 5


async def test_current_is_cached_for_the_refresh_interval() -> None:
    """Within the interval current() does no I/O; after it, it re-reads."""
    clock = FakeClock()
    source = ScriptedSource(4, 6)
    epochs = EpochClock(source, refresh_interval_s=2.0, now=clock)
    initial = epochs.cached
    assert initial is None
    assert await epochs.current() == 4
    clock.now += 1.9
    assert await epochs.current() == 4
    assert source.reads == 1
    clock.now += 0.1
    assert await epochs.current() == 6
    assert source.reads == 2
    assert epochs.cached == 6
    assert epochs.age_s == 0.0


async def test_cached_epoch_never_goes_backwards() -> None:
    """A lower value read later does not lower the cached epoch."""
    clock = FakeClock()
    epochs = EpochClock(ScriptedSource(9, 7), refresh_interval_s=1.0, now=clock)
    assert await epochs.refresh() == 9
    assert await epochs.refresh() == 9


async def test_outage_serves_the_cached_epoch_and_retries_after_an_interval() -> None:
    """With etcd down, current() returns the cached value and waits an interval to retry."""
    clock = FakeClock()
    source = ScriptedSource(4, EtcdUnavailable("127.0.0.1:2379", "down"), 5)
    epochs = EpochClock(source, refresh_interval_s=1.0, now=clock)
    assert await epochs.current() == 4
    clock.now += 1.0
    assert await epochs.current() == 4
    assert await epochs.current() == 4
    assert source.reads == 2
    clock.now += 1.0
    assert await epochs.current() == 5


async def test_first_read_failure_raises() -> None:
    """With nothing cached, a failed read is the caller's problem."""
    epochs = EpochClock(ScriptedSource(WatermarkUnavailable("missing")), refresh_interval_s=1.0)
    with pytest.raises(WatermarkUnavailable):
        await epochs.current()


async def test_concurrent_callers_share_one_refresh() -> None:
    """Many writers asking at once cause a single etcd read."""
    source = ScriptedSource(3)
    source.gate = asyncio.Event()
    epochs = EpochClock(source, refresh_interval_s=5.0, now=FakeClock())
    waiters = [asyncio.create_task(epochs.current()) for _ in range(5)]
    await source.entered.wait()  # one task is inside the read; the others queue on the lock
    source.gate.set()
    assert await asyncio.gather(*waiters) == [3] * 5
    assert source.reads == 1


async def test_clock_reads_the_store() -> None:
    """EpochClock works on a WatermarkStore and follows epoch advances."""
    clock = FakeClock()
    store = WatermarkStore(MemoryKV(), "/l0gc/clock")
    await store.init_cluster_epoch(7)
    epochs = EpochClock(store, refresh_interval_s=1.0, now=clock)
    assert await epochs.current() == 7
    await store.advance_cluster_epoch()
    clock.now += 1.0
    assert await epochs.current() == 8


def test_negative_interval_is_rejected() -> None:
    """A negative refresh interval is a configuration error."""
    with pytest.raises(ConfigError):
        EpochClock(ScriptedSource(), refresh_interval_s=-1.0)
