"""The etcd contract rules of WatermarkStore, run on the in-memory KV (no I/O)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

import pytest
from structlog.testing import capture_logs

from l0gc.contract.kv import Compare, Delete, KeyValue, Put, RangeResult, TxnResult
from l0gc.contract.namespace import PUBLISH_BATCH, Publication, PublishStatus, decide_publication
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import GcView, compute_safe_epoch
from l0gc.errors import (
    ConfigError,
    EpochConflict,
    InvalidRecord,
    PartitionNotRegistered,
    StaleOwner,
    WatermarkRegression,
    WatermarkUnavailable,
)
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore

NS = "/l0gc/test"


class SpyKV(MemoryKV):
    """MemoryKV that counts calls and can run a hook just before each txn."""

    def __init__(self) -> None:
        super().__init__(now=lambda: 0.0)
        self.calls: list[str] = []
        self.txn_sizes: list[int] = []
        self.before_txn: Callable[[], Awaitable[None]] | None = None

    async def get(self, key: str) -> KeyValue | None:
        self.calls.append("get")
        return await super().get(key)

    async def range_prefix(self, prefix: str) -> RangeResult:
        self.calls.append("range")
        return await super().range_prefix(prefix)

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Put | Delete]) -> TxnResult:
        self.calls.append("txn")
        if self.before_txn is not None:
            hook, self.before_txn = self.before_txn, None
            await hook()
        self.txn_sizes.append(len(ops))
        return await super().txn(compares, ops)


@pytest.fixture
def kv() -> SpyKV:
    """A fresh in-memory etcd."""
    return SpyKV()


@pytest.fixture
def store(kv: SpyKV) -> WatermarkStore:
    """A store on the in-memory etcd with a fixed wall clock."""
    return WatermarkStore(kv, NS, wall_clock=lambda: 1_700_000_000.0)


async def owned(store: WatermarkStore, partition: str, owner: str = "pub-a") -> PartitionRecord:
    """Register `partition` and make `owner` its owner."""
    await store.register_partition(partition)
    return await store.acquire_ownership(partition, owner)


def pub(record: PartitionRecord, watermark: int, **changes: object) -> Publication:
    """A publication by the record's current owner."""
    assert record.owner is not None
    fields: dict[str, object] = {
        "partition": record.partition,
        "owner": record.owner,
        "owner_epoch": record.owner_epoch,
        "watermark": watermark,
        "window": (watermark + 1, watermark + 2),
    }
    fields.update(changes)
    return Publication(**fields)  # type: ignore[arg-type]


# -- cluster epoch ---------------------------------------------------------------------


async def test_missing_cluster_epoch_says_to_advance_it(store: WatermarkStore) -> None:
    """Reading an absent epoch raises WatermarkUnavailable telling the operator what to run."""
    with pytest.raises(WatermarkUnavailable, match="watermark epoch advance"):
        await store.get_cluster_epoch()


async def test_malformed_cluster_epoch_is_unavailable(store: WatermarkStore, kv: SpyKV) -> None:
    """A non-decimal epoch value raises WatermarkUnavailable naming the value."""
    await kv.txn([], [Put(store.epoch_key, b"12a")])
    with pytest.raises(WatermarkUnavailable, match="12a"):
        await store.get_cluster_epoch()


async def test_init_cluster_epoch_creates_once(store: WatermarkStore) -> None:
    """init creates the epoch only when absent and returns the current value."""
    assert await store.init_cluster_epoch(5) == 5
    assert await store.init_cluster_epoch(1) == 5
    with pytest.raises(ConfigError):
        await store.init_cluster_epoch(0)


async def test_advance_moves_by_exactly_one(store: WatermarkStore) -> None:
    """advance creates epoch 1 when absent, then moves +1 from the expected value."""
    assert await store.advance_cluster_epoch() == 1
    assert await store.advance_cluster_epoch() == 2
    assert await store.advance_cluster_epoch(expected=2) == 3
    assert await store.get_cluster_epoch() == 3


async def test_advance_with_wrong_expected_value_conflicts(store: WatermarkStore) -> None:
    """advance(expected=N) refuses when the epoch is not N, or is absent."""
    with pytest.raises(EpochConflict):
        await store.advance_cluster_epoch(expected=4)
    await store.init_cluster_epoch(7)
    with pytest.raises(EpochConflict, match="expected epoch 6, found 7"):
        await store.advance_cluster_epoch(expected=6)
    assert await store.get_cluster_epoch() == 7


