"""The incrementally kept namespace view gives what a full read gives, after any changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from watermark.core.contract import pause_reason
from watermark.core.gcindex import GcIndex, NamespaceKeys
from watermark.core.kv import Change
from watermark.core.record import PartitionRecord
from watermark.core.safe_epoch import GcView, compute_safe_epoch

NS = "/l0gc/t"
KEYS = NamespaceKeys(f"{NS}/epoch", f"{NS}/partitions/", f"{NS}/gc/paused", f"{NS}/binding",
                     f"{NS}/sweepers/")  # fmt: skip
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
        partitions={k[len(KEYS.partitions) :]: v for k, v in state.items()
                    if k.startswith(KEYS.partitions)},
        paused=paused is not None,
        paused_reason=None if paused is None else pause_reason(paused),
        binding_raw=state.get(KEYS.binding),
        sweepers={k[len(KEYS.sweepers) :]: v for k, v in state.items()
                  if k.startswith(KEYS.sweepers)},
    )  # fmt: skip


_partition_change = st.tuples(
    st.sampled_from(NAMES),
    st.one_of(st.integers(0, 12), st.sampled_from([None, "malformed", "empty"])),
)
_other_change = st.sampled_from(
    [("epoch", b"7"), ("epoch", b"12"), ("epoch", b"x"), ("epoch", None),
     ("paused", b'{"reason": "maintenance", "version": 1}'), ("paused", None),
     ("binding", b"{}"), ("sweepers/a", b"1"), ("sweepers/a", None)]
)  # fmt: skip


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
    batches=st.lists(st.lists(st.one_of(_partition_change, _other_change), min_size=1,
                              max_size=6), max_size=12),
)  # fmt: skip
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
