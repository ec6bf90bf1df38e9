"""Partition GC state: applied window, floor, M(p), snapshots, and their errors."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from l0gc import errors
from l0gc.errors import (
    ConfigError,
    FencingViolation,
    IllegalTransition,
    InvalidRecord,
    InvalidSnapshot,
    L0gcError,
    StaleEpoch,
    StaleOwner,
    StorageError,
    WatermarkUnavailable,
)
from watermark.core.gcstate import PartitionGcState, PendingSlide
from watermark.core.window import Admission, EpochWindow


def example_state() -> PartitionGcState:
    """created_epoch=10; entries (1, 10), (5, 11), (9, 12) fenced by the windows [10],
    [10, 11] and [11, 12]; nothing reconciled."""
    state = PartitionGcState(created_epoch=10)
    state.apply(1, 10, admitted_from=10)
    state.apply(5, 11, admitted_from=10)
    state.apply(9, 12, admitted_from=11)
    return state


def json_round_trip(state: PartitionGcState) -> PartitionGcState:
    """Restore a state from its snapshot after a trip through JSON text."""
    return PartitionGcState.restore(json.loads(json.dumps(state.snapshot())))


# -- the initial state and the example -------------------------------------------------


def test_new_partition_starts_with_watermark_one_below_its_creation_epoch() -> None:
    """PartitionGcState(created_epoch=E) has M(p) = E - 1, floor E and window [E, E]."""
    state = PartitionGcState(created_epoch=10)
    assert state.created_epoch == 10
    assert state.gc_eligible_epoch == 9
    assert state.floor == 10
    assert state.applied_window == (10, 10)
    assert state.previous_applied == 10
    assert state.last_applied_epoch == 10
    assert state.last_applied_offset is None
    assert state.reconciled_offset is None
    assert state.pending_slides == ()
    assert state.is_idle_reconciled
    assert state.max_pending_slides == 1024


def test_the_design_example() -> None:
    """created 10; the fence slides to [11, 12] at offset 9; reconciled 8 -> M(p)=9;
    reconciled 9 -> M(p)=10."""
    state = example_state()
    assert state.pending_slides == (PendingSlide(9, 11),)
    assert state.applied_window == (11, 12)
    state.reconciled(8)
    assert state.gc_eligible_epoch == 9
    state.reconciled(9)
    assert state.gc_eligible_epoch == 10
    assert state.floor == 11
    assert state.pending_slides == ()
    assert state.is_idle_reconciled


def test_a_fence_that_skipped_an_epoch_keeps_the_floor_at_its_own_lower_bound() -> None:
    """The bug the simulation found: the fence went [4] -> [4, 6] (5 skipped), the log
    applied 5 and then 6, and a writer still holds an admitted fence at 4. The floor may
    not pass 4: the lower bound is the fence's, not the previous applied maximum."""
    state = PartitionGcState(created_epoch=3)
    state.apply(0, 4, admitted_from=4)  # window [4]
    state.apply(1, 5, admitted_from=4)  # window [4, 6]: 5 is INSIDE
    state.apply(2, 6, admitted_from=4)
    state.reconciled(2)
    assert state.applied_window == (4, 6)
    assert state.gc_eligible_epoch == 3  # epoch 4 is still protected
    assert state.apply(3, 4, admitted_from=4) is Admission.INSIDE  # the held fence commits


def test_apply_inside_the_window_only_records_the_offset() -> None:
    """An entry inside the window under an unchanged fence only records its offset."""
    state = example_state()
    assert state.apply(12, 11, admitted_from=11) is Admission.INSIDE
    assert state.apply(13, 12, admitted_from=11) is Admission.INSIDE
    assert state.applied_window == (11, 12)
    assert state.last_applied_offset == 13
    assert state.pending_slides == (PendingSlide(9, 11),)


