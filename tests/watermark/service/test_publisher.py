"""The publisher service on an in-memory etcd: adopt, fence/commit, publish, idle advance."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from l0gc.contract.namespace import PUBLISH_BATCH, Publication, PublishStatus
from l0gc.contract.record import PartitionRecord
from l0gc.errors import (
    AlreadyCommitted,
    EpochAhead,
    EtcdUnavailable,
    FenceExpired,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    PartitionNotHosted,
    PartitionNotRegistered,
    StaleEpoch,
)
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.sim.variants import NoDrainGuard
from tests.publishing import NS, HandClock, Publishing, hosting, new_publishing
from watermark.core.fencelock import Outcome
from watermark.events import ClusterEpochRead, HostedChanged, IdleAdvanced, PublishRound
from watermark.service.fence import Fence
from watermark.service.metrics import WatermarkMetrics
from watermark.service.publisher import Publisher
from watermark.service.ticker import EpochTicker


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `condition` (yielding to the loop) until it holds or the deadline passes."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0)


async def advance_to(store: WatermarkStore, epoch: int) -> None:
    """Advance the cluster epoch to `epoch`: a fence above it is refused (EpochAhead)."""
    while await store.get_cluster_epoch() < epoch:
        await store.advance_cluster_epoch()


async def stored(store: WatermarkStore, partition: str) -> PartitionRecord:
    """The record in the store (it must exist)."""
    record = await store.get_partition(partition)
    assert record is not None
    return record


async def write(publisher: Publisher, partition: str, epoch: int, offset: int) -> None:
    """Fence `epoch` and commit `offset` through the Python API."""
    async with publisher.fence(partition, epoch, timeout_s=5) as fence:
        fence.commit(offset)


async def test_adopt_restores_fresh_state_and_publishes_owner_and_window() -> None:
    """Adopting a registered partition owns it and publishes its window and tracker."""
    store, publisher = await hosting("orders/0")
    state = publisher.state("orders/0")
    assert state["owner_epoch"] == 1
    assert state["window"] == [5, 5]
    assert state["watermark"] == 4
    assert await publisher.publish_now() == {"orders/0": PublishStatus.OK}
    record = await stored(store, "orders/0")
    assert record.owner == "pub-a"
    assert record.window == (5, 5)
    assert record.tracker is not None


async def test_adopt_of_unregistered_partition_fails() -> None:
    """A partition must be registered before it can be adopted."""
    publisher = (await new_publishing()).publisher("pub-a")
    with pytest.raises(PartitionNotRegistered):
        await publisher.adopt("nope")
    assert publisher.partitions == []


async def test_commits_and_reconciled_reports_raise_the_published_watermark() -> None:
    """M(p) follows the slides the reconciler has passed, and the publish stores it."""
    store, publisher = await hosting("p0")
    await advance_to(store, 7)
    await write(publisher, "p0", 5, 0)
    await write(publisher, "p0", 6, 1)
    await write(publisher, "p0", 7, 2)
    publisher.reconciled("p0", 1)
    assert publisher.state("p0")["watermark"] == 4
    publisher.reconciled("p0", 2)
    assert publisher.state("p0")["watermark"] == 5
    await publisher.publish_now()
    record = await stored(store, "p0")
    assert record.watermark == 5
    assert record.window == (6, 7)


async def test_new_owner_recovers_the_window_and_the_old_owner_stops_publishing() -> None:
    """After takeover the window is [max_applied] above M(p); the stale owner drops it."""
    metrics = WatermarkMetrics()
    store, old = await hosting("p0", metrics=metrics)
    await advance_to(store, 8)
    for offset, epoch in enumerate((5, 6, 7)):
        await write(old, "p0", epoch, offset)
    old.reconciled("p0", 2)
    await old.publish_now()

    new = Publishing(store).publisher("pub-b")
    state = await new.adopt("p0")
    assert state["owner_epoch"] == 2
    assert state["window"] == [7, 7]
    for epoch in (5, 6):
        with pytest.raises(StaleEpoch):
            await new.acquire("p0", epoch, 5)
    await write(new, "p0", 7, 3)

    await write(old, "p0", 8, 3)  # the old owner does not know yet
    assert await old.publish_now() == {"p0": PublishStatus.STALE_OWNER}
    assert old.partitions == []
    assert metrics.publishes.labels(outcome="stale_owner")._value.get() == 1
    with pytest.raises(PartitionNotHosted):
        await old.acquire("p0", 8, 5)
    assert (await stored(store, "p0")).owner == "pub-b"


async def test_adopting_back_a_partition_that_moved_away_reacquires_it() -> None:
    """A -> B -> A: A's second adopt re-reads the record and re-acquires; its stale
    window (below what B published) can no longer admit an epoch at or below M(p)."""
    store, a = await hosting("p0")
    await advance_to(store, 8)
    b = await Publishing(store).adopting("pub-b", "p0")
    await write(b, "p0", 5, 0)
    await write(b, "p0", 6, 1)
    await write(b, "p0", 7, 2)
    b.reconciled("p0", 2)
    assert await b.publish_now() == {"p0": PublishStatus.OK}
    assert (await stored(store, "p0")).watermark == 5

    state = await a.adopt("p0")  # A still hosts its copy from owner_epoch 1, window [5, 5]
    assert state["owner_epoch"] == 3
    assert state["watermark"] == 5
    record = await stored(store, "p0")
    assert (record.owner, record.owner_epoch) == ("pub-a", 3)
    for epoch in (5, 6):  # 5 is M(p): a sweeper may already be deleting it
        with pytest.raises(StaleEpoch):
            await a.acquire("p0", epoch, 5)
    await write(a, "p0", 7, 3)
    assert await a.publish_now() == {"p0": PublishStatus.OK}
    await write(b, "p0", 8, 3)  # B does not know yet
    assert await b.publish_now() == {"p0": PublishStatus.STALE_OWNER}


async def test_adopting_a_partition_still_owned_here_keeps_its_state() -> None:
    """A second adopt of a partition this publisher still owns bumps nothing and keeps
    fences and applied offsets (a writer re-sending its adopt loses no work)."""
    _, a = await hosting("p0")
    token = await a.acquire("p0", 5, 5)
    state = await a.adopt("p0", log_end_offset=-1)
    assert state["owner_epoch"] == 1
    assert a.is_held(token)
    a.commit(token, 0)
    assert a.state("p0")["last_applied_offset"] == 0


async def test_refused_lower_is_counted_and_never_written() -> None:
    """A publish that would lower M(p) is refused, counted, and the stored M(p) stays."""
    metrics = WatermarkMetrics()
    store, publisher = await hosting("p0", metrics=metrics)
    state = publisher.state("p0")
    await store.publish_one(Publication("p0", "pub-a", state["owner_epoch"], watermark=40))
    await advance_to(store, 41)
    await write(publisher, "p0", 41, 0)
    assert await publisher.publish_now() == {"p0": PublishStatus.REFUSED_LOWER}
    assert (await stored(store, "p0")).watermark == 40
    assert metrics.publishes.labels(outcome="refused_lower")._value.get() == 1
    assert publisher.partitions == ["p0"]


async def test_deregistered_partition_is_dropped_on_publish() -> None:
    """A partition whose key was deleted is no longer hosted after the next publish."""
    store, publisher = await hosting("p0")
    await store.deregister_partition("p0")
    assert await publisher.publish_now() == {"p0": PublishStatus.MISSING}
    assert publisher.partitions == []


async def test_commit_offsets_must_increase_and_a_refused_commit_releases_the_fence() -> None:
    """An offset that does not increase is refused for good: the fence is released at
    once (outcome REFUSED), so it blocks no slide, and it cannot commit afterwards."""
    _, publisher = await hosting("p0")
    await write(publisher, "p0", 5, 10)
    token = await publisher.acquire("p0", 5, 5)
    with pytest.raises(IllegalTransition):
        publisher.commit(token, 10)
    assert publisher.state("p0")["inflight_fences"] == 0
    assert token.outcome is Outcome.REFUSED
    assert not publisher.abort(token)
    with pytest.raises(FenceExpired, match="refused"):
        publisher.commit(token, 11)
    assert publisher.state("p0")["last_applied_offset"] == 10


async def test_a_repeated_commit_is_recognised_and_another_offset_refused() -> None:
    """Committing the same fence at the same offset again returns True (a repeat) and
    changes nothing; at another offset it raises AlreadyCommitted."""
    _, publisher = await hosting("p0")
    token = await publisher.acquire("p0", 5, 5)
    assert publisher.commit(token, 3) is False
    assert publisher.commit(token, 3) is True
    with pytest.raises(AlreadyCommitted, match="already committed at offset 3"):
        publisher.commit(token, 4)
    assert publisher.state("p0")["last_applied_offset"] == 3


async def test_fence_block_aborts_on_error_and_refused_fences_hold_nothing() -> None:
    """`async with publisher.fence`: released if the block raises, nothing held if refused."""
    _, publisher = await hosting("p0")
    held: list[Fence] = []

    async def failing_write() -> None:
        async with publisher.fence("p0", 5, timeout_s=5) as fence:
            assert publisher.is_held(fence.token)
            held.append(fence)
            raise RuntimeError("upload failed")

    with pytest.raises(RuntimeError):
        await failing_write()
    assert not publisher.is_held(held[0].token)
    assert publisher.state("p0")["inflight_fences"] == 0
    with pytest.raises(StaleEpoch):
        async with publisher.fence("p0", 4, timeout_s=5):
            pytest.fail("a stale epoch must not enter the block")
    with pytest.raises(PartitionNotHosted):
        async with publisher.fence("nope", 5, timeout_s=5):
            pytest.fail("an unhosted partition must not enter the block")
    await write(publisher, "p0", 5, 0)  # committed inside: the exit has nothing to abort
    assert publisher.state("p0")["last_applied_offset"] == 0
    assert publisher.state("p0")["inflight_fences"] == 0


async def test_a_fence_above_the_cluster_epoch_is_refused_and_wedges_nothing() -> None:
    """An epoch above the cluster epoch is EpochAhead and leaves the window as it was; the
    real writer's next fence and commit at the cluster epoch still work."""
    _, publisher = await hosting("p0")
    with pytest.raises(EpochAhead) as refused:
        await publisher.acquire("p0", 10**17, 5)
    assert (refused.value.epoch, refused.value.cluster_epoch) == (10**17, 5)
    with pytest.raises(EpochAhead):
        async with publisher.fence("p0", 6, timeout_s=5):
            pytest.fail("a fence above the cluster epoch must not enter the block")
    state = publisher.state("p0")
    assert (state["window"], state["inflight_fences"]) == ([5, 5], 0)
    await write(publisher, "p0", 5, 0)
    assert publisher.state("p0")["last_applied_offset"] == 0


