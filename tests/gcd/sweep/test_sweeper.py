"""One sweeper round on the in-memory store, with M from a MemoryKV-backed WatermarkStore."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.observe.metrics import SweeperMetrics
from gcd.observe.report import PlanWriter, RoundCounts, RoundResult
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.decision import Verdict, decide
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import DeleteResult, ListPage
from gcd.storage.retry import Retrier
from gcd.sweep.brake import PauseBrake
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round, split_prefixes
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.errors import ConfigError
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.memory import MemoryObjectStore

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
NOW = 2_000_000_000.0
OLD = NOW - 3600
SAFE = 41
CLUSTER = 50


async def make_watermarks(
    cluster_epoch: int = CLUSTER, watermark: int | None = SAFE
) -> WatermarkStore:
    """A WatermarkStore whose global M is `watermark` (one partition) at `cluster_epoch`."""
    store = WatermarkStore(MemoryKV(), "/l0gc/unit")
    await store.init_cluster_epoch(1)
    if watermark is not None:
        await store.register_partition("orders/0")
        record = await store.acquire_ownership("orders/0", "pub-a")
        for _ in range(cluster_epoch - 1):
            await store.advance_cluster_epoch()
        await store.publish_one(Publication("orders/0", "pub-a", record.owner_epoch, watermark))
    else:
        for _ in range(cluster_epoch - 1):
            await store.advance_cluster_epoch()
    return store


def fast_retrier() -> Retrier:
    async def no_sleep(_seconds: float) -> None:
        return None

    return Retrier(Backoff(base_s=0.01, cap_s=0.1, max_attempts=8), no_sleep, random.Random(3))


def sweeper_for(store: MemoryObjectStore, **config: object) -> Sweeper:
    options: dict[str, object] = {"layout": LAYOUT, "grace_s": 600.0}
    options.update(config)
    plan = options.pop("plan", None)
    return Sweeper(
        store,
        RoundConfig(**options),  # type: ignore[arg-type]
        retrier=fast_retrier(),
        clock=lambda: NOW,
        plan=plan,  # type: ignore[arg-type]
    )


def mixed_bucket() -> tuple[MemoryObjectStore, set[str]]:
    """Epochs below/at/above M, young objects, unparsable keys, other roots and layouts."""
    store = MemoryObjectStore()
    expected: set[str] = set()
    for prefix in (0, 7, 417, 999):
        for epoch in (1, 40, SAFE):
            key = LAYOUT.format(prefix, epoch, f"obj-{epoch}")
            store.put(key, size=10, last_modified_s=OLD)
            expected.add(key)
        for epoch in (SAFE + 1, 100):
            store.put(LAYOUT.format(prefix, epoch, "live"), size=10, last_modified_s=OLD)
        store.put(LAYOUT.format(prefix, 5, "young"), size=10, last_modified_s=NOW - 60)
    for junk in (
        f"{ROOT}/417/000000000000000001",  # no name
        f"{ROOT}/417/1/short-epoch",
        f"{ROOT}/41/000000000000000001/x",
        f"{ROOT}/readme.txt",
        "other_root/417/000000000000000001/x",
        "level_zero/data2/417/000000000000000001/x",
        "level_zero/001/000000000000000001/x",
    ):
        store.put(junk, size=1, last_modified_s=OLD)
    return store, expected


async def test_round_deletes_exactly_the_eligible_keys() -> None:
    """Only parsable keys under the root with epoch <= M and past the grace period go."""
    store, expected = mixed_bucket()
    before = store.keys()
    sweeper = sweeper_for(store)
    result = await run_round(sweeper, SafetyGate(), await make_watermarks())
    assert before - store.keys() == expected
    summary = result.summary
    assert summary.safe_epoch == SAFE
    assert summary.cluster_epoch == CLUSTER
    assert summary.deleted == summary.eligible == len(expected)
    assert summary.deleted_bytes == 10 * len(expected)
    assert summary.skipped_young == 4
    # under the root and not parsable, and listed: "41/..." and "417/<epoch>" (no name);
    # "417/1/..." sorts after the skip point of prefix 417 and readme.txt is outside the
    # ten decimal listing prefixes, so neither is examined
    assert summary.unparsable == 2
    assert summary.errors == 0
    assert summary.blocked_reason is None
    assert summary.outcome == "ok"
    assert result.complete
    assert result.young_ready_at_s == pytest.approx(NOW - 60 + 600)
    assert result.max_deleted_epoch == SAFE


async def test_one_listing_stream_sees_every_key_under_the_root() -> None:
    """With list concurrency 1 the root is listed whole: junk beside the prefixes is counted."""
    store, expected = mixed_bucket()
    before = store.keys()
    result = await run_round(
        sweeper_for(store, list_concurrency=1), SafetyGate(), None, override=SAFE
    )
    assert before - store.keys() == expected
    assert result.summary.unparsable == 3


async def test_unpadded_layout_lists_everything_and_deletes_the_same() -> None:
    """A custom unpadded layout cannot skip ahead, but deletes exactly the eligible keys."""
    layout = KeyLayout.custom(
        pattern=r"(?P<prefix>[0-9]{3})/e(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
        root="l0",
        template="{prefix:03d}/e{epoch}/{name}",
    )
    store = MemoryObjectStore()
    expected = set()
    for prefix in range(0, 1000, 97):
        for epoch in (1, 9, 10, 11, 100, 2, 20):
            key = layout.format(prefix, epoch, "n")
            store.put(key, last_modified_s=OLD)
            if epoch <= 10:
                expected.add(key)
    before = store.keys()
    sweeper = sweeper_for(store, layout=layout, page_size=5, list_concurrency=1)
    result = await run_round(sweeper, SafetyGate(), None, override=10)
    assert before - store.keys() == expected
    assert result.summary.listed == len(before)


async def test_padded_layout_skips_live_objects_when_listing() -> None:
    """LIST requests follow the garbage: about one per prefix touched plus garbage/page."""
    store = MemoryObjectStore()
    garbage = set()
    prefixes = range(0, 1000, 50)  # 20 prefixes
    for prefix in prefixes:
        for epoch in range(1, 11):
            key = LAYOUT.format(prefix, epoch, "g")
            store.put(key, last_modified_s=OLD)
            garbage.add(key)
        for index in range(1000):
            store.put(LAYOUT.format(prefix, 1000 + index, "live"), last_modified_s=OLD)
    total = len(store.objects)
    sweeper = sweeper_for(store, list_concurrency=1)
    result = await run_round(sweeper, SafetyGate(), None, override=10)
    assert store.keys().isdisjoint(garbage)
    assert len(store.keys()) == total - len(garbage)
    # a full listing would need total/1000 = 20 pages; with ten listing prefixes...
    assert result.summary.list_requests <= len(prefixes) + 1
    assert result.summary.listed < total / 5


async def test_full_listing_reads_every_key_and_deletes_the_same() -> None:
    """With skip-ahead off the round lists every key and deletes exactly the same set."""
    store = MemoryObjectStore()
    garbage = set()
    for prefix in range(0, 1000, 100):
        for epoch in range(1, 6):
            key = LAYOUT.format(prefix, epoch, "g")
            store.put(key, last_modified_s=OLD)
            garbage.add(key)
        for index in range(300):
            store.put(LAYOUT.format(prefix, 1000 + index, "live"), last_modified_s=OLD)
    total = len(store.objects)
    sweeper = sweeper_for(store, list_concurrency=1, skip_ahead=False)
    result = await run_round(sweeper, SafetyGate(), None, override=10)
    assert store.keys().isdisjoint(garbage)
    assert len(store.keys()) == total - len(garbage)
    assert result.summary.listed == total
    assert result.summary.list_requests == -(-total // 1000)


async def test_skip_in_the_middle_of_a_page_keeps_later_prefixes() -> None:
    """Objects of later prefixes in the same page are still examined after a skip."""
    store = MemoryObjectStore()
    for prefix in (1, 2, 3):
        store.put(LAYOUT.format(prefix, 5, "g"), last_modified_s=OLD)
        store.put(LAYOUT.format(prefix, 50, "live"), last_modified_s=OLD)
    sweeper = sweeper_for(store, list_concurrency=1)
    result = await run_round(sweeper, SafetyGate(), None, override=10)
    assert {LAYOUT.parse(k).epoch for k in store.objects} == {50}  # type: ignore[union-attr]
    assert result.summary.list_requests == 1


async def test_dry_run_deletes_nothing_and_plan_matches_real_run(tmp_path: Path) -> None:
    """A dry run deletes nothing; its plan is exactly what the real run then deletes."""
    store, expected = mixed_bucket()
    before = store.keys()
    watermarks = await make_watermarks()
    plan_path = tmp_path / "plan.jsonl"
    with PlanWriter(plan_path) as plan:
        dry = sweeper_for(store, dry_run=True, plan=plan)
        result = await run_round(dry, SafetyGate(), watermarks)
    assert store.keys() == before
    assert result.summary.deleted == 0
    assert result.summary.delete_requests == 0
    assert result.summary.eligible == len(expected)
    lines = [json.loads(line) for line in plan_path.read_text().splitlines()]
    assert {line["key"] for line in lines} == expected
    first = lines[0]
    assert set(first) == {"key", "epoch", "size", "last_modified"}
    assert first["last_modified"].endswith("Z")
    assert LAYOUT.parse(first["key"]).epoch == first["epoch"]  # type: ignore[union-attr]
    await run_round(sweeper_for(store), SafetyGate(), watermarks)
    assert before - store.keys() == {line["key"] for line in lines}


async def test_two_shards_delete_what_one_sweeper_would() -> None:
    """Shards 0/2 and 1/2 together delete exactly the single sweeper's set."""
    store, expected = mixed_bucket()
    before = store.keys()
    watermarks = await make_watermarks()
    deleted = []
    for index in (0, 1):
        snapshot = store.keys()
        await run_round(
            sweeper_for(store, shard_index=index, shard_count=2), SafetyGate(), watermarks
        )
        deleted.append(snapshot - store.keys())
    assert deleted[0]
    assert deleted[1]
    assert deleted[0].isdisjoint(deleted[1])
    assert deleted[0] | deleted[1] == expected == before - store.keys()