def test_a_higher_fence_bound_raises_the_lower_bound_and_remembers_where() -> None:
    """admitted_from above the lower bound raises it and queues (offset, bound); a higher
    epoch raises max_applied (ABOVE)."""
    state = PartitionGcState(created_epoch=3)
    assert state.apply(0, 3, admitted_from=3) is Admission.INSIDE
    assert state.apply(4, 9, admitted_from=3) is Admission.ABOVE
    assert state.applied_window == (3, 9)
    assert state.apply(6, 20, admitted_from=9) is Admission.ABOVE
    assert state.applied_window == (9, 20)
    assert state.apply(7, 15, admitted_from=12) is Admission.INSIDE
    assert state.applied_window == (12, 20)
    assert state.last_applied_epoch == 20
    assert state.pending_slides == (PendingSlide(6, 9), PendingSlide(7, 12))


def test_reconciled_passing_several_slides_takes_the_latest_floor() -> None:
    """One reconciled offset beyond several slides pops them all; floor is the last one's."""
    state = PartitionGcState(created_epoch=3)
    state.apply(0, 5, admitted_from=4)
    state.apply(1, 7, admitted_from=5)
    state.reconciled(1)
    assert (state.floor, state.gc_eligible_epoch, state.pending_slides) == (5, 4, ())


def test_reconciled_before_a_slide_leaves_the_floor() -> None:
    """A reconciled offset short of the first slide does not move the floor."""
    state = example_state()
    state.reconciled(4)
    assert state.gc_eligible_epoch == 9
    assert state.reconciled_offset == 4
    assert not state.is_idle_reconciled


def test_reporting_the_same_reconciled_offset_again_is_a_no_op() -> None:
    """reconciled(o) twice leaves the same state as once."""
    state = example_state()
    state.reconciled(8)
    before = state.snapshot()
    state.reconciled(8)
    assert state.snapshot() == before


def test_window_after_recovery_collapses_to_max_applied_above_the_watermark() -> None:
    """window_after_recovery() is [max_applied] with floor M(p)."""
    state = example_state()
    state.reconciled(9)
    window = state.window_after_recovery()
    assert window.bounds == (12, 12)
    assert window.floor == 10
    fresh = PartitionGcState(created_epoch=10).window_after_recovery()
    assert (fresh.bounds, fresh.floor) == ((10, 10), 9)


# -- idle partitions -----------------------------------------------------------------


def test_housekeeping_lets_an_idle_reconciled_partition_stop_pinning_m() -> None:
    """advance_epoch entries, fenced like writes, raise an idle partition's M(p)."""
    state = example_state()
    state.reconciled(9)
    assert state.gc_eligible_epoch == 10
    assert state.advance_epoch(10, 30, admitted_from=12) is Admission.ABOVE  # fence [12, 30]
    state.reconciled(10)
    assert state.gc_eligible_epoch == 11
    assert state.advance_epoch(11, 31, admitted_from=30) is Admission.ABOVE  # fence [30, 31]
    state.reconciled(11)
    assert state.gc_eligible_epoch == 29
    assert state.is_idle_reconciled


def test_housekeeping_not_above_the_window_only_records_the_offset() -> None:
    """advance_epoch at an old epoch returns INSIDE or BELOW and moves only the offset."""
    state = example_state()
    assert state.advance_epoch(10, 11, admitted_from=11) is Admission.INSIDE
    assert state.advance_epoch(11, 3, admitted_from=3) is Admission.BELOW
    assert state.applied_window == (11, 12)
    assert state.last_applied_offset == 11
    state.reconciled(11)
    assert state.is_idle_reconciled


def test_idle_advance_raises_the_floor_at_once_without_an_offset() -> None:
    """advance_idle on a reconciled partition moves the floor to the fence's new lower
    bound immediately and consumes no log offset."""
    state = example_state()
    state.reconciled(9)
    assert state.advance_idle(20, admitted_from=12) is Admission.ABOVE  # fence [12, 20]
    assert (state.floor, state.gc_eligible_epoch) == (12, 11)
    assert state.applied_window == (12, 20)
    assert state.last_applied_offset == 9
    assert state.advance_idle(25, admitted_from=20) is Admission.ABOVE
    assert state.gc_eligible_epoch == 19
    assert state.advance_idle(22, admitted_from=20) is Admission.INSIDE
    assert state.gc_eligible_epoch == 19
    fresh = PartitionGcState(created_epoch=4)
    assert fresh.advance_idle(9, admitted_from=9) is Admission.ABOVE  # window [] -> [9]
    assert fresh.gc_eligible_epoch == 8
    assert json_round_trip(fresh) == fresh