async def test_a_fence_at_a_new_epoch_rereads_the_cluster_epoch() -> None:
    """A writer that saw the ticker advance before the publisher did is not refused: the
    publisher re-reads the epoch once; if etcd cannot answer, the fence fails closed."""
    kv = MemoryKV()
    world = await new_publishing(kv, registered=("p0",))
    store = world.store
    publisher = await world.adopting("pub-a", "p0")
    assert await publisher.read_cluster_epoch() == 5
    await store.advance_cluster_epoch()
    await write(publisher, "p0", 6, 0)
    assert publisher.cluster_epoch == 6
    await store.advance_cluster_epoch()
    kv.unavailable = True
    with pytest.raises(EtcdUnavailable):
        await publisher.acquire("p0", 7, 5)
    await write(publisher, "p0", 6, 1)  # at or below the known epoch: no etcd read
    kv.unavailable = False
    await write(publisher, "p0", 7, 2)
    assert publisher.state("p0")["window"] == [6, 7]


async def test_concurrent_fences_above_the_known_epoch_share_one_read() -> None:
    """Fences that arrive together above the cached epoch cost one etcd read, not one each."""
    store, publisher = await hosting("p0")
    await store.advance_cluster_epoch()
    reads = 0
    read = store.get_cluster_epoch

    async def counted() -> int:
        nonlocal reads
        reads += 1
        return await read()

    store.get_cluster_epoch = counted  # type: ignore[method-assign]
    tokens = await asyncio.gather(*(publisher.acquire("p0", 6, 5) for _ in range(20)))
    assert reads == 1
    for token in tokens:
        assert publisher.abort(token)