async def test_malformed_partition_record_blocks_the_round() -> None:
    """A malformed record makes M undefined: nothing deleted, the reason names the partition."""
    store, _ = mixed_bucket()
    before = store.keys()
    watermarks = await make_watermarks()
    await watermarks._kv.txn([], [Put(watermarks.partition_key("orders/9"), b"{not json")])
    result = await run_round(sweeper_for(store), SafetyGate(), watermarks)
    assert store.keys() == before
    assert store.list_requests == 0
    assert result.summary.outcome == "blocked"
    assert "orders/9" in (result.summary.blocked_reason or "")


async def test_paused_round_deletes_nothing() -> None:
    """A pause marker blocks the round with reason 'paused: <reason>'."""
    store, _ = mixed_bucket()
    before = store.keys()
    watermarks = await make_watermarks()
    await watermarks.set_paused("incident 42")
    metrics = SweeperMetrics()
    sweeper = Sweeper(store, RoundConfig(layout=LAYOUT), metrics=metrics, clock=lambda: NOW)
    result = await run_round(sweeper, SafetyGate(), watermarks)
    assert store.keys() == before
    assert result.summary.blocked_reason == "paused: incident 42"
    assert result.summary.outcome == "paused"
    assert metrics.paused._value.get() == 1
    await watermarks.clear_paused()
    result = await run_round(sweeper, SafetyGate(), watermarks)
    assert result.summary.deleted > 0
    assert metrics.paused._value.get() == 0


