"""What a hosted partition's owner says it waits on (issue 55): the record's `waiting`,
kept since the reason began, refreshed while it lasts, and the publisher's log-end
metric; on the real `Publisher` and `WatermarkStore` over `MemoryKV`."""

from __future__ import annotations

from l0gc.etcd.store import WatermarkStore
from tests.publishing import HandClock, new_publishing
from watermark.service.hosted import WAITING_REFRESH_S
from watermark.service.metrics import WatermarkMetrics
from watermark.service.publisher import Publisher


async def crashed_owner() -> tuple[WatermarkStore, Publisher, HandClock, WatermarkMetrics]:
    """Partition p committed at offset 0 by owner a, which crashed before publishing; its
    successor (same id) adopted it without the log end; the cluster epoch is 4."""
    clock = HandClock(1_800_000_000.0)
    world = await new_publishing(
        namespace="/ns", epoch=1, registered=("p",), clock=clock, wall_clock=True
    )
    first = world.publisher("a", hook=None)
    await first.read_cluster_epoch()
    await first.adopt("p")
    first.commit(await first.acquire("p", 1), 0)
    metrics = WatermarkMetrics()
    second = await world.adopting("a", "p", metrics=metrics)
    for _ in range(3):
        await world.store.advance_cluster_epoch()
    return world.store, second, clock, metrics


async def test_the_record_says_it_waits_for_the_log_end_since_the_first_round() -> None:
    store, publisher, clock, metrics = await crashed_owner()
    await publisher.run_once()
    record = await store.get_partition("p")
    assert record is not None
    assert record.waiting == {"on": "log_end", "since": clock.now}
    began = clock.now
    clock.now += 100.0
    await publisher.run_once()  # past the refresh interval: written again, same since
    record = await store.get_partition("p")
    assert record is not None
    assert record.updated_at == clock.now
    assert record.waiting == {"on": "log_end", "since": began}
    assert metrics.log_end_unknown._value.get() == 1
    assert metrics.log_end_unknown_for._value.get() == 100.0


async def test_a_waiting_record_is_refreshed_only_every_30_s() -> None:
    store, publisher, clock, _ = await crashed_owner()
    await publisher.run_once()
    written = (await store.get_partition("p")).updated_at  # type: ignore[union-attr]
    clock.now += WAITING_REFRESH_S - 1
    await publisher.run_once()
    assert (await store.get_partition("p")).updated_at == written  # type: ignore[union-attr]
    clock.now += 1
    await publisher.run_once()
    assert (await store.get_partition("p")).updated_at == clock.now  # type: ignore[union-attr]


async def test_the_reconciler_behind_then_nothing_once_it_catches_up() -> None:
    store, publisher, clock, metrics = await crashed_owner()
    publisher.reconciled("p", 0)  # answered log_end_wanted
    publisher.reconciled("p", 0, log_end_offset=1)  # an entry at offset 1 it never saw
    await publisher.run_once()
    record = await store.get_partition("p")
    assert record is not None
    assert record.waiting == {
        "on": "reconciler",
        "committed_offset": 1,
        "reconciled_offset": 0,
        "since": clock.now,
    }
    assert metrics.log_end_unknown._value.get() == 0
    publisher.reconciled("p", 1)
    await publisher.run_once()  # idle advance to 4: the old epoch is still admitted
    await store.advance_cluster_epoch()
    await publisher.run_once()
    record = await store.get_partition("p")
    assert record is not None
    assert (record.watermark, record.waiting) == (3, None)


async def test_fences_in_flight_are_named_and_a_partition_at_the_epoch_waits_on_nothing() -> None:
    store, publisher, _, _ = await crashed_owner()
    publisher.reconciled("p", 0)
    publisher.reconciled("p", 0, log_end_offset=0)
    token = await publisher.acquire("p", 1)
    await publisher.run_once()
    record = await store.get_partition("p")
    assert record is not None
    assert record.waiting is not None
    assert (record.waiting["on"], record.waiting["fences"]) == ("fences", 1)
    publisher.abort(token)
    hosted = publisher._hosted["p"]
    eligible = hosted.state.gc_eligible_epoch
    assert hosted.waiting(eligible + 1) is None  # M(p) = cluster epoch - 1: nothing to wait on
    assert hosted.waiting(None) is None  # the cluster epoch not read yet