def test_idle_advance_with_unreconciled_entries_is_refused() -> None:
    """advance_idle raises IllegalTransition (nothing changes) before the reconciler is done."""
    state = example_state()
    before = state.snapshot()
    with pytest.raises(IllegalTransition, match="fully reconciled"):
        state.advance_idle(20, admitted_from=12)
    assert state.snapshot() == before


def test_catch_up_holds_the_floor_until_the_unknown_entries_are_reconciled() -> None:
    """A new owner restores a snapshot that ends at offset 9 while the log ends at 14:
    the partition is not idle and the floor stays until the reconciler passes 14."""
    state = example_state()
    state.reconciled(9)
    state.catch_up(14)
    assert state.last_applied_offset == 14
    assert not state.is_idle_reconciled
    with pytest.raises(IllegalTransition):
        state.advance_idle(20, admitted_from=12)
    state.reconciled(12)
    assert state.gc_eligible_epoch == 10
    state.reconciled(14)
    assert state.is_idle_reconciled
    state.catch_up(14)  # the same log end again: nothing changes
    assert state.apply(15, 12, admitted_from=12) is Admission.INSIDE
    empty = PartitionGcState(created_epoch=1)
    empty.catch_up(-1)  # an empty log
    assert empty.last_applied_offset is None


@pytest.mark.parametrize("log_end", [8, -1, -2])
def test_catch_up_below_the_applied_log_is_refused(log_end: int) -> None:
    """A log end below the last applied offset (or below -1) raises; nothing changes."""
    state = example_state()
    before = state.snapshot()
    with pytest.raises(IllegalTransition, match="log end offset"):
        state.catch_up(log_end)
    assert state.snapshot() == before


# -- illegal events raise and change nothing -----------------------------------------


def test_entry_below_the_applied_window_is_a_fencing_violation() -> None:
    """apply() of an epoch below previous_applied raises FencingViolation; nothing changes."""
    state = example_state()
    before = state.snapshot()
    with pytest.raises(FencingViolation) as caught:
        state.apply(10, 10, admitted_from=10)
    assert (caught.value.offset, caught.value.epoch, caught.value.window) == (10, 10, (11, 12))
    assert "fencing failed" in str(caught.value)
    assert "[11, 12]" in str(caught.value)
    assert state.snapshot() == before


def test_entry_below_its_own_fence_bound_is_a_fencing_violation() -> None:
    """apply() of an epoch below admitted_from (the fence slid past a held write) raises
    FencingViolation naming the fence's bound; nothing changes."""
    state = example_state()
    before = state.snapshot()
    with pytest.raises(FencingViolation) as caught:
        state.apply(10, 12, admitted_from=14)
    assert caught.value.window == (14, 14)
    assert state.snapshot() == before


def test_entry_below_the_creation_epoch_is_a_fencing_violation() -> None:
    """apply() of an epoch below created_epoch on a new partition raises FencingViolation."""
    state = PartitionGcState(created_epoch=10)
    before = state.snapshot()
    with pytest.raises(FencingViolation):
        state.apply(0, 9, admitted_from=9)
    assert state.snapshot() == before


def test_entry_at_previous_applied_is_inside() -> None:
    """apply() of exactly previous_applied is INSIDE the window, not a violation."""
    state = example_state()
    assert state.apply(10, 11, admitted_from=11) is Admission.INSIDE


@pytest.mark.parametrize("offset", [9, 5, 0, -1])
@pytest.mark.parametrize("event", ["apply", "advance_epoch"])
def test_offsets_that_do_not_increase_are_refused(offset: int, event: str) -> None:
    """apply()/advance_epoch() at an offset <= the last one raise IllegalTransition."""
    state = example_state()
    before = state.snapshot()
    with pytest.raises(IllegalTransition, match="strictly increase"):
        getattr(state, event)(offset, 13, admitted_from=12)
    assert state.snapshot() == before


def test_negative_first_offset_is_refused() -> None:
    """The first entry's offset must be >= 0."""
    state = PartitionGcState(created_epoch=1)
    with pytest.raises(IllegalTransition):
        state.apply(-1, 1, admitted_from=1)
    assert state.last_applied_offset is None


