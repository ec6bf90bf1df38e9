"""An owner learns what operators wrote to its records (`watermark.service.records`):
a raised M(p) raises its fencing floor and takes back fences at or below it; a
deregistered or revoked partition is dropped at the next round. Red-team round 4,
findings 1 and 3: before, the owner kept admitting epoch E-1 after `repair --watermark
E-1` (its publishes refused as lower, forever), and kept granting fences and
acknowledging commits after `deregister`."""

from __future__ import annotations

import dataclasses

import pytest

from l0gc.contract.kv import Delete, Put
from l0gc.contract.namespace import PublishStatus
from l0gc.errors import FenceExpired, PartitionNotHosted, StaleEpoch
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from tests.publishing import new_publishing
from watermark.service.publisher import Publisher

E = 10


async def owner_at_window_edge() -> tuple[MemoryKV, WatermarkStore, Publisher]:
    """Partition "p" registered at epoch E-2, hosted with the window [E-1, E]."""
    kv = MemoryKV()
    world = await new_publishing(
        kv, namespace="/l0gc/t", epoch=E - 2, registered=("p",), advanced=2
    )
    store = world.store
    publisher = await world.adopting("owner-a", "p")
    for epoch, offset in ((E - 1, 0), (E, 1)):
        async with publisher.fence("p", epoch) as fence:
            fence.commit(offset)
    assert publisher.state("p")["window"] == [E - 1, E]
    return kv, store, publisher


async def raise_stored(kv: MemoryKV, store: WatermarkStore, watermark: int) -> None:
    """Write M(p) = `watermark` as an operator's repair does (owner unchanged)."""
    record = await store.get_partition("p")
    assert record is not None
    raised = dataclasses.replace(record, watermark=watermark)
    await kv.txn([], [Put(store.partition_key("p"), raised.encode())])


async def test_a_raised_watermark_raises_the_floor_at_the_next_round() -> None:
    """After M(p) is raised to E-1 under the owner, its next round refuses fences at E-1
    and takes back the one held there (its commit fails); E is still admitted."""
    kv, store, publisher = await owner_at_window_edge()
    held = await publisher.acquire("p", E - 1, 1.0)
    await raise_stored(kv, store, E - 1)
    await publisher.run_once()
    with pytest.raises(StaleEpoch):
        await publisher.acquire("p", E - 1, 1.0)
    with pytest.raises(FenceExpired):
        publisher.commit(held, 2)
    assert publisher.state("p")["published_watermark"] == E - 1
    async with publisher.fence("p", E) as fence:
        fence.commit(2)
    record = await store.get_partition("p")
    assert record is not None
    assert record.watermark == E - 1


async def test_a_refused_lower_publish_raises_the_floor_and_stops_repeating() -> None:
    """The publish path learns it too: the refused publish raises the floor, and the
    next publish carries the stored M(p) instead of being refused again."""
    kv, store, publisher = await owner_at_window_edge()
    await raise_stored(kv, store, E - 1)
    hosted = publisher._hosted["p"]
    hosted.dirty = True
    assert await publisher.publish_now() == {"p": PublishStatus.REFUSED_LOWER}
    with pytest.raises(StaleEpoch):
        await publisher.acquire("p", E - 1, 1.0)
    hosted.dirty = True
    assert await publisher.publish_now() == {"p": PublishStatus.OK}


async def test_a_deregistered_partition_is_dropped_at_the_next_round() -> None:
    """A record deleted under its owner: no fence is granted after the next round."""
    kv, store, publisher = await owner_at_window_edge()
    held = await publisher.acquire("p", E, 1.0)
    await kv.txn([], [Delete(store.partition_key("p"))])
    await publisher.run_once()
    assert publisher.partitions == []
    with pytest.raises(PartitionNotHosted):
        await publisher.acquire("p", E, 1.0)
    with pytest.raises((FenceExpired, PartitionNotHosted)):
        publisher.commit(held, 2)


async def test_a_revoked_owner_drops_the_partition_even_without_a_watch() -> None:
    """owner_epoch bumped by someone else: dropped. The first check reads the records
    whole (here after the watch was lost), so nothing is missed before the watch."""
    kv, store, publisher = await owner_at_window_edge()
    await publisher.run_once()  # the watch is open now
    kv.unavailable = True
    await publisher.run_once()  # the watch is lost; the round goes on
    kv.unavailable = False
    record = await store.get_partition("p")
    assert record is not None
    revoked = dataclasses.replace(record, owner=None, owner_epoch=record.owner_epoch + 1)
    await kv.txn([], [Put(store.partition_key("p"), revoked.encode())])
    await publisher.run_once()
    assert publisher.partitions == []


async def test_own_publishes_cost_no_reads() -> None:
    """Rounds that see only the owner's own publishes re-read nothing."""
    _, store, publisher = await owner_at_window_edge()
    await publisher.run_once()
    reads: list[object] = []
    original = store.read_partitions

    async def counting(partitions: list[str]) -> object:
        reads.append(partitions)
        return await original(partitions)

    store.read_partitions = counting  # type: ignore[method-assign, assignment]
    for offset in (2, 3):
        async with publisher.fence("p", E) as fence:
            fence.commit(offset)
        await publisher.run_once()
    assert reads == []