async def test_reclaimed_fence_cannot_commit() -> None:
    """A fence reclaimed for a slide after its deadline refuses the commit; state unchanged."""
    clock = HandClock(0.0)
    store, publisher = await hosting("p0", clock=clock, hold_ttl_s=10)
    await advance_to(store, 6)
    stuck = await publisher.acquire("p0", 5, 5)
    slide = asyncio.create_task(publisher.acquire("p0", 6, 5))
    await until(lambda: publisher.state("p0")["waiting_slides"] == 1)
    clock.now = 11
    assert publisher.reclaim_expired() == 1
    publisher.commit(await slide, 0)
    with pytest.raises(FenceExpired):
        publisher.commit(stuck, 1)
    assert publisher.state("p0")["last_applied_offset"] == 0


async def test_a_fence_abandoned_on_an_idle_partition_ends_at_its_hold_deadline() -> None:
    """Issue 51 (4): a writer fences and crashes; nothing else writes to the partition.
    Before, M(p) stayed pinned for good (expired fences were reclaimed only for a waiting
    slide, and an idle advance needs no fence in flight) and a commit 90 s late was
    accepted. Now the round after the hold deadline reclaims it, the partition advances
    with the epoch, and the late commit is refused."""
    clock = HandClock(0.0)
    store, publisher = await hosting("p0", clock=clock, hold_ttl_s=30)
    await write(publisher, "p0", 5, 0)
    publisher.reconciled("p0", 0)
    abandoned = await publisher.acquire("p0", 5, 5)
    for _ in range(3):
        await store.advance_cluster_epoch()
    clock.now = 29.9
    await publisher.run_once()
    assert publisher.state("p0")["inflight_fences"] == 1
    assert (await stored(store, "p0")).watermark == 4  # pinned below the fence
    clock.now = 30.0
    await publisher.run_once()
    assert publisher.state("p0")["inflight_fences"] == 0
    assert publisher.state("p0")["window"] == [5, 8]  # slid with the epoch: idle again
    await store.advance_cluster_epoch()
    await publisher.run_once()
    assert publisher.state("p0")["window"] == [8, 9]
    assert publisher.state("p0")["watermark"] == 7  # no longer pinned at 4
    assert (await stored(store, "p0")).watermark == 7
    clock.now = 90.0
    with pytest.raises(FenceExpired):
        publisher.commit(abandoned, 1)
    assert publisher.state("p0")["last_applied_offset"] == 0