class PausesAfterFirstDelete(MemoryObjectStore):
    """Writes the pause key in etcd once the first DeleteObjects request was answered."""

    watermarks: WatermarkStore | None = None

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        result = await super().delete_batch(keys)
        if self.watermarks is not None and self.delete_requests == 1:
            await self.watermarks.set_paused("incident 43")
        return result


async def test_a_pause_during_the_round_stops_it_within_one_batch() -> None:
    """The brake re-reads the pause key before each request: the round deletes one batch,
    stops listing, counts the rest as skipped_paused and reports itself paused."""
    store = PausesAfterFirstDelete()
    keys = {LAYOUT.format(p, e, "g") for p in range(0, 1000, 50) for e in range(1, 11)}
    for key in keys:
        store.put(key, size=1, last_modified_s=OLD)
    watermarks = await make_watermarks()
    store.watermarks = watermarks
    metrics = SweeperMetrics()
    sweeper = Sweeper(
        store,
        RoundConfig(layout=LAYOUT, batch_size=10, concurrency=1, list_concurrency=1, page_size=20),
        metrics=metrics,
        clock=lambda: NOW,
        retrier=fast_retrier(),
        brake=PauseBrake(watermarks, min_interval_s=0),
    )
    result = await run_round(sweeper, SafetyGate(), watermarks)
    summary = result.summary
    assert store.delete_requests == 1
    assert summary.deleted == 10
    assert len(keys - store.keys()) == 10
    assert summary.skipped_paused == summary.eligible - 10 > 0
    assert summary.list_requests < len(keys) // 20  # listing stopped early
    assert summary.blocked_reason == "paused during the round: incident 43"
    assert summary.outcome == "paused"
    assert not result.complete
    assert metrics.paused._value.get() == 1
    assert math.isnan(metrics.safe_epoch._value.get())
    # resumed: the next round re-arms the brake and deletes the rest
    await watermarks.clear_paused()
    result = await run_round(sweeper, SafetyGate(), watermarks)
    assert result.summary.blocked_reason is None
    assert not keys & store.keys()
    assert metrics.paused._value.get() == 0
    assert metrics.safe_epoch._value.get() == SAFE


