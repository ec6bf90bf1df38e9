"""The epoch ticker: only the elected leader advances the cluster epoch, and leadership
moves when the leader's lease goes away.

Most tests run on a real etcd (marked integration); the lease-expiry tests use the
in-memory KV with a virtual clock, since waiting out a real TTL would need sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from l0gc.contract.kv import KV, Delete
from l0gc.errors import ConfigError
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd
from tests.waiting import wait_until
from watermark.service.metrics import WatermarkMetrics
from watermark.service.ticker import EpochTicker

integration = pytest.mark.integration


class FakeClock:
    """A virtual clock shared by MemoryKV and the tickers."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_tickers(
    kv: KV, namespace: str, count: int, *, now: Callable[[], float] = time.monotonic
) -> tuple[WatermarkStore, list[EpochTicker]]:
    """`count` tickers sharing one store namespace."""
    store = WatermarkStore(kv, namespace)
    tickers = [
        EpochTicker(store, kv, interval_s=1.0, owner_id=f"ticker-{i}", lease_ttl_s=10, now=now)
        for i in range(count)
    ]
    return store, tickers


async def tick_round(tickers: list[EpochTicker]) -> list[bool]:
    """Every ticker ticks once, in order; which ones advanced the epoch."""
    return [await ticker.tick_once() for ticker in tickers]


@pytest.fixture
async def etcd_kv(etcd_server: LocalEtcd) -> AsyncIterator[EtcdKV]:
    """A client of the session etcd."""
    client = EtcdKV([etcd_server.endpoint], timeout_s=5.0)
    yield client
    await client.close()


@integration
async def test_exactly_one_of_two_tickers_advances_per_round(
    etcd_kv: EtcdKV, namespace: str
) -> None:
    """With two tickers on one etcd, each round advances the epoch exactly once."""
    store, tickers = make_tickers(etcd_kv, namespace, 2)
    await store.init_cluster_epoch(10)
    for expected in range(11, 16):
        assert sum(await tick_round(tickers)) == 1
        assert await store.get_cluster_epoch() == expected
    assert [t.is_leader for t in tickers] == [True, False]
    leader = await etcd_kv.get(store.leader_key)
    assert leader is not None
    assert leader.value == b"ticker-0"
    assert leader.lease == tickers[0].lease_id


@integration
async def test_other_ticker_takes_over_when_leader_lease_is_revoked(
    etcd_kv: EtcdKV, namespace: str
) -> None:
    """Revoking the leader's lease lets the other ticker take over; the old one stops."""
    store, (first, second) = make_tickers(etcd_kv, namespace, 2)
    await store.init_cluster_epoch(1)
    assert await tick_round([first, second]) == [True, False]
    lease = first.lease_id
    assert lease is not None
    await etcd_kv.lease_revoke(lease)
    assert await etcd_kv.get(store.leader_key) is None

    assert await tick_round([second, first]) == [True, False]
    assert (second.is_leader, first.is_leader) == (True, False)
    assert await tick_round([first, second]) == [False, True]
    assert await store.get_cluster_epoch() == 4


@integration
async def test_running_tickers_elect_one_leader_and_resign_on_stop(
    etcd_kv: EtcdKV, namespace: str
) -> None:
    """Two running tickers advance the epoch with one leader; stopping removes the key.
    (The lease is long: a short one could lapse while a loaded machine starves the leader,
    and leadership move during the test; stopping resigns, nothing waits for it.)"""
    store = WatermarkStore(etcd_kv, namespace)
    await store.init_cluster_epoch(1)
    tickers = [
        EpochTicker(store, etcd_kv, interval_s=0.05, owner_id=f"run-{i}", lease_ttl_s=60)
        for i in range(2)
    ]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(t.run(stop)) for t in tickers]

    async def epoch_reached(target: int) -> bool:
        return await store.get_cluster_epoch() >= target

    try:
        await wait_until(lambda: epoch_reached(4), timeout_s=60.0, what="cluster epoch 4")
        assert sum(t.is_leader for t in tickers) == 1
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert not any(t.is_leader for t in tickers)
    assert await etcd_kv.get(store.leader_key) is None


async def test_expired_lease_moves_leadership_in_virtual_time() -> None:
    """A leader that stops refreshing loses its lease; the follower takes over."""
    clock = FakeClock()
    kv = MemoryKV(now=clock)
    store, (first, second) = make_tickers(kv, "/l0gc/tick", 2, now=clock)
    await store.init_cluster_epoch(1)
    assert await tick_round([first, second]) == [True, False]
    for _ in range(2):  # the leader is stuck; only the follower ticks
        clock.now += 4.0
        assert not await second.tick_once()
    clock.now += 4.0  # 12 s without a refresh > TTL 10 s
    assert await second.tick_once()
    assert second.is_leader
    assert not await first.tick_once()
    assert not first.is_leader
    assert await store.get_cluster_epoch() == 3


