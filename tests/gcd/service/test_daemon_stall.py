"""Issue 36: a stalled daemon says so. A round stuck on its store, or an M read from etcd
that no round applies, make `/readyz` answer 503 with the reason and the staleness gauges
grow past `--stale-after`; before, /readyz answered 200 and rounds_total stayed 0."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from gcd.service.daemon import make_app
from gcd.storage.objectstore import ListPage
from l0lab.testing.memory import MemoryObjectStore
from tests.gcd.service.test_daemon import CONFIG, Clock, memory_setup, publish, put_garbage
from tests.waiting import wait_until


def gauge(daemon: Any, name: str) -> float:
    value = daemon.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return float(value)


class HangingStore(MemoryObjectStore):
    """A store whose LISTs hang until released (a store that never finishes answering)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.waiting = 0

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        self.waiting += 1
        await self.release.wait()
        return await super().list_page(prefix, **options)


class FailingStore(MemoryObjectStore):
    """A store whose every LIST fails with a bug's exception: each round fails."""

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        raise RuntimeError("a broken store")


async def test_a_round_stuck_on_its_store_makes_the_daemon_unready() -> None:
    clock = Clock()
    _, _, _, daemon = await memory_setup(clock)
    store = HangingStore()
    daemon.sweeper.store = store
    daemon.sweeper.deleter.store = store
    round_task = asyncio.create_task(daemon.run_once())
    await wait_until(lambda: store.waiting > 0, timeout_s=10, what="the round's first LIST")
    assert daemon.readiness() == (True, "ok")  # admitted, within --stale-after
    clock.now += CONFIG.stale_after_s + 1
    ready, why = daemon.readiness()
    assert not ready
    assert why.startswith("stalled: no round has completed for")
    async with TestClient(TestServer(make_app(daemon, lambda: None))) as http:
        answer = await http.get("/readyz")
        assert answer.status == 503
        assert "stalled" in await answer.text()
        await http.get("/metrics")
    assert gauge(daemon, "l0gc_sweeper_seconds_since_last_round") > CONFIG.stale_after_s
    store.release.set()
    await round_task
    assert daemon.readiness() == (True, "ok")
    assert gauge(daemon, "l0gc_sweeper_seconds_since_last_round") == 0


async def test_an_m_no_round_applies_makes_the_daemon_unready() -> None:
    clock = Clock()
    _, watermarks, store, daemon = await memory_setup(clock)
    await daemon.run_once()  # lists with M 5
    put_garbage(store, clock, range(6, 8), "b")
    await publish(watermarks, 7)
    await daemon.look()  # M 7 seen between rounds, not applied yet
    broken = FailingStore()
    daemon.sweeper.store = broken
    for _ in range(2):  # rounds keep completing, each failing: M 7 is never applied
        await daemon.run_once()
        clock.now += CONFIG.stale_after_s / 2 + 1
    await daemon.run_once()
    assert daemon.seconds_since_last_round() == 0
    assert gauge(daemon, "l0gc_sweeper_safe_epoch_unapplied_seconds") > CONFIG.stale_after_s
    ready, why = daemon.readiness()
    assert not ready
    assert "M 7 read" in why
    assert "listed M 5" in why
    daemon.sweeper.store = store
    await daemon.run_once()  # the round applies M 7
    assert daemon.readiness() == (True, "ok")
    assert gauge(daemon, "l0gc_sweeper_safe_epoch_unapplied_seconds") == 0