async def test_idle_reconciled_partition_advances_and_stops_pinning_m() -> None:
    """An idle, reconciled partition is advanced with the epoch; it uses no log offset."""
    store, publisher = await hosting("p0")
    await write(publisher, "p0", 5, 0)
    publisher.reconciled("p0", 0)
    assert await publisher.advance_idle() == 0  # applied epoch 5 == cluster epoch
    await store.advance_cluster_epoch()
    assert await publisher.advance_idle() == 1
    state = publisher.state("p0")
    assert state["window"] == [5, 6]
    assert state["watermark"] == 4
    assert (state["last_applied_offset"], state["reconciled_offset"]) == (0, 0)
    await store.advance_cluster_epoch()
    assert await publisher.advance_idle() == 1
    assert publisher.state("p0")["watermark"] == 5
    await publisher.publish_now()
    assert (await stored(store, "p0")).watermark == 5
    assert (await store.read_safe_epoch()).safe_epoch == 5
    await write(publisher, "p0", 7, 1)  # the writer's next offset follows directly
    assert publisher.state("p0")["last_applied_offset"] == 1


async def test_a_held_fence_below_a_skipped_epoch_stays_protected() -> None:
    """The fence goes [5] -> [5, 7] (6 skipped); 6 and 7 are committed and reconciled
    while a writer still holds its fence at 5: M(p) must stay below 5 until it commits."""
    store, publisher = await hosting("p0")
    await advance_to(store, 7)
    jump = await publisher.acquire("p0", 7)  # nothing in flight: the window slides
    assert jump.window == (5, 7)
    slow = await publisher.acquire("p0", 5)  # INSIDE [5, 7]
    between = await publisher.acquire("p0", 6)
    publisher.commit(between, 0)
    publisher.commit(jump, 1)
    publisher.reconciled("p0", 1)
    assert publisher.state("p0")["watermark"] == 4
    await publisher.publish_now()
    assert (await stored(store, "p0")).watermark == 4
    publisher.commit(slow, 2)  # no FencingViolation: its object was never exposed
    publisher.reconciled("p0", 2)
    assert publisher.state("p0")["applied_window"] == [5, 7]