async def test_deleted_leader_key_makes_the_leader_step_down() -> None:
    """If the leader key vanishes (admin delete), the guarded advance fails and it steps down."""
    kv = MemoryKV()
    store, (first, second) = make_tickers(kv, "/l0gc/tick", 2)
    await store.init_cluster_epoch(1)
    assert await tick_round([first, second]) == [True, False]
    await kv.txn([], [Delete(store.leader_key)])
    assert await second.tick_once()
    assert not await first.tick_once()
    assert not first.is_leader
    assert await store.get_cluster_epoch() == 3


async def test_outage_ends_the_tick_without_raising() -> None:
    """While etcd is unavailable a tick logs and returns False; afterwards it goes on."""
    kv = MemoryKV()
    store, (ticker,) = make_tickers(kv, "/l0gc/tick", 1)
    await store.init_cluster_epoch(1)
    assert await ticker.tick_once()
    kv.unavailable = True
    assert not await ticker.tick_once()
    kv.unavailable = False
    assert await ticker.tick_once()
    assert await store.get_cluster_epoch() == 3


async def test_a_leader_cut_off_from_etcd_steps_down_when_its_lease_ends() -> None:
    """Issue 36, item 8: a leader that lost etcd kept reporting itself leader (and the
    leader gauge said 1) until a tick succeeded. Now it says so only while its lease is
    certainly alive, and its first failed tick after that steps down, once."""
    clock = FakeClock()
    kv = MemoryKV(now=clock)
    events: list[object] = []
    store = WatermarkStore(kv, "/l0gc/tick")
    ticker = EpochTicker(
        store, kv, interval_s=1.0, owner_id="t", lease_ttl_s=10, now=clock, hook=events.append
    )
    await store.init_cluster_epoch(1)
    assert await ticker.tick_once()
    kv.unavailable = True
    clock.now += 9.0
    assert not await ticker.tick_once()
    assert ticker.is_leader  # 9 s after the last refresh: the lease may still be alive
    clock.now += 1.5
    assert not ticker.is_leader
    assert not await ticker.tick_once()
    lost = [e for e in events if type(e).__name__ == "TickerLeadershipLost"]
    assert len(lost) == 1
    assert "etcd was unreachable" in str(lost[0])


async def test_tick_without_advance_keeps_leadership_only() -> None:
    """tick_once(advance=False) refreshes the lease and campaigns but does not advance."""
    kv = MemoryKV()
    store, (ticker,) = make_tickers(kv, "/l0gc/tick", 1)
    await store.init_cluster_epoch(4)
    assert not await ticker.tick_once(advance=False)
    assert ticker.is_leader
    assert await store.get_cluster_epoch() == 4


def test_invalid_ticker_settings_are_rejected() -> None:
    """Interval, lease TTL and owner id are validated."""
    kv = MemoryKV()
    store = WatermarkStore(kv, "/l0gc/tick")
    with pytest.raises(ConfigError):
        EpochTicker(store, kv, interval_s=0, owner_id="a", lease_ttl_s=10)
    with pytest.raises(ConfigError):
        EpochTicker(store, kv, interval_s=1, owner_id="a", lease_ttl_s=1)
    with pytest.raises(ConfigError):
        EpochTicker(store, kv, interval_s=1, owner_id="", lease_ttl_s=10)


async def test_claim_whose_answer_was_lost_is_adopted() -> None:
    """A leader key already on this ticker's own lease (a lost reply) is adopted, not stuck."""
    kv = MemoryKV()
    store, (ticker,) = make_tickers(kv, "/l0gc/tick", 1)
    await store.init_cluster_epoch(1)
    assert not await ticker.tick_once(advance=False)
    lease = ticker.lease_id
    assert lease is not None
    ticker._leader_revision = None  # as if the claim's reply had been lost
    assert await ticker.tick_once()
    assert ticker.is_leader
    assert await store.get_cluster_epoch() == 2


async def test_metrics_show_the_interval_the_leader_and_the_last_advance() -> None:
    """Fed by the ticker's events: the interval of a running ticker (0 before it runs),
    the leader gauge, the time of the last advance and the epoch it wrote."""
    kv = MemoryKV()
    store = WatermarkStore(kv, "/l0gc/tick")
    await store.init_cluster_epoch(1)
    metrics = WatermarkMetrics()
    ticker = EpochTicker(
        store, kv, interval_s=0.05, owner_id="m-0", lease_ttl_s=60, hook=metrics.hook
    )

    def value(name: str) -> float | None:
        return metrics.registry.get_sample_value(name)

    assert value("l0gc_watermark_ticker_interval_seconds") == 0
    assert value("l0gc_watermark_ticker_last_advance_timestamp_seconds") == 0
    before = time.time()
    stop = asyncio.Event()
    task = asyncio.create_task(ticker.run(stop))
    try:
        await wait_until(
            lambda: (value("l0gc_watermark_cluster_epoch") or 0) >= 3,
            timeout_s=60.0,
            what="two advances seen by the metrics",
        )
        assert value("l0gc_watermark_ticker_interval_seconds") == 0.05
        assert value("l0gc_watermark_ticker_leader") == 1
        last = value("l0gc_watermark_ticker_last_advance_timestamp_seconds")
        assert last is not None
        assert before <= last <= time.time()
        assert value("l0gc_watermark_epoch_advances_total") >= 2
    finally:
        stop.set()
        await task
    assert value("l0gc_watermark_ticker_leader") == 0