@pytest.mark.parametrize("offset", [7, 10, -1])
def test_reconciled_backwards_or_beyond_the_log_is_refused(offset: int) -> None:
    """reconciled() going backwards or past the last applied offset raises; nothing changes."""
    state = example_state()
    state.reconciled(8)
    before = state.snapshot()
    with pytest.raises(IllegalTransition):
        state.reconciled(offset)
    assert state.snapshot() == before


def test_reconciled_before_anything_is_applied_is_refused() -> None:
    """reconciled() on a partition with no applied entry raises IllegalTransition."""
    state = PartitionGcState(created_epoch=1)
    with pytest.raises(IllegalTransition, match="end of the log"):
        state.reconciled(0)
    assert state.reconciled_offset is None


@pytest.mark.parametrize(
    ("created_epoch", "cap"), [(-1, 4), (True, 4), (1.5, 4), (1, 0), (1, True)]
)
def test_bad_constructor_arguments_raise_config_error(created_epoch: Any, cap: Any) -> None:
    """A negative or non-int created_epoch, or max_pending_slides < 1, raise ConfigError."""
    with pytest.raises(ConfigError):
        PartitionGcState(created_epoch, max_pending_slides=cap)


# -- bounded pending slides ----------------------------------------------------------


def test_full_queue_merges_the_two_oldest_slides_into_the_later() -> None:
    """With the cap reached, (o1,p1),(o2,p2) become (o2,p2): the floor waits, then catches up."""
    state = PartitionGcState(created_epoch=0, max_pending_slides=2)
    for offset, epoch in enumerate([1, 2, 3, 4]):
        state.apply(offset, epoch, admitted_from=epoch - 1)  # fence [e - 1, e]
    assert state.pending_slides == (PendingSlide(2, 2), PendingSlide(3, 3))
    state.reconciled(1)  # without the merge the floor would be 1 now: later is safe
    assert state.gc_eligible_epoch == -1
    state.reconciled(2)
    assert state.gc_eligible_epoch == 1
    state.reconciled(3)
    assert state.floor == state.previous_applied == 3


def test_cap_of_one_keeps_only_the_latest_slide() -> None:
    """max_pending_slides=1 keeps the newest slide, so a full reconcile still reaches it."""
    state = PartitionGcState(created_epoch=5, max_pending_slides=1)
    for offset, epoch in enumerate(range(5, 12)):
        state.apply(offset, epoch, admitted_from=epoch - 1)
    assert state.pending_slides == (PendingSlide(6, 10),)
    state.reconciled(6)
    assert state.gc_eligible_epoch == 9


# -- snapshot and restore ------------------------------------------------------------


def test_snapshot_is_versioned_plain_json() -> None:
    """snapshot() has version 1, holds only JSON types and survives json.dumps unchanged."""
    state = example_state()
    state.reconciled(3)
    snapshot = state.snapshot()
    assert snapshot["version"] == 1
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["pending_slides"] == [{"offset": 9, "previous_applied": 11}]


def test_restore_round_trips_and_behaves_the_same() -> None:
    """restore(snapshot(x)) equals x and reacts to the same events the same way."""
    state = example_state()
    state.reconciled(3)
    restored = json_round_trip(state)
    assert restored == state
    assert restored is not state
    for copy in (state, restored):
        copy.apply(10, 13, admitted_from=12)
        copy.reconciled(9)
    assert restored == state
    assert restored.gc_eligible_epoch == state.gc_eligible_epoch == 10


def test_restore_of_a_new_partition_round_trips() -> None:
    """A partition with nothing applied restores equal to itself."""
    state = PartitionGcState(created_epoch=0, max_pending_slides=7)
    assert json_round_trip(state) == state
    assert json_round_trip(state).max_pending_slides == 7


def test_restore_accepts_a_tuple_of_slides() -> None:
    """restore() accepts pending_slides as a tuple as well as a list."""
    state = example_state()
    snapshot = state.snapshot()
    snapshot["pending_slides"] = tuple(snapshot["pending_slides"])
    assert PartitionGcState.restore(snapshot) == state


