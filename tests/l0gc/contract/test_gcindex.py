"""The incrementally kept namespace view gives what a full read gives, after any changes."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc.contract.gcindex import GcIndex, NamespaceKeys
from l0gc.contract.kv import Change
from l0gc.contract.namespace import pause_reason
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import GcView, compute_safe_epoch

NS = "/l0gc/t"
KEYS = NamespaceKeys(
    f"{NS}/epoch", f"{NS}/partitions/", f"{NS}/gc/paused", f"{NS}/binding", f"{NS}/sweepers/"
)
NAMES = [f"p/{i}" for i in range(14)]


def record(name: str, watermark: int) -> bytes:
    """A well-formed record of `name` at `watermark`."""
    return PartitionRecord(name, watermark, 1, owner="pub-a", owner_epoch=1).encode()


def full_view(state: dict[str, bytes], revision: int) -> GcView:
    """What a full read of `state` (key -> raw value) at `revision` returns."""
    paused = state.get(KEYS.paused)
    return GcView(
        revision=revision,
        cluster_epoch_raw=state.get(KEYS.epoch),
        partitions={
            k[len(KEYS.partitions) :]: v for k, v in state.items() if k.startswith(KEYS.partitions)
        },
        paused=paused is not None,
        paused_reason=None if paused is None else pause_reason(paused),
        binding_raw=state.get(KEYS.binding),
        sweepers={
            k[len(KEYS.sweepers) :]: v for k, v in state.items() if k.startswith(KEYS.sweepers)
        },
    )


_partition_change = st.tuples(
    st.sampled_from(NAMES),
    st.one_of(st.integers(0, 12), st.sampled_from([None, "malformed", "empty"])),
)
_other_change = st.sampled_from(
    [
        ("epoch", b"7"),
        ("epoch", b"12"),
        ("epoch", b"x"),
        ("epoch", None),
        ("paused", b'{"reason": "maintenance", "version": 1}'),
        ("paused", None),
        ("binding", b"{}"),
        ("binding", None),
        ("sweepers/a", b"1"),
        ("sweepers/a", None),
    ]
)


def _as_change(item: tuple[str, object], revision: int) -> Change:
    kind, value = item
    if kind in NAMES:
        key = KEYS.partitions + kind
        raw = {None: None, "malformed": b"{not json", "empty": b""}.get(value)  # type: ignore[call-overload]
        if isinstance(value, int):
            raw = record(kind, value)
        return Change(key, raw, revision)
    key = {"epoch": KEYS.epoch, "paused": KEYS.paused, "binding": KEYS.binding}.get(
        kind, f"{NS}/{kind}"
    )
    return Change(key, value, revision)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    initial=st.dictionaries(st.sampled_from(NAMES), st.integers(0, 12), max_size=8),
    batches=st.lists(
        st.lists(st.one_of(_partition_change, _other_change), min_size=1, max_size=6), max_size=12
    ),
)
def test_the_index_judges_exactly_as_a_full_read(
    initial: dict[str, int], batches: list[list[tuple[str, object]]]
) -> None:
    """After every revision's changes, M (defined or blocked, its reason, the named and
    pinning partitions, the pause) equals compute_safe_epoch over a full read."""
    state = {KEYS.partitions + n: record(n, m) for n, m in initial.items()}
    state[KEYS.epoch] = b"10"
    index = GcIndex(KEYS, full_view(state, 5), pause_reason)
    assert index.safe_epoch() == compute_safe_epoch(full_view(state, 5))
    for revision, batch in enumerate(batches, start=6):
        changes = [_as_change(item, revision) for item in batch]
        for change in changes:
            if change.value is None:
                state.pop(change.key, None)
            else:
                state[change.key] = change.value
        index.apply(changes)
        full = full_view(state, revision)
        assert index.safe_epoch() == compute_safe_epoch(full)
        assert index.matches(full) is None


def test_a_mismatch_with_a_full_read_is_named() -> None:
    """A record the index never saw change is reported by name (the follower then blocks)."""
    state = {KEYS.epoch: b"10", KEYS.partitions + "p/1": record("p/1", 3)}
    index = GcIndex(KEYS, full_view(state, 5), pause_reason)
    state[KEYS.partitions + "p/1"] = record("p/1", 4)
    assert index.matches(full_view(state, 5)) == "partition records differ, e.g. 'p/1'"
    state[KEYS.partitions + "p/1"] = record("p/1", 3)
    assert index.matches(full_view(state, 5)) is None
    state[KEYS.partitions + "p/2"] = record("p/2", 3)  # a record the index never saw
    assert index.matches(full_view(state, 5)) == "partition records differ, e.g. 'p/2'"
    del state[KEYS.partitions + "p/1"], state[KEYS.partitions + "p/2"]  # one it still holds
    assert index.matches(full_view(state, 5)) == (
        "the index holds 1 partition records, the full read 0"
    )
    state[KEYS.epoch] = b"11"
    assert index.matches(full_view(state, 5)) == "cluster epoch differs"


def test_many_updates_of_one_partition_keep_the_heaps_small() -> None:
    """Lazy deletion does not grow without bound: 10,000 updates of 3 partitions."""
    state = {KEYS.epoch: b"100000"} | {KEYS.partitions + n: record(n, 0) for n in NAMES[:3]}
    index = GcIndex(KEYS, full_view(state, 1), pause_reason)
    for revision in range(2, 10_002):
        index.apply([Change(KEYS.partitions + NAMES[1], record(NAMES[1], revision), revision)])
    assert index.safe_epoch().safe_epoch == 0
    assert len(index._low) < 200
    assert len(index._high) < 200
    # the other two move above it: the last value of the updated one, 10001, is M now
    index.apply(
        [
            Change(KEYS.partitions + n, record(n, m), 10_002)
            for n, m in ((NAMES[0], 20_000), (NAMES[2], 30_000))
        ]
    )
    assert index.safe_epoch().safe_epoch == 10_001


def test_a_full_read_handed_over_in_pages_and_restarted_holds_only_the_last_start() -> None:
    """The index as a range fold: pages after `start` build what a full read's view
    builds; a restarted read (etcd compacted the first revision) forgets the first try."""
    state = {KEYS.epoch: b"10", KEYS.paused: b'{"reason": "x", "version": 1}'}
    state |= {KEYS.partitions + n: record(n, 3 + i % 4) for i, n in enumerate(NAMES)}
    index = GcIndex(KEYS, full_view({}, 1), pause_reason)
    index.start(7, 0)
    index.add([(KEYS.partitions + "gone", b"{broken"), (f"{NS}/sweepers/old", b"1")])
    index.start(8, 0xABC)
    items = sorted(state.items())
    index.add(items[:5])
    index.add(items[5:])
    assert index.safe_epoch() == compute_safe_epoch(full_view(state, 8))
    assert (index.revision, index.cluster_id) == (8, "0000000000000abc")
    assert index.matches(full_view(state, 8)) is None


PAUSED = b'{"reason": "maintenance", "version": 1}'


def test_an_index_built_from_a_view_holds_all_of_it() -> None:
    """Every key a full read gives (epoch, pause marker, binding, sweepers, cluster id)
    is in the index's view, not only the partition records."""
    state = {
        KEYS.epoch: b"10",
        KEYS.paused: PAUSED,
        KEYS.binding: b'{"b": 1}',
        f"{NS}/sweepers/a": b"1",
        KEYS.partitions + "p/1": record("p/1", 3),
    }
    full = dataclasses.replace(full_view(state, 5), cluster_id="0000000000000abc")
    index = GcIndex(KEYS, full, pause_reason)
    assert index.view() == dataclasses.replace(full, partitions={})
    assert index.safe_epoch() == compute_safe_epoch(full)


