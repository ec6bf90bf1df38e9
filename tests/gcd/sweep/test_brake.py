"""The brake the deleter asks before each DeleteObjects request, and the daemon's resume wait."""

from __future__ import annotations

import asyncio

import pytest

from gcd.sweep.binding import BoundSource
from gcd.sweep.brake import OPEN, PauseBrake, brake_for, until_resumed
from l0gc.contract.binding import StorageTarget
from l0gc.errors import L0gcError
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.memory import MemoryObjectStore


class FakePauses:
    """A pause key in memory; counts reads; can fail or hang."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.reads = 0
        self.error: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def get_paused(self) -> str | None:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.reason


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_pause_stops_the_round_until_reset() -> None:
    """Once the pause key is seen the brake stays engaged for the round, without reading."""
    pauses, clock = FakePauses(), Clock()
    brake = PauseBrake(pauses, clock=clock)
    assert await brake.check() is None
    assert brake.engaged is None
    pauses.reason = "incident 4711"
    clock.now += 0.2
    assert await brake.check() == "paused during the round: incident 4711"
    pauses.reason = None
    clock.now += 5
    reads = pauses.reads
    assert await brake.check() == "paused during the round: incident 4711"
    assert brake.engaged == "paused during the round: incident 4711"
    assert pauses.reads == reads  # final for the round: no further reads
    brake.reset()
    assert brake.engaged is None
    assert await brake.check() is None


async def test_reads_at_most_once_per_interval() -> None:
    """Checks within min_interval_s reuse the last answer; the next one reads again."""
    pauses, clock = FakePauses(), Clock()
    brake = PauseBrake(pauses, clock=clock, min_interval_s=0.2)
    for _ in range(10):
        assert await brake.check() is None
    assert pauses.reads == 1
    pauses.reason = "now"
    clock.now += 0.19
    assert await brake.check() is None  # the cached answer stands
    clock.now += 0.01
    assert await brake.check() == "paused during the round: now"
    assert pauses.reads == 2


async def test_concurrent_checks_share_one_read() -> None:
    """Eight deleters asking at once cause one etcd GET, and all get its answer."""
    pauses = FakePauses()
    pauses.gate = asyncio.Event()
    pauses.reason = "maintenance"
    brake = PauseBrake(pauses)
    checks = [asyncio.create_task(brake.check()) for _ in range(8)]
    await asyncio.sleep(0)
    pauses.gate.set()
    answers = await asyncio.gather(*checks)
    assert pauses.reads == 1
    assert set(answers) == {"paused during the round: maintenance"}


@pytest.mark.parametrize(
    "error", [L0gcError("etcd down"), OSError("refused"), RuntimeError("grpc")]
)
async def test_an_unreadable_pause_key_fails_closed(error: BaseException) -> None:
    """An etcd error while reading the pause key stops deletion, saying why."""
    pauses = FakePauses()
    pauses.error = error
    brake = PauseBrake(pauses)
    reason = await brake.check()
    assert reason is not None
    assert reason.startswith("pause state unknown")
    assert str(error) in reason


async def test_a_hanging_read_fails_closed_after_the_timeout() -> None:
    """A read that does not answer within timeout_s stops deletion."""
    pauses = FakePauses()
    pauses.gate = asyncio.Event()  # never set
    brake = PauseBrake(pauses, timeout_s=0.05)
    reason = await brake.check()
    assert reason is not None
    assert "took over 0.05 s" in reason


async def test_brake_for_reads_pause_keys_only_where_there_are_some() -> None:
    """A store or bound source with a pause key gets a PauseBrake; no etcd, the open brake."""
    store = WatermarkStore(MemoryKV(), "/l0gc/b")
    brake = brake_for(store)
    assert isinstance(brake, PauseBrake)
    await store.set_paused("x")
    assert await brake.check() == "paused during the round: x"
    assert brake_for(None) is OPEN
    assert await OPEN.check() is None
    bound = BoundSource(store, StorageTarget("bucket", "level_zero/data"), MemoryObjectStore())
    bound_brake = brake_for(bound)  # what gcd sweep and gcd daemon use
    assert isinstance(bound_brake, PauseBrake)
    assert await bound_brake.check() == "paused during the round: x"


async def test_until_resumed_polls_while_paused_only() -> None:
    """It returns once the key is gone, polling every poll_s; errors mean poll again."""
    pauses = FakePauses()
    pauses.reason = "p"
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            pauses.error = OSError("blip")
        if len(waits) == 3:
            pauses.error, pauses.reason = None, None

    await until_resumed(pauses, poll_s=2.0, sleep=sleep)
    assert waits == [2.0, 2.0, 2.0]
    assert pauses.reads == 4
    waits.clear()
    await until_resumed(pauses, poll_s=2.0, sleep=sleep)
    assert waits == []  # not paused: no polling at all