def test_equality_and_hashing() -> None:
    """States compare by content, not with other types, and are unhashable (mutable)."""
    assert example_state() == example_state()
    assert example_state() != PartitionGcState(created_epoch=10)
    assert example_state() != example_state().snapshot()
    with pytest.raises(TypeError):
        hash(example_state())


def test_repr_shows_window_floor_and_watermark() -> None:
    """repr() shows the applied window, floor and M(p)."""
    text = repr(example_state())
    assert "applied=[11, 12]" in text
    assert "floor=10" in text
    assert "M(p)=9" in text


# -- errors ---------------------------------------------------------------------------

ERRORS: list[L0gcError] = [
    ConfigError("bad setting"),
    IllegalTransition("bad event"),
    StaleEpoch(4, (5, 6), None),
    StaleOwner("orders/0", 3, 4),
    WatermarkUnavailable("record is missing", "orders/0"),
    WatermarkUnavailable("no cluster epoch"),
    StorageError("DeleteObjects failed", "SlowDown", True),
    StorageError("ListObjectsV2 failed", "AccessDenied", False),
    InvalidRecord("record is empty"),
    InvalidSnapshot("floor", "got True"),
    FencingViolation(10, 3, (5, 6)),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_every_error_pickles_with_its_message(error: L0gcError) -> None:
    """Every error is an L0gcError and survives pickling with the same message and fields."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_error_messages_carry_the_values_and_the_remedy() -> None:
    """Structured errors' messages name the values and say what to do."""
    assert "owner_epoch 3" in str(StaleOwner("orders/0", 3, 4))
    assert "'orders/0'" in str(WatermarkUnavailable("record is missing", "orders/0"))
    assert "nothing is deleted" in str(WatermarkUnavailable("no cluster epoch"))
    assert "retry with backoff" in str(StorageError("x", "SlowDown", True))
    assert "not retryable" in str(StorageError("x", "AccessDenied", False))


def test_every_error_is_exported() -> None:
    """Every L0gcError subclass in l0gc.errors is in its __all__."""
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, L0gcError)
    }
    assert defined <= set(errors.__all__)


# -- properties -----------------------------------------------------------------------