def test_an_index_that_has_read_nothing_is_the_empty_namespace_at_revision_0() -> None:
    """Before any read (revision 0: etcd's revisions start at 1) the index judges as a
    read of an empty namespace does: blocked, as the cluster epoch is missing."""
    nothing = GcView(revision=0, cluster_epoch_raw=None, partitions={})
    index = GcIndex.empty(KEYS, pause_reason)
    assert (index.revision, index.view()) == (0, nothing)
    assert index.safe_epoch() == compute_safe_epoch(nothing)


def test_a_restarted_full_read_forgets_the_pause_marker_and_binding_of_the_first_try() -> None:
    """Keys the first try gave and the last one does not (a pause lifted, a binding
    removed, a sweeper gone) are not in the index: it is the last read alone."""
    index = GcIndex.empty(KEYS, pause_reason)
    index.start(7, 0xABC)
    index.add(
        [
            (KEYS.binding, b'{"b": 1}'),
            (KEYS.epoch, b"9"),
            (KEYS.paused, PAUSED),
            (f"{NS}/sweepers/a", b"1"),
        ]
    )
    index.start(8, 0)
    state = {KEYS.partitions + "p/1": record("p/1", 3)}  # the epoch key is gone too
    index.add(sorted(state.items()))
    assert index.view() == dataclasses.replace(full_view(state, 8), partitions={})
    assert index.safe_epoch() == compute_safe_epoch(full_view(state, 8))
    assert (index.safe_epoch().paused, index.safe_epoch().defined) == (False, False)