async def test_advance_conflicts_when_epoch_changes_underneath(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """A concurrent advance between read and write makes this advance fail, not skip."""
    await store.init_cluster_epoch(3)

    async def concurrent_advance() -> None:
        await MemoryKV.txn(kv, [], [Put(store.epoch_key, b"4")])

    kv.before_txn = concurrent_advance
    with pytest.raises(EpochConflict):
        await store.advance_cluster_epoch()
    assert await store.get_cluster_epoch() == 4


async def test_advance_guard_failure_changes_nothing(store: WatermarkStore) -> None:
    """An extra guard compare that fails (lost leadership) blocks the advance."""
    await store.init_cluster_epoch(3)
    with pytest.raises(EpochConflict):
        await store.advance_cluster_epoch(guard=[Compare(store.leader_key, 99)])
    assert await store.get_cluster_epoch() == 3


# -- registry --------------------------------------------------------------------------


async def test_register_sets_watermark_below_cluster_epoch(store: WatermarkStore) -> None:
    """Registering at cluster epoch 10 gives M(p) = 9 and created_epoch = 10, unowned."""
    await store.init_cluster_epoch(10)
    record = await store.register_partition("orders/0")
    assert (record.watermark, record.created_epoch) == (9, 10)
    assert (record.owner, record.owner_epoch) == (None, 0)
    assert record.sealed_owner_epoch == 0  # a new partition's log is empty
    assert await store.get_partition("orders/0") == record


async def test_a_sealed_publish_marks_the_owner_epoch_and_any_other_publish_clears_it(
    store: WatermarkStore,
) -> None:
    """sealed=True stores sealed_owner_epoch = the owner's epoch; the next owner sees the
    log as complete; an unsealed publish (or an owner that never published) does not."""
    await store.init_cluster_epoch(5)
    first = await owned(store, "p0")
    assert first.log_is_complete  # owner 1 right after registration (sealed at 0)
    await store.publish([pub(first, 4, sealed=True)])
    second = await store.acquire_ownership("p0", "pub-b")
    assert (second.sealed_owner_epoch, second.log_is_complete) == (1, True)
    await store.publish([pub(second, 4)])
    stored = await store.get_partition("p0")
    assert stored is not None
    assert stored.sealed_owner_epoch is None
    await store.publish([pub(second, 4, sealed=True)])
    await store.acquire_ownership("p0", "pub-c")  # adopts, then dies before publishing
    fourth = await store.acquire_ownership("p0", "pub-d")
    assert (fourth.sealed_owner_epoch, fourth.owner_epoch) == (2, 4)
    assert not fourth.log_is_complete


@pytest.mark.parametrize("value", ["1", -1, True, 1.0])
def test_a_bad_sealed_owner_epoch_makes_the_record_malformed(value: object) -> None:
    """sealed_owner_epoch must be an integer >= 0 or absent/null."""
    doc = {"version": 1, "watermark": 3, "created_epoch": 4, "sealed_owner_epoch": value}
    with pytest.raises(InvalidRecord, match="sealed_owner_epoch"):
        PartitionRecord.decode(json.dumps(doc).encode(), partition="p0")


async def test_register_initialises_a_missing_cluster_epoch(store: WatermarkStore) -> None:
    """Registering with no cluster epoch creates epoch 1 and M(p) = 0."""
    record = await store.register_partition("p")
    assert (record.watermark, record.created_epoch) == (0, 1)
    assert await store.get_cluster_epoch() == 1


@pytest.mark.parametrize("name", ["orders/../0", "./orders", "orders/.", "a/./b", ".."])
async def test_a_new_name_with_a_dot_segment_is_refused(store: WatermarkStore, name: str) -> None:
    """Issue 51 (5): HTTP clients that normalise dot segments could never reach such a
    partition, so registering one is refused, naming it; a record of that name written
    before (by hand, or an older version) stays readable through register."""
    await store.init_cluster_epoch(5)
    with pytest.raises(ConfigError, match=r"'\.' or '\.\.' segment"):
        await store.register_partition(name)
    assert await store.get_partition(name) is None
    record = PartitionRecord(partition=name, watermark=4, created_epoch=5)
    await store.kv.txn([], [Put(store.partition_key(name), record.encode())])
    assert (await store.register_partition(name)).watermark == 4
    assert (await store.register_partition("orders.v2/..x")).watermark == 4  # not a segment


async def test_register_is_idempotent_and_never_lowers(store: WatermarkStore) -> None:
    """Re-registering returns the stored record unchanged, even after M(p) rose."""
    await store.init_cluster_epoch(10)
    first = await owned(store, "p")
    published = await store.publish_one(pub(first, 20))
    for _ in range(3):
        await store.advance_cluster_epoch()
    again = await store.register_partition("p")
    assert again == published
    assert again.watermark == 20


async def test_register_retries_when_epoch_advances_meanwhile(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """An epoch advance racing a registration makes it use the new epoch."""
    await store.init_cluster_epoch(10)

    async def concurrent_advance() -> None:
        await MemoryKV.txn(kv, [], [Put(store.epoch_key, b"11")])

    kv.before_txn = concurrent_advance
    record = await store.register_partition("p")
    assert (record.watermark, record.created_epoch) == (10, 11)


@pytest.mark.parametrize("name", ["", " p", "p q", "p\t", "é", "x" * 201, "a\nb"])
async def test_invalid_partition_names_are_rejected(store: WatermarkStore, name: str) -> None:
    """Empty, whitespace, non-ASCII and over-long partition names raise ConfigError."""
    with pytest.raises(ConfigError, match="partition name"):
        await store.register_partition(name)


async def test_partition_names_may_contain_slashes(store: WatermarkStore) -> None:
    """A '/' in a name is fine, and a 200-character name is the maximum."""
    assert (await store.register_partition("topic/a/0")).partition == "topic/a/0"
    assert await store.register_partition("x" * 200)


def test_invalid_namespace_is_rejected() -> None:
    """A namespace must start with '/' and must not end with '/'."""
    for bad in ("l0gc", "/l0gc/", "/", "/l0 gc"):
        with pytest.raises(ConfigError, match="namespace"):
            WatermarkStore(MemoryKV(), bad)


async def test_deregister_deletes_the_key(store: WatermarkStore) -> None:
    """Deregistering removes the record once; a second call reports it absent."""
    await store.register_partition("p")
    assert await store.deregister_partition("p")
    assert await store.get_partition("p") is None
    assert not await store.deregister_partition("p")


async def test_malformed_record_raises_invalid_record(store: WatermarkStore, kv: SpyKV) -> None:
    """get_partition raises InvalidRecord for a record that does not decode."""
    await kv.txn([], [Put(store.partition_key("bad"), b"{not json")])
    with pytest.raises(InvalidRecord, match="bad"):
        await store.get_partition("bad")


async def test_list_partitions_reports_malformed_entries(store: WatermarkStore, kv: SpyKV) -> None:
    """list_partitions returns records and, for unreadable ones, the InvalidRecord."""
    await store.register_partition("good")
    await kv.txn([], [Put(store.partition_key("bad"), b"[]")])
    listed = await store.list_partitions()
    assert isinstance(listed["good"], PartitionRecord)
    assert isinstance(listed["bad"], InvalidRecord)


# -- ownership and publishing ----------------------------------------------------------


async def test_acquire_bumps_owner_epoch(store: WatermarkStore) -> None:
    """Each acquisition moves ownership to the claimant with owner_epoch + 1."""
    await store.register_partition("p")
    first = await store.acquire_ownership("p", "pub-a")
    second = await store.acquire_ownership("p", "pub-b")
    assert (first.owner, first.owner_epoch) == ("pub-a", 1)
    assert (second.owner, second.owner_epoch) == ("pub-b", 2)


async def test_acquire_of_unregistered_partition_fails(store: WatermarkStore) -> None:
    """Acquiring a partition that has no record raises PartitionNotRegistered (a ConfigError)."""
    with pytest.raises(PartitionNotRegistered):
        await store.acquire_ownership("ghost", "pub-a")
    with pytest.raises(ConfigError):
        await store.acquire_ownership("ghost", "pub-a")


async def test_stale_owner_cannot_publish_after_takeover(store: WatermarkStore) -> None:
    """After a second acquire the first owner's publish is refused and nothing is written."""
    old = await owned(store, "p", "pub-a")
    new = await store.acquire_ownership("p", "pub-b")
    outcome = (await store.publish([pub(old, 50)]))[0]
    assert outcome.status is PublishStatus.STALE_OWNER
    with pytest.raises(StaleOwner) as info:
        await store.publish_one(pub(old, 50))
    assert info.value.current_owner_epoch == new.owner_epoch
    assert await store.get_partition("p") == new
    assert (await store.publish_one(pub(new, 50))).watermark == 50


async def test_publish_never_lowers_the_watermark(store: WatermarkStore) -> None:
    """A lower watermark is refused (and logged); equal or higher ones are written."""
    record = await owned(store, "p")
    await store.publish_one(pub(record, 40))
    with capture_logs() as logs:
        outcome = (await store.publish([pub(record, 39)]))[0]
    assert outcome.status is PublishStatus.REFUSED_LOWER
    assert outcome.record is not None
    assert outcome.record.watermark == 40
    assert {"event": "watermark.publish_refused_lower", "partition": "p"}.items() <= logs[0].items()
    with pytest.raises(WatermarkRegression, match="from 40 to 39"):
        await store.publish_one(pub(record, 39))
    stored = await store.publish_one(pub(record, 40, tracker={"k": 1}))
    assert (stored.watermark, stored.tracker) == (40, {"k": 1})
    assert (await store.publish_one(pub(record, 41))).watermark == 41


async def test_publish_keeps_identity_fields_and_sets_window(store: WatermarkStore) -> None:
    """A publish changes watermark, window, tracker and updated_at only."""
    await store.init_cluster_epoch(10)
    record = await owned(store, "p")
    stored = await store.publish_one(pub(record, 12, window=(13, 14), tracker={"v": 1}))
    assert stored.created_epoch == 10
    assert (stored.owner, stored.owner_epoch) == ("pub-a", 1)
    assert stored.window == (13, 14)
    assert stored.updated_at == 1_700_000_000.0
    assert await store.get_partition("p") == stored


async def test_publish_to_missing_or_malformed_record_writes_nothing(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """Unregistered partitions are MISSING; unreadable records are MALFORMED; both unwritten."""
    await kv.txn([], [Put(store.partition_key("bad"), b"garbage")])
    ghost = Publication("ghost", "pub-a", 1, 5)
    bad = Publication("bad", "pub-a", 1, 5)
    outcomes = await store.publish([ghost, bad])
    assert [o.status for o in outcomes] == [PublishStatus.MISSING, PublishStatus.MALFORMED]
    assert outcomes[1].detail is not None
    assert "bad" in outcomes[1].detail
    assert await store.get_partition("ghost") is None
    with pytest.raises(PartitionNotRegistered):
        await store.publish_one(ghost)
    with pytest.raises(InvalidRecord):
        await store.publish_one(bad)


async def test_publish_rejects_duplicate_partitions(store: WatermarkStore) -> None:
    """Naming one partition twice in one publish call is a caller bug."""
    record = await owned(store, "p")
    with pytest.raises(ConfigError, match="more than once"):
        await store.publish([pub(record, 5), pub(record, 6)])


async def test_batch_publish_of_250_partitions_with_mixed_outcomes(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """One call publishes 250 partitions in <= 100-record txns, each with its own outcome."""
    await store.init_cluster_epoch(10)
    records = [await owned(store, f"t/{i:03d}") for i in range(240)]
    for i in range(0, 240, 3):  # every third partition is already at 50
        await store.publish_one(pub(records[i], 50))
    for i in range(1, 240, 30):  # some were taken over by another publisher
        await store.acquire_ownership(f"t/{i:03d}", "pub-b")
    pubs = [pub(record, 40) for record in records]
    pubs += [Publication(f"missing/{i}", "pub-a", 1, 40) for i in range(10)]
    kv.calls.clear()
    kv.txn_sizes.clear()
    outcomes = await store.publish(pubs)

    assert [o.partition for o in outcomes] == [p.partition for p in pubs]
    expected: list[PublishStatus] = []
    for i in range(240):
        if i % 3 == 0:
            expected.append(PublishStatus.REFUSED_LOWER)
        elif i % 30 == 1:
            expected.append(PublishStatus.STALE_OWNER)
        else:
            expected.append(PublishStatus.OK)
    expected += [PublishStatus.MISSING] * 10
    assert [o.status for o in outcomes] == expected
    written = expected.count(PublishStatus.OK)
    assert sum(kv.txn_sizes) == written
    assert max(kv.txn_sizes) <= PUBLISH_BATCH
    assert len(kv.txn_sizes) == -(-written // PUBLISH_BATCH)
    listed = await store.list_partitions()
    for i, status in enumerate(expected[:240]):
        stored = listed[f"t/{i:03d}"]
        assert isinstance(stored, PartitionRecord)
        assert stored.watermark == {PublishStatus.OK: 40, PublishStatus.REFUSED_LOWER: 50}.get(
            status, 9
        )


async def test_publish_rereads_and_redecides_after_a_lost_race(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """A record changed between read and write makes the batch re-read and re-decide."""
    a = await owned(store, "a")
    b = await owned(store, "b")

    async def takeover() -> None:
        await store.acquire_ownership("b", "pub-b")

    kv.before_txn = takeover
    outcomes = await store.publish([pub(a, 5), pub(b, 5)])
    assert [o.status for o in outcomes] == [PublishStatus.OK, PublishStatus.STALE_OWNER]
    stored_b = await store.get_partition("b")
    assert stored_b is not None
    assert stored_b.watermark == 0


async def test_publish_gives_up_under_persistent_contention(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """When records keep changing under every attempt, publish raises EpochConflict."""
    record = await owned(store, "p")

    async def churn() -> None:
        item = await MemoryKV.get(kv, store.partition_key("p"))
        assert item is not None
        await MemoryKV.txn(kv, [], [Put(item.key, item.value)])
        kv.before_txn = churn

    kv.before_txn = churn
    with pytest.raises(EpochConflict):
        await store.publish([pub(record, 5)])


def test_decide_publication_rules() -> None:
    """The pure publish rule: missing, stale owner, lower watermark, else OK."""
    current = PartitionRecord("p", watermark=10, created_epoch=1, owner="a", owner_epoch=2)
    assert decide_publication(Publication("p", "a", 2, 9), None) is PublishStatus.MISSING
    assert decide_publication(Publication("p", "a", 1, 11), current) is PublishStatus.STALE_OWNER
    assert decide_publication(Publication("p", "b", 2, 11), current) is PublishStatus.STALE_OWNER
    assert decide_publication(Publication("p", "a", 2, 9), current) is PublishStatus.REFUSED_LOWER
    assert decide_publication(Publication("p", "a", 2, 10), current) is PublishStatus.OK


# -- sweeper view ----------------------------------------------------------------------


async def test_empty_registry_safe_epoch_is_cluster_epoch_minus_one(
    store: WatermarkStore,
) -> None:
    """With no partitions, M = cluster epoch - 1 (stranded objects are still collected)."""
    await store.init_cluster_epoch(8)
    safe = await store.read_safe_epoch()
    assert (safe.safe_epoch, safe.cluster_epoch, safe.partition_count) == (7, 8, 0)


async def test_safe_epoch_is_the_minimum_and_names_pinning_partitions(
    store: WatermarkStore,
) -> None:
    """M = min(cluster epoch - 1, min M(p)); the partitions at the minimum are pinning."""
    await store.init_cluster_epoch(2)
    for name, watermark in (("a", 9), ("b", 4), ("c", 4)):
        record = await owned(store, name)
        await store.publish_one(pub(record, watermark))
    for _ in range(10):
        await store.advance_cluster_epoch()
    safe = await store.read_safe_epoch()
    assert (safe.safe_epoch, safe.cluster_epoch) == (4, 12)
    assert [r.partition for r in safe.pinning] == ["b", "c"]


async def test_malformed_record_makes_safe_epoch_undefined(
    store: WatermarkStore, kv: SpyKV
) -> None:
    """One unreadable partition record makes M undefined and the result names it."""
    await store.init_cluster_epoch(10)
    await store.register_partition("good")
    no_watermark = json.dumps({"version": 1, "created_epoch": 3}).encode()
    await kv.txn([], [Put(store.partition_key("orders/7"), no_watermark)])
    safe = await store.read_safe_epoch()
    assert not safe.defined
    assert safe.blocked_partition == "orders/7"
    assert safe.blocked_reason is not None
    assert "orders/7" in safe.blocked_reason


def record_bytes(partition: str, watermark: int) -> bytes:
    """An encoded, well-formed record of `partition` at `watermark`."""
    return PartitionRecord(partition, watermark, 1, owner="pub-a", owner_epoch=1).encode()


def test_pinning_is_the_first_names_at_the_minimum_in_name_order() -> None:
    """Pinning lists at most 10 records, the lowest names at the minimum, whatever the order."""
    partitions = {f"hi/{i:02d}": record_bytes(f"hi/{i:02d}", 9) for i in range(5)}
    partitions |= {f"lo/{i:02d}": record_bytes(f"lo/{i:02d}", 4) for i in range(25)}
    partitions |= {f"a/{i:02d}": record_bytes(f"a/{i:02d}", 6) for i in range(12)}
    shuffled = dict(sorted(partitions.items(), key=lambda item: item[0][::-1]))
    safe = compute_safe_epoch(GcView(revision=7, cluster_epoch_raw=b"20", partitions=shuffled))
    assert (safe.safe_epoch, safe.partition_count, safe.revision) == (4, 42, 7)
    assert [r.partition for r in safe.pinning] == [f"lo/{i:02d}" for i in range(10)]
    assert {r.watermark for r in safe.pinning} == {4}


def test_watermark_at_or_above_the_cluster_epoch_blocks_naming_the_partition() -> None:
    """M(p) >= the cluster epoch makes M undefined (not capped), naming the partition with
    the highest M(p) (the lowest name among equals)."""
    partitions = {
        "b/0": record_bytes("b/0", 3),
        "c/0": record_bytes("c/0", 4),
        "a/0": record_bytes("a/0", 2),
        "d/0": record_bytes("d/0", 9),
    }
    above = compute_safe_epoch(GcView(revision=7, cluster_epoch_raw=b"4", partitions=partitions))
    assert (above.safe_epoch, above.blocked_partition) == (None, "d/0")
    assert "M(p) = 9, at or above the cluster epoch 4" in str(above.blocked_reason)
    tied = dict(partitions, **{"e/0": record_bytes("e/0", 9), "0/0": record_bytes("0/0", 9)})
    assert (
        compute_safe_epoch(
            GcView(revision=7, cluster_epoch_raw=b"4", partitions=tied)
        ).blocked_partition
        == "0/0"
    )
    below = compute_safe_epoch(GcView(revision=7, cluster_epoch_raw=b"5", partitions=partitions))
    assert below.blocked_partition == "d/0"
    fine = dict(partitions)
    del fine["d/0"]
    ok = compute_safe_epoch(GcView(revision=7, cluster_epoch_raw=b"5", partitions=fine))
    assert (ok.safe_epoch, ok.blocked_reason) == (2, None)


def test_lowest_sorting_malformed_record_is_named_whatever_the_order() -> None:
    """Any malformed record blocks M, even after the minimum; the lowest name is reported."""
    partitions = {f"ok/{i}": record_bytes(f"ok/{i}", 5 + i) for i in range(20)}
    partitions |= {"z/bad": b"{}", "m/bad": b"not json", "ok/7": b""}
    for order in (sorted(partitions), sorted(partitions, reverse=True)):
        ordered = {name: partitions[name] for name in order}
        safe = compute_safe_epoch(GcView(revision=3, cluster_epoch_raw=b"30", partitions=ordered))
        assert (safe.defined, safe.blocked_partition, safe.cluster_epoch) == (False, "m/bad", 30)
        assert safe.blocked_reason is not None
        assert "m/bad" in safe.blocked_reason
    last_only = {f"ok/{i}": record_bytes(f"ok/{i}", 5) for i in range(3)} | {"zz": b"[]"}
    blocked = compute_safe_epoch(GcView(revision=3, cluster_epoch_raw=b"30", partitions=last_only))
    assert (blocked.safe_epoch, blocked.blocked_partition) == (None, "zz")


async def test_missing_cluster_epoch_makes_safe_epoch_undefined(store: WatermarkStore) -> None:
    """No cluster epoch key means no M."""
    safe = await store.read_safe_epoch()
    assert not safe.defined
    assert safe.blocked_reason is not None
    assert "watermark epoch advance" in safe.blocked_reason


async def test_gc_view_is_one_range_read_of_the_namespace(store: WatermarkStore, kv: SpyKV) -> None:
    """read_gc_view makes exactly one range read and ignores the leader key."""
    await store.init_cluster_epoch(3)
    await store.register_partition("p")
    await kv.txn([], [Put(store.leader_key, b"ticker-1"), Put("/l0gc/testx/epoch", b"99")])
    await store.set_paused("maintenance")
    kv.calls.clear()
    view = await store.read_gc_view()
    assert kv.calls == ["range"]
    assert view.cluster_epoch_raw == b"3"
    assert set(view.partitions) == {"p"}
    assert (view.paused, view.paused_reason) == (True, "maintenance")
    assert view.revision == kv.revision


async def test_pause_set_get_clear(store: WatermarkStore, kv: SpyKV) -> None:
    """Pausing stores the reason; clearing removes it; an unreadable marker still pauses."""
    assert await store.get_paused() is None
    await store.set_paused("investigating a regression")
    assert await store.get_paused() == "investigating a regression"
    assert (await store.read_safe_epoch()).paused
    assert await store.clear_paused()
    assert not await store.clear_paused()
    await kv.txn([], [Put(store.paused_key, b"yes")])
    reason = await store.get_paused()
    assert reason is not None
    assert "unreadable" in reason
