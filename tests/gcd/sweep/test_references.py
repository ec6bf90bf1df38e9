"""The cross-check: a referenced key at or below M is kept, and GC pauses itself.

In-memory store and etcd (`MemoryKV`); the publisher's record is written as a real
publisher writes it (`Publication.references`)."""

from __future__ import annotations

import random

from gcd.observe.metrics import SweeperMetrics
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.retry import Retrier
from gcd.sweep.brake import PauseBrake
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0gc.contract.namespace import Publication
from l0gc.contract.references import References
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.memory import MemoryObjectStore

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
NOW = 2_000_000_000.0
OLD = NOW - 3600
SAFE = 41


async def watermarks_with(references: References | None) -> WatermarkStore:
    """M = SAFE from one partition, orders/0, whose record holds `references`."""
    store = WatermarkStore(MemoryKV(), "/l0gc/unit")
    await store.init_cluster_epoch(1)
    await store.register_partition("orders/0")
    record = await store.acquire_ownership("orders/0", "pub-a")
    for _ in range(49):
        await store.advance_cluster_epoch()
    await store.publish_one(
        Publication("orders/0", "pub-a", record.owner_epoch, SAFE, references=references)
    )
    return store


def sweeper(
    store: MemoryObjectStore, watermarks: WatermarkStore, metrics: SweeperMetrics
) -> Sweeper:
    async def no_sleep(_seconds: float) -> None:
        return None

    return Sweeper(
        store,
        RoundConfig(layout=LAYOUT, batch_size=10, concurrency=1, list_concurrency=1),
        metrics=metrics,
        clock=lambda: NOW,
        retrier=Retrier(Backoff(base_s=0.01, cap_s=0.1), no_sleep, random.Random(3)),
        brake=PauseBrake(watermarks, min_interval_s=0),
    )


def bucket() -> tuple[MemoryObjectStore, list[str]]:
    store = MemoryObjectStore()
    keys = [LAYOUT.format(p, e, "g") for p in range(0, 1000, 100) for e in range(30, 46)]
    for key in keys:
        store.put(key, size=1, last_modified_s=OLD)
    return store, keys


async def test_a_referenced_key_at_or_below_m_pauses_gc_before_anything_is_deleted() -> None:
    store, keys = bucket()
    live = LAYOUT.format(500, 40, "g")  # epoch 40 <= M = 41: M says garbage, a writer says live
    watermarks = await watermarks_with(References(((17, (live,)),)))
    metrics = SweeperMetrics()
    result = await run_round(sweeper(store, watermarks, metrics), SafetyGate(), watermarks)
    summary = result.summary
    assert store.keys() == set(keys)  # nothing deleted: M is wrong, so nothing M says is safe
    assert summary.reference_conflicts == 1
    assert summary.conflicting_keys == (live,)
    assert summary.outcome == "paused"
    assert summary.blocked_reason is not None
    assert "'orders/0'" in summary.blocked_reason
    assert "offset 17" in summary.blocked_reason
    assert live in summary.blocked_reason
    paused = await watermarks.get_paused()
    assert paused is not None
    assert live in paused
    assert "offset 17" in paused
    assert metrics.reference_conflicts._value.get() == 1
    assert not result.complete
    assert summary.list_requests == 0
    # the fleet is paused: the next round deletes nothing at all
    before = store.keys()
    again = await run_round(sweeper(store, watermarks, metrics), SafetyGate(), watermarks)
    assert again.summary.outcome == "paused"
    assert store.keys() == before


async def test_a_dry_run_reports_the_conflict_and_pauses_nothing() -> None:
    store, keys = bucket()
    live = LAYOUT.format(500, 40, "g")
    watermarks = await watermarks_with(References(((17, (live,)),)))
    dry = Sweeper(
        store,
        RoundConfig(layout=LAYOUT, dry_run=True),
        clock=lambda: NOW,
        brake=PauseBrake(watermarks, min_interval_s=0),
    )
    result = await run_round(dry, SafetyGate(), watermarks)
    assert result.summary.reference_conflicts == 1
    assert result.summary.outcome == "blocked"
    assert result.summary.blocked_reason is not None
    assert result.summary.blocked_reason.startswith("reference conflict:")
    assert await watermarks.get_paused() is None
    assert store.keys() == set(keys)


async def test_a_referenced_key_above_m_is_no_conflict() -> None:
    store, keys = bucket()
    young = LAYOUT.format(500, 44, "g")  # above M: kept by M alone, as it should be
    watermarks = await watermarks_with(References(((3, (young,)),)))
    metrics = SweeperMetrics()
    result = await run_round(sweeper(store, watermarks, metrics), SafetyGate(), watermarks)
    assert result.summary.reference_conflicts == 0
    assert result.summary.blocked_reason is None
    assert await watermarks.get_paused() is None
    assert store.keys() == {k for k in keys if LAYOUT.parse(k).epoch > SAFE}  # type: ignore[union-attr]


async def test_without_references_the_round_is_what_it_was() -> None:
    """A writer that sends none: the same round as before references existed."""
    store, keys = bucket()
    watermarks = await watermarks_with(None)
    metrics = SweeperMetrics()
    result = await run_round(sweeper(store, watermarks, metrics), SafetyGate(), watermarks)
    assert result.summary.reference_conflicts == 0
    assert result.summary.deleted == sum(1 for k in keys if LAYOUT.parse(k).epoch <= SAFE)  # type: ignore[union-attr]