async def test_regression_of_safe_epoch_is_refused() -> None:
    """An M lower than one this process used blocks the round and deletes nothing."""
    store, _ = mixed_bucket()
    gate = SafetyGate()
    await run_round(sweeper_for(store), gate, None, override=SAFE)
    assert gate.highest == SAFE
    store.put(LAYOUT.format(3, 1, "new"), last_modified_s=OLD)
    before = store.keys()
    result = await run_round(sweeper_for(store), gate, None, override=SAFE - 1)
    assert store.keys() == before
    assert "regression" in (result.summary.blocked_reason or "")


async def test_override_above_cluster_epoch_is_refused() -> None:
    """--safe-epoch above the cluster epoch is refused; at or below it is used as given."""
    store, _ = mixed_bucket()
    before = store.keys()
    watermarks = await make_watermarks()
    result = await run_round(sweeper_for(store), SafetyGate(), watermarks, override=CLUSTER + 1)
    assert store.keys() == before
    assert "above the cluster epoch" in (result.summary.blocked_reason or "")
    result = await run_round(sweeper_for(store), SafetyGate(), watermarks, override=CLUSTER)
    assert result.summary.safe_epoch == CLUSTER
    assert all(
        LAYOUT.parse(k) is None
        or LAYOUT.parse(k).epoch > CLUSTER  # type: ignore[union-attr]
        or k.endswith("young")
        for k in store.objects
    )


async def test_no_partitions_means_cluster_epoch_minus_one() -> None:
    """With no partitions registered, stranded objects up to cluster epoch - 1 go."""
    store = MemoryObjectStore()
    store.put(LAYOUT.format(1, CLUSTER - 1, "stranded"), last_modified_s=OLD)
    store.put(LAYOUT.format(1, CLUSTER, "current"), last_modified_s=OLD)
    watermarks = await make_watermarks(watermark=None)
    result = await run_round(sweeper_for(store), SafetyGate(), watermarks)
    assert result.summary.safe_epoch == CLUSTER - 1
    assert store.keys() == {LAYOUT.format(1, CLUSTER, "current")}


async def test_throttling_and_server_errors_are_survived() -> None:
    """A seeded 30% of SlowDown/500 answers on every request loses nothing and cuts concurrency."""
    store, expected = mixed_bucket()
    for prefix in range(100, 200):
        for epoch in range(1, 30):
            key = LAYOUT.format(prefix, epoch, "bulk")
            store.put(key, last_modified_s=OLD)
            expected.add(key)
    before = store.keys()
    store.fail_share(0.3, ["SlowDown", "500", "InternalError"], seed=11)
    sweeper = sweeper_for(store, batch_size=50)
    result = await run_round(sweeper, SafetyGate(), await make_watermarks())
    assert before - store.keys() == expected
    assert result.summary.errors == 0
    assert result.summary.deleted == len(expected)
    assert sweeper.deleter.limiter.cuts > 0
    assert sweeper.retrier.retries > 0