async def test_a_new_owner_waits_for_the_reconciler_past_the_log_end() -> None:
    """The old owner applied entries it never published and died; the new owner adopts
    with the log's end offset and advances nothing until the reconciler passes it."""
    store, old = await hosting("p0")
    await write(old, "p0", 5, 0)
    old.reconciled("p0", 0)
    await old.publish_now()  # the record holds offset 0 only
    await store.advance_cluster_epoch()
    await write(old, "p0", 6, 1)  # applied, never published: old dies here
    await store.advance_cluster_epoch()

    new = Publishing(store).publisher("pub-b")
    state = await new.adopt("p0", log_end_offset=1)
    assert (state["last_applied_offset"], state["log_end_known"]) == (1, True)
    assert await new.advance_idle() == 0  # offset 1 (epoch 6) is not reconciled
    new.reconciled("p0", 1)
    assert await new.advance_idle() == 1  # the fence goes [5] -> [5, 7]: 5 still admitted
    assert new.state("p0")["watermark"] == 4
    await store.advance_cluster_epoch()
    assert await new.advance_idle() == 1  # [7, 8]
    assert new.state("p0")["watermark"] == 6


async def test_without_a_log_end_a_new_owner_waits_for_its_first_commit() -> None:
    """Adopted with the log end unknown: no idle advance until a commit or a log end."""
    store, old = await hosting("p0")
    await write(old, "p0", 5, 0)
    old.reconciled("p0", 0)
    await old.publish_now()
    await store.advance_cluster_epoch()

    new = Publishing(store).publisher("pub-b")
    assert (await new.adopt("p0"))["log_end_known"] is False
    assert await new.advance_idle() == 0
    await write(new, "p0", 5, 3)
    new.reconciled("p0", 3)
    assert new.state("p0")["log_end_known"] is True
    assert await new.advance_idle() == 1

    other = Publishing(store).publisher("pub-c")
    await other.adopt("p0")
    state = await other.adopt("p0", log_end_offset=3)  # hosted already: learns the log end
    assert state["log_end_known"] is True
    with pytest.raises(IllegalTransition, match="log end offset 2"):
        await other.adopt("p0", log_end_offset=2)


async def test_idle_advance_skips_partitions_with_work_pending() -> None:
    """Unreconciled entries, fences in flight or a window already at the epoch: no advance."""
    store, publisher = await hosting("unreconciled", "inflight", "fenced")
    await write(publisher, "unreconciled", 5, 0)
    held = await publisher.acquire("inflight", 5, 5)
    await store.advance_cluster_epoch()
    aborted = await publisher.acquire("fenced", 6, 5)  # fenced epoch 6, then gave up
    publisher.abort(aborted)
    assert await publisher.advance_idle() == 0
    assert publisher.state("inflight")["last_applied_offset"] is None
    assert publisher.state("fenced")["last_applied_offset"] is None
    publisher.commit(held, 0)


async def test_run_publishes_on_shutdown_and_aborts_fence_waiters() -> None:
    """run() publishes at start and after stop; waiters get GuardClosed, holders may commit."""
    store, publisher = await hosting("p0", publish_interval_s=3600, idle_advance=False)
    await advance_to(store, 6)
    stop = asyncio.Event()
    runner = asyncio.create_task(publisher.run(stop))
    await until(lambda: publisher.published_once)
    holder = await publisher.acquire("p0", 5, 5)
    waiter = asyncio.create_task(publisher.acquire("p0", 6, None))
    await until(lambda: publisher.state("p0")["waiting_slides"] == 1)
    stop.set()
    with pytest.raises(GuardClosed):
        await waiter
    publisher.commit(holder, 0)
    publisher.reconciled("p0", 0)
    await runner
    tracker = (await stored(store, "p0")).tracker
    assert tracker is not None
    assert tracker["reconciled_offset"] == 0


async def test_release_publishes_and_stops_hosting() -> None:
    """release() publishes the final state and forgets the partition."""
    store, publisher = await hosting("p0")
    await write(publisher, "p0", 5, 0)
    await publisher.release("p0")
    assert publisher.partitions == []
    tracker = (await stored(store, "p0")).tracker
    assert tracker is not None
    assert tracker["last_applied_offset"] == 0


async def test_many_partitions_publish_in_batches() -> None:
    """More partitions than one transaction holds are all published."""
    names = [f"t/{i}" for i in range(PUBLISH_BATCH + 20)]
    _, publisher = await hosting(*names)
    results = await publisher.publish_now()
    assert set(results.values()) == {PublishStatus.OK}
    assert len(results) == len(names)
    assert publisher.metrics.partitions_owned._value.get() == len(names)
    assert publisher.metrics.min_watermark._value.get() == 4