class GcStateMachine(RuleBasedStateMachine):
    """The GC state driven by a model leader: a fencing window, writes in flight, commits,
    reconciler reports, idle advances, housekeeping entries, publishes and crashes.

    The fence is the real `EpochWindow`, used the way `FencingGuard` uses it: an epoch
    above the window slides it only when no write is in flight (the drain). Safety is
    checked against every write still in flight too: an object whose fence is held must
    stay above M(p), or the sweeper could delete it before its commit.
    """

    state: PartitionGcState
    fence: EpochWindow
    inflight: list[int]
    entries: dict[int, int]
    log_end: int
    published: dict[str, Any]
    highest_published: int

    @initialize(created=st.integers(0, 20), cap=st.integers(1, 4))
    def create(self, created: int, cap: int) -> None:
        """Register a partition at `created` with a small slide queue to force merges."""
        self.state = PartitionGcState(created, max_pending_slides=cap)
        self.fence = self.state.window_after_recovery()
        self.inflight = []  # epochs of the writes holding a fence
        self.entries = {}  # entries the reconciler has not lifted: offset -> epoch
        self.log_end = -1
        self.published = self.state.snapshot()
        self.highest_published = self.state.gc_eligible_epoch

    def _lower(self) -> int:
        lower = self.fence.oldest_accepted
        assert lower is not None
        return lower

    @rule(data=st.data())
    def fence_a_write(self, data: st.DataObject) -> None:
        """A writer fences an epoch near the window: admitted, slid (after a drain) or refused."""
        low, high = self.fence.bounds
        if low is None or high is None:
            low = high = self.state.last_applied_epoch
        epoch = data.draw(st.integers(low, high + 2), label="fence")
        admission = self.fence.classify(epoch)
        if admission is Admission.ABOVE and not self.inflight:
            self.fence.advance(epoch)
        if admission is Admission.INSIDE or self.fence.latest_seen == epoch:
            self.inflight.append(epoch)

    @precondition(lambda self: bool(self.inflight))
    @rule(data=st.data(), gap=st.integers(0, 2))
    def commit(self, data: st.DataObject, gap: int) -> None:
        """A held fence commits its entry at the log's next offset (any order of writers)."""
        epoch = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))
        offset = self.log_end + 1 + gap
        self.state.apply(offset, epoch, admitted_from=self._lower())
        self.entries[offset] = epoch
        self.log_end = offset

    @precondition(lambda self: bool(self.inflight))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        """A writer gives up its fence; its object is an orphan."""
        self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))

    @precondition(lambda self: not self.inflight)
    @rule(step=st.integers(1, 3), housekeeping=st.booleans())
    def advance(self, step: int, housekeeping: bool) -> None:
        """The fence slides up with nothing in flight, then an idle advance (if the
        partition is idle) or a housekeeping entry in the log."""
        epoch = (self.fence.latest_seen or self.state.last_applied_epoch) + step
        self.fence.advance(epoch)
        if housekeeping:
            self.log_end += 1
            self.state.advance_epoch(self.log_end, epoch, admitted_from=self._lower())
        elif self.state.is_idle_reconciled:
            self.state.advance_idle(epoch, admitted_from=self._lower())

    @precondition(lambda self: self.state.last_applied_offset is not None)
    @rule(data=st.data())
    def reconcile(self, data: st.DataObject) -> None:
        """The reconciler reports progress, never backwards, never past the log end."""
        last = self.state.last_applied_offset
        assert last is not None
        start = self.state.reconciled_offset or 0
        offset = data.draw(st.integers(start, last), label="reconciled")
        self.state.reconciled(offset)
        self.entries = {o: e for o, e in self.entries.items() if o > offset}

    @rule()
    def publish(self) -> None:
        """The owner publishes its snapshot (through JSON, as to etcd)."""
        self.published = json.loads(json.dumps(self.state.snapshot()))
        self.highest_published = self.state.gc_eligible_epoch

    @rule()
    def crash_and_adopt(self) -> None:
        """The owner dies with its fences and what it did not publish; a new owner restores
        the published snapshot, learns the log end and rebuilds the fence."""
        self.inflight = []
        self.state = PartitionGcState.restore(self.published)
        self.state.catch_up(self.log_end)
        self.fence = self.state.window_after_recovery()

    @invariant()
    def published_watermark_never_decreases(self) -> None:
        """The published M(p) never goes down, across crashes too."""
        assert PartitionGcState.restore(self.published).gc_eligible_epoch == (
            self.highest_published
        )
        assert self.state.gc_eligible_epoch >= self.highest_published

    @invariant()
    def nothing_still_needed_is_at_or_below_the_watermark(self) -> None:
        """Safety: every unreconciled entry and every write holding a fence is above M(p)."""
        watermark = self.state.gc_eligible_epoch
        assert all(epoch > watermark for epoch in self.entries.values())
        assert all(epoch > watermark for epoch in self.inflight)

    @invariant()
    def the_fence_never_admits_garbage_epochs(self) -> None:
        """Neither the live fence nor a recovered one admits an epoch <= M(p)."""
        watermark = self.state.gc_eligible_epoch
        for window in (self.fence, self.state.window_after_recovery()):
            assert all(window.classify(e) is Admission.BELOW for e in range(-1, watermark + 1))

    @invariant()
    def ordering_holds(self) -> None:
        """created_epoch <= floor <= previous_applied <= max_applied."""
        state = self.state
        assert state.created_epoch <= state.floor <= state.previous_applied
        assert state.previous_applied <= state.last_applied_epoch
        assert len(state.pending_slides) <= state.max_pending_slides

    @invariant()
    def fully_reconciled_floor_catches_up(self) -> None:
        """Liveness: once everything is reconciled, floor == previous_applied."""
        if self.state.is_idle_reconciled:
            assert self.state.floor == self.state.previous_applied

    @invariant()
    def snapshot_round_trips(self) -> None:
        """restore(snapshot) equals the state, directly and through JSON."""
        assert PartitionGcState.restore(self.state.snapshot()) == self.state
        assert json_round_trip(self.state).snapshot() == self.state.snapshot()


GcStateMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestGcStateMachine = GcStateMachine.TestCase