async def test_per_key_errors_retried_when_transient_and_reported_otherwise() -> None:
    """Per-key InternalError is retried until it goes; AccessDenied is counted as an error."""
    store, expected = mixed_bucket()
    transient, denied = sorted(expected)[:2]
    store.key_faults[transient] = "InternalError"
    store.key_fault_budget[transient] = 3
    store.key_faults[denied] = "AccessDenied"
    result = await run_round(sweeper_for(store), SafetyGate(), await make_watermarks())
    assert transient not in store.objects
    assert denied in store.objects
    assert result.summary.errors == 1
    assert result.summary.deleted == len(expected) - 1
    assert result.summary.outcome == "partial"
    assert not result.complete


async def test_permanent_list_error_is_reported() -> None:
    """An AccessDenied on LIST abandons the listing and counts an error."""
    store, _ = mixed_bucket()
    store.fail_requests("list", "AccessDenied", times=1)
    result = await run_round(
        sweeper_for(store, list_concurrency=1), SafetyGate(), None, override=SAFE
    )
    assert result.summary.errors == 1
    assert result.summary.outcome == "partial"


@pytest.mark.parametrize("list_concurrency", [1, 4])
async def test_max_deletes_caps_the_round(list_concurrency: int) -> None:
    """--max-deletes stops selecting keys once reached, across concurrent listers too."""
    store, expected = mixed_bucket()
    sweeper = sweeper_for(store, max_deletes=5, list_concurrency=list_concurrency, page_size=2)
    result = await run_round(sweeper, SafetyGate(), None, override=SAFE)
    assert result.summary.deleted == 5
    assert result.summary.eligible == 5
    assert len(expected & store.keys()) == len(expected) - 5
    assert not result.complete


async def test_listing_waits_for_deleters_bounded_memory() -> None:
    """With deletes stalled, the lister stops after filling the bounded queue."""
    store = MemoryObjectStore()
    for index in range(2000):
        store.put(LAYOUT.format(index % 1000, 1, f"k{index}"), last_modified_s=OLD)
    release = asyncio.Event()
    real_delete = store.delete_batch

    async def stalled(keys: list[str]) -> DeleteResult:
        await release.wait()
        return await real_delete(keys)

    store.delete_batch = stalled  # type: ignore[method-assign,assignment]
    sweeper = sweeper_for(store, batch_size=10, concurrency=1, page_size=10, list_concurrency=1)
    task = asyncio.create_task(sweeper.sweep(SAFE, None))
    for _ in range(200):
        await asyncio.sleep(0)
    # one batch in flight, two queued, one being filled: about 40 keys listed
    assert store.list_requests <= 6
    release.set()
    result = await asyncio.wait_for(task, timeout=30)
    assert result.summary.deleted == 2000


async def test_stop_event_ends_the_round_early() -> None:
    """Setting the stop event ends listing; the round reports itself incomplete."""
    store, _ = mixed_bucket()
    sweeper = sweeper_for(store)
    sweeper.stop.set()
    result = await sweeper.sweep(SAFE, None)
    assert result.summary.list_requests == 0
    assert not result.complete


def test_split_prefixes_refines_to_the_wanted_count() -> None:
    """The root splits into ten decimal children; 3-digit prefixes are not split further."""
    assert split_prefixes(["r/"], "r/", 4) == [f"r/{d}" for d in range(10)]
    assert split_prefixes(["r/"], "r/", 1) == ["r/"]
    assert split_prefixes(["r/123"], "r/", 8) == ["r/123"]


def test_bad_round_config_names_the_value() -> None:
    """Invalid settings raise ConfigError naming the value."""
    with pytest.raises(ConfigError, match="batch size 1001"):
        RoundConfig(batch_size=1001)
    with pytest.raises(ConfigError, match="shard index 2"):
        RoundConfig(shard_index=2, shard_count=2)