def test_a_partition_that_has_published_nothing_is_updated_and_deleted_like_any_other() -> None:
    """M(p) = -1 (none of its epochs is garbage yet) is an M(p) like any other, not a
    malformed record: it pins M at -1 until it moves, then the next lowest does."""
    state = {
        KEYS.epoch: b"10",
        KEYS.partitions + "p/1": record("p/1", -1),
        KEYS.partitions + "p/2": record("p/2", 4),
    }
    index = GcIndex(KEYS, full_view(state, 5), pause_reason)
    assert index.safe_epoch().safe_epoch == -1
    for revision, value in ((6, record("p/1", 6)), (7, record("p/1", -1)), (8, None)):
        index.apply([Change(KEYS.partitions + "p/1", value, revision)])
        if value is None:
            del state[KEYS.partitions + "p/1"]
        else:
            state[KEYS.partitions + "p/1"] = value
        assert index.safe_epoch() == compute_safe_epoch(full_view(state, revision))
        assert index.matches(full_view(state, revision)) is None
    assert index.safe_epoch().safe_epoch == 4


def test_a_check_fed_page_by_page_names_what_the_last_read_differs_in() -> None:
    """The check as a range fold: a restarted read forgets its first try; a read holding
    what the index holds matches; a pause marker or binding it missed is named."""
    state = {KEYS.epoch: b"10", KEYS.binding: b'{"b": 1}', f"{NS}/sweepers/a": b"1"}
    state |= {KEYS.partitions + n: record(n, 3 + i % 4) for i, n in enumerate(NAMES)}
    index = GcIndex(KEYS, full_view(state, 5), pause_reason)
    check = index.checker()
    check.start(4, 0)
    check.add([(KEYS.partitions + "gone", b"{broken"), (KEYS.paused, PAUSED)])
    check.start(5, 0)
    items = sorted(state.items())
    check.add(items[:4])
    check.add(items[4:])
    assert (check.differs(), check.records) == (None, len(NAMES))
    assert check.read.view() == index.view()
    check.start(5, 0)
    check.add(sorted((state | {KEYS.paused: PAUSED}).items()))
    assert check.differs() == "pause marker differs"
    check.start(5, 0)
    check.add(sorted((state | {KEYS.binding: b'{"b": 2}'}).items()))
    assert check.differs() == "binding differs"


def test_a_check_that_was_handed_no_read_compares_with_an_empty_namespace() -> None:
    """Before `start`, a check is a read of nothing: an empty index matches it, an index
    with records holds more."""
    assert GcIndex.empty(KEYS, pause_reason).checker().differs() is None
    state = {KEYS.partitions + "p/1": record("p/1", 3)}
    index = GcIndex(KEYS, full_view(state, 5), pause_reason)
    assert index.checker().differs() == "the index holds 1 partition records, the full read 0"


def test_watermark_of_is_the_held_m_and_none_for_an_absent_or_malformed_record() -> None:
    """`watermark_of` (what `gcd status`'s fold asks per record): M(p) of a well-formed
    record, -1 for one that has published nothing, None for a malformed or absent one."""
    index = GcIndex.empty(KEYS, pause_reason)
    index.start(5, 0)
    index.add(
        [
            (KEYS.partitions + "p/0", record("p/0", 7)),
            (KEYS.partitions + "p/1", record("p/1", -1)),
            (KEYS.partitions + "p/2", b"{not json"),
        ]
    )
    assert index.watermark_of("p/0") == 7
    assert index.watermark_of("p/1") == -1
    assert index.watermark_of("p/2") is None
    assert index.watermark_of("p/9") is None