class CountingKV(MemoryKV):
    """MemoryKV that counts calls by kind and can fail the next transaction."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {"get": 0, "range": 0, "txn": 0}
        self.fail_txn_at: int | None = None

    def reset(self) -> None:
        """Forget the counts so far."""
        self.calls = dict.fromkeys(self.calls, 0)

    async def get(self, key: str) -> Any:
        self.calls["get"] += 1
        return await super().get(key)

    async def range_prefix(self, prefix: str) -> Any:
        self.calls["range"] += 1
        return await super().range_prefix(prefix)

    async def txn(self, compares: Any, ops: Any) -> Any:
        self.calls["txn"] += 1
        if self.fail_txn_at == self.calls["txn"]:
            self.fail_txn_at = None
            raise EtcdUnavailable("memory", "injected failure")
        return await super().txn(compares, ops)


async def counting_publisher(count: int) -> tuple[CountingKV, WatermarkStore, Publisher]:
    """`count` partitions registered and adopted on a CountingKV, call counts reset."""
    kv = CountingKV()
    names = [f"t/{index:04d}" for index in range(count)]
    world = await new_publishing(kv, registered=names)
    publisher = await world.adopting("pub-a", *names)
    kv.reset()
    return kv, world.store, publisher


async def test_publish_now_reads_once_and_writes_full_transactions() -> None:
    """Many dirty partitions: one registry read, then transactions of PUBLISH_BATCH records."""
    count = 6 * PUBLISH_BATCH + 7  # above the store's range-read threshold (512)
    kv, _, publisher = await counting_publisher(count)
    results = await publisher.publish_now()
    assert len(results) == count
    assert set(results.values()) == {PublishStatus.OK}
    assert kv.calls == {"get": 0, "range": 1, "txn": 7}
    assert all(not publisher.state(name)["dirty"] for name in publisher.partitions)


async def test_failed_publish_keeps_every_partition_dirty_for_the_next_round() -> None:
    """A store failure mid-publish counts errors, keeps all dirty; the next round lands all."""
    count = 3 * PUBLISH_BATCH
    kv, store, publisher = await counting_publisher(count)
    await write(publisher, "t/0299", 5, 0)
    kv.fail_txn_at = 2  # the first transaction lands, the second fails
    assert await publisher.publish_now() == {}
    assert publisher.metrics.publishes.labels(outcome="error")._value.get() == count
    assert all(publisher.state(name)["dirty"] for name in publisher.partitions)
    assert (await stored(store, "t/0299")).tracker is None  # the failed txn wrote nothing
    results = await publisher.publish_now()
    assert set(results.values()) == {PublishStatus.OK}
    assert len(results) == count
    assert (await stored(store, "t/0299")).tracker is not None
    assert not publisher.state("t/0299")["dirty"]


async def test_ticker_hook_counts_advances_and_leadership() -> None:
    """The ticker, given the metrics' hook, reports its leadership and each epoch it advanced."""
    kv = MemoryKV()
    store = WatermarkStore(kv, NS)
    await store.init_cluster_epoch(5)
    metrics = WatermarkMetrics()
    ticker = EpochTicker(store, kv, 1.0, "pub-a", 10, hook=metrics.hook)
    assert await ticker.tick_once()
    assert await store.get_cluster_epoch() == 6
    assert metrics.epoch_advances._value.get() == 1
    assert metrics.ticker_leader._value.get() == 1


async def test_a_fencing_violation_freezes_the_partition() -> None:
    """A guard that slides past a held fence (a broken one) lets a commit fall below the
    window: the commit raises, the partition's M(p) is published no more, it gets no idle
    advance, the metric counts it and state() says why."""
    metrics = WatermarkMetrics()
    store, publisher = await hosting("p0", "p1", guard_class=NoDrainGuard, metrics=metrics)
    await advance_to(store, 7)
    held = await publisher.acquire("p0", 5)
    await write(publisher, "p0", 6, 0)  # slides to [5, 6] without waiting for `held`
    await write(publisher, "p0", 7, 1)  # [6, 7]: 5 is below the window now
    await write(publisher, "p1", 5, 0)
    with pytest.raises(FencingViolation) as caught:
        publisher.commit(held, 2)
    assert caught.value.epoch == 5
    state = publisher.state("p0")
    assert state["frozen"] == str(caught.value)
    assert metrics.fencing_violations._value.get() == 1
    assert await publisher.publish_now() == {"p1": PublishStatus.OK}
    await store.advance_cluster_epoch()
    publisher.reconciled("p0", 1)
    publisher.reconciled("p1", 0)
    assert await publisher.advance_idle() == 1  # p1 only
    assert (await stored(store, "p0")).tracker is None  # never published