async def test_stop_during_delete_retries_abandons_without_errors() -> None:
    """A stop while a batch waits to be retried leaves its keys for the next round, no errors."""
    store, expected = mixed_bucket()
    store.fail_requests("delete", "SlowDown", times=100)
    sweeper = sweeper_for(store)

    async def stop_instead_of_sleeping(_seconds: float) -> None:
        sweeper.stop.set()

    sweeper.retrier.sleep = stop_instead_of_sleeping
    result = await sweeper.sweep(SAFE, None)
    assert store.delete_requests == 1  # no request is sent after the stop
    assert expected <= store.keys()
    assert result.summary.errors == 0
    assert not result.complete


@settings(max_examples=60, deadline=None)
@given(
    objects=st.lists(
        st.tuples(st.integers(0, 999), st.integers(0, 30), st.booleans()), max_size=60
    ),
    junk=st.lists(st.integers(0, 999), max_size=5),
    safe=st.integers(-1, 30),
    page_size=st.integers(1, 7),
    list_concurrency=st.sampled_from([1, 4, 20]),
    shard_count=st.integers(1, 3),
)
def test_skipping_ahead_deletes_exactly_what_decide_allows(
    objects: list[tuple[int, int, bool]],
    junk: list[int],
    safe: int,
    page_size: int,
    list_concurrency: int,
    shard_count: int,
) -> None:
    """For any bucket, page size and sharding, the shards delete exactly the keys decide allows.

    Junk inside the prefixes (sorting after every epoch) makes some look-ahead guesses
    wrong; each eligible key is still selected exactly once.
    """
    store = MemoryObjectStore()
    for index, (prefix, epoch, young) in enumerate(objects):
        store.put(
            LAYOUT.format(prefix, epoch, f"n{index}"), last_modified_s=NOW - (10 if young else 3600)
        )
    for index, prefix in enumerate(junk):
        store.put(f"{ROOT}/{prefix:03d}/zz{index}", last_modified_s=OLD)
    store.put(f"{ROOT}/junk", last_modified_s=OLD)
    expected = {
        key
        for key, info in store.objects.items()
        if decide(key, info.last_modified_s, LAYOUT, safe, NOW, 600.0)[0] is Verdict.DELETE
    }
    before = store.keys()

    async def sweep_all() -> list[RoundResult]:
        results = []
        for index in range(shard_count):
            sweeper = sweeper_for(
                store,
                page_size=page_size,
                list_concurrency=list_concurrency,
                shard_index=index,
                shard_count=shard_count,
            )
            results.append(await sweeper.sweep(safe, None))
        return results

    summaries = [result.summary for result in asyncio.run(sweep_all())]
    assert before - store.keys() == expected
    assert sum(s.eligible for s in summaries) == sum(s.deleted for s in summaries) == len(expected)
    assert sum(s.listed for s in summaries) <= len(before)
    assert not any(s.errors for s in summaries)


async def test_the_live_counts_say_how_many_listing_prefixes_are_done() -> None:
    """The progress line's percentage: each listing prefix counts done once, when its
    last range is listed to its end, also when its range was shared between listers."""
    store, _ = mixed_bucket()
    for epoch in range(1, SAFE):  # one long prefix of garbage: idle listers share it
        for name in range(40):
            store.put(LAYOUT.format(417, epoch, f"n{name}"), size=1, last_modified_s=OLD)
    seen: list[RoundCounts] = []
    sweeper = sweeper_for(store, list_concurrency=4)
    listed = store.list_page

    async def spying(prefix: str, **kwargs: object) -> ListPage:
        counts = sweeper.counts
        assert counts is not None
        seen.append(counts)
        assert counts.prefixes_done < counts.prefixes_total == 10
        return await listed(prefix, **kwargs)  # type: ignore[arg-type]

    store.list_page = spying  # type: ignore[method-assign]
    await run_round(sweeper, SafetyGate(), None, override=SAFE)
    (counts,) = {id(c): c for c in seen}.values()
    assert (counts.prefixes_done, counts.prefixes_total) == (10, 10)