async def test_a_clean_stop_seals_the_log_for_the_next_owner() -> None:
    """After shutdown with every fence finished, the next owner knows the log end without
    being told and advances the idle partition; after a crash it does not."""
    store, old = await hosting("p0", "p1")
    assert old.state("p0")["log_end_known"]  # the first owner: the log is empty
    await write(old, "p0", 5, 0)
    await write(old, "p1", 5, 0)
    old.reconciled("p0", 0)
    old.reconciled("p1", 0)
    await old.publish_now()
    await write(old, "p1", 5, 1)  # p1 changes after the last publish...
    old.reconciled("p1", 1)
    await old.shutdown()  # ...and the clean stop publishes it, sealed
    assert (await stored(store, "p0")).sealed_owner_epoch == 1
    await store.advance_cluster_epoch()

    new = Publishing(store).publisher("pub-b")
    assert (await new.adopt("p0"))["log_end_known"] is True
    assert (await new.adopt("p1"))["last_applied_offset"] == 1
    assert await new.advance_idle() == 2

    crashed_store, crashed = await hosting("p0")
    await write(crashed, "p0", 5, 0)
    await crashed.publish_now()  # then the process dies: no shutdown
    successor = Publishing(crashed_store).publisher("pub-b")
    assert (await successor.adopt("p0"))["log_end_known"] is False


async def test_a_fence_revoked_at_shutdown_leaves_the_log_unsealed() -> None:
    """A writer still holding a fence when the drain times out may have appended its
    entry: the final publish is not sealed, so the next owner must learn the log end."""
    store, publisher = await hosting("p0", drain_timeout_s=0.0)
    held = await publisher.acquire("p0", 5)
    await publisher.shutdown()
    assert not publisher.is_held(held)
    record = await stored(store, "p0")
    assert record.sealed_owner_epoch is None
    assert record.tracker is not None


async def test_try_acquire_never_decides_an_epoch_above_the_known_cluster_epoch() -> None:
    """The fast path grants inside the window only up to the cluster epoch it knows; an
    epoch above it is left to acquire (which re-reads etcd); unhosted raises."""
    store, publisher = await hosting("p0")
    await publisher.read_cluster_epoch()
    token = publisher.try_acquire("p0", 5)
    assert token is not None
    assert publisher.is_held(token)
    assert publisher.try_acquire("p0", 6) is None
    with pytest.raises(PartitionNotHosted):
        publisher.try_acquire("nope", 5)
    assert await store.get_cluster_epoch() == 5


async def test_a_round_is_reported_to_the_hook_only() -> None:
    """A round's instrumentation is events (one hook), and the metrics hook turns them
    into the gauges: the publisher sets no metric itself."""
    seen: list[object] = []
    metrics = WatermarkMetrics()
    store, publisher = await hosting("p0", metrics=metrics, hook=(seen.append, metrics.hook))
    await write(publisher, "p0", 5, 0)
    publisher.reconciled("p0", 0)
    await store.advance_cluster_epoch()
    await publisher.run_once()
    assert ClusterEpochRead(6) in seen
    assert IdleAdvanced("p0", 6, 4) in seen
    rounds = [event for event in seen if isinstance(event, PublishRound)]
    assert [(r.partitions, r.ok) for r in rounds] == [(1, 1)]
    assert HostedChanged(1, 4) in seen
    assert metrics.cluster_epoch._value.get() == 6
    assert metrics.min_watermark._value.get() == 4
    assert metrics.partitions_owned._value.get() == 1
    assert metrics.idle_advances._value.get() == 1


async def test_a_publisher_without_a_hook_reports_nothing_and_still_publishes() -> None:
    """hook=None: no metrics move, no instrumentation runs, the round works the same."""
    metrics = WatermarkMetrics()
    store, publisher = await hosting("p0", metrics=metrics, hook=None)
    await write(publisher, "p0", 5, 0)
    publisher.reconciled("p0", 0)
    assert (await publisher.publish_now())["p0"] is PublishStatus.OK
    assert (await stored(store, "p0")).watermark == 4
    assert metrics.partitions_owned._value.get() == 0
