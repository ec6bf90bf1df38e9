"""The fence lock as a state machine: every transition, with in-memory values and no loop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc.errors import AlreadyCommitted, FenceExpired, IllegalTransition
from watermark.core.fencelock import (
    Enter,
    FenceLock,
    Grant,
    Hold,
    Outcome,
    Refuse,
    Slide,
    Wait,
    repeat_of,
)
from watermark.core.window import EpochWindow
from watermark.events import FenceRefusal

N = 100


def lock_at(*epochs: int, floor: int | None = None) -> FenceLock[Hold]:
    """A lock whose window has been slid through `epochs`."""
    window = EpochWindow(floor=floor)
    for epoch in epochs:
        window.advance(epoch)
    return FenceLock(window, partition="p0")


def granted(decision: object) -> Hold:
    """The hold of a Grant or Slide decision."""
    assert isinstance(decision, Grant | Slide)
    assert decision.hold is not None
    return decision.hold


def test_inside_is_granted_at_once_with_its_deadline() -> None:
    """An epoch inside the window, nothing queued: a shared hold with deadline now + ttl."""
    lock = lock_at(N, N + 1)
    hold = lock.grant_at_once(N, 7.0, 2.0)
    assert hold is not None
    assert (hold.partition, hold.epoch, hold.window, hold.slid, hold.deadline) == (
        "p0",
        N,
        (N, N + 1),
        False,
        9.0,
    )
    assert lock.is_held(hold)
    assert lock.inflight == 1
    assert lock.grant_at_once(N + 1, 0.0, None) is not None
    assert lock.inflight == 2


def test_the_fast_path_grants_nothing_outside_the_open_range() -> None:
    """Above, below, at the floor, on an empty window: grant_at_once holds nothing."""
    lock = lock_at(N, N + 1)
    for epoch in (N - 1, N + 2):
        assert lock.grant_at_once(epoch, 0.0, None) is None
    assert lock_at().grant_at_once(N, 0.0, None) is None
    assert lock_at(floor=N).grant_at_once(N, 0.0, None) is None
    assert lock.inflight == 0


def test_request_inside_is_a_grant_and_above_with_no_holder_slides() -> None:
    """request: INSIDE -> Grant; ABOVE with nobody holding -> Slide, window [N, N+1]."""
    lock = lock_at(N)
    inside = lock.request(N, 0.0, hold_for=None)
    assert isinstance(inside, Grant)
    lock.release(inside.hold)
    slide = lock.request(N + 1, 0.0, hold_for=5.0)
    assert isinstance(slide, Slide)
    assert (slide.before, slide.after) == ((N, N), (N, N + 1))
    assert slide.hold is not None
    assert (slide.hold.slid, slide.hold.window, slide.hold.deadline) == (True, (N, N + 1), 5.0)
    assert lock.bounds == (N, N + 1)
    assert lock.exclusive_waiters == 0


def test_an_epoch_ahead_of_an_empty_window_slides_it() -> None:
    """On an empty window any epoch above the floor is ahead: it slides to [e]."""
    lock = lock_at(floor=41)
    assert lock.grant_at_once(42, 0.0, None) is None
    slide = lock.request(42, 0.0, hold_for=None)
    assert isinstance(slide, Slide)
    assert (slide.before, slide.after) == ((None, None), (42, 42))


def test_below_the_window_is_refused_and_changes_nothing() -> None:
    """request below the window or at the floor: Refuse(STALE) with the window and floor."""
    lock = lock_at(N, N + 1, N + 2)
    refusal = lock.request(N, 0.0, hold_for=None)
    assert refusal == Refuse(FenceRefusal.STALE, N, (N + 1, N + 2), None, 0)
    floored = lock_at(floor=41).request(41, 0.0, hold_for=None)
    assert isinstance(floored, Refuse)
    assert (floored.reason, floored.floor) == (FenceRefusal.STALE, 41)
    assert lock.bounds == (N + 1, N + 2)
    assert lock.inflight == 0


def test_slide_waits_for_inflight_holders_to_drain() -> None:
    """ABOVE while two holders are in: Wait(queued); after both release, the next turn slides."""
    lock = lock_at(N)
    first, second = granted(lock.request(N, 0.0, hold_for=None)), lock.grant_at_once(N, 0.0, None)
    assert second is not None
    wait = lock.request(N + 1, 0.0, hold_for=None)
    assert wait == Wait(queued=True, until=None)
    assert lock.exclusive_waiters == 1
    assert lock.bounds == (N, N)
    changes = lock.changes
    assert lock.release(first)
    assert lock.changes > changes  # a release may let a waiter proceed
    assert lock.request(N + 1, 0.0, hold_for=None, queued=True) == Wait(queued=True, until=None)
    assert lock.exclusive_waiters == 1  # asking again does not queue twice
    lock.release(second)
    slide = lock.request(N + 1, 0.0, hold_for=None, queued=True)
    assert isinstance(slide, Slide)
    assert lock.exclusive_waiters == 0
    assert lock.bounds == (N, N + 1)


def test_a_queued_slide_holds_back_inside_requests() -> None:
    """Writer preference: with a slide queued, INSIDE waits and the fast path grants nothing."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert lock.grant_at_once(N, 0.0, None) is None
    assert lock.request(N, 0.0, hold_for=None) == Wait(queued=False, until=None)
    lock.release(holder)
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None, queued=True), Slide)
    late = lock.request(N, 0.0, hold_for=None)
    assert isinstance(late, Grant)
    assert late.hold.window == (N, N + 1)


def test_a_queued_request_whose_epoch_another_slid_to_joins_inside() -> None:
    """Queued to slide to N+1 while another slid there: the next turn is a Grant, dequeued."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert lock.exclusive_waiters == 2
    lock.release(holder)
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None, queued=True), Slide)
    assert lock.exclusive_waiters == 1
    joined = lock.request(N + 1, 0.0, hold_for=None, queued=True)
    assert isinstance(joined, Grant)
    assert not joined.hold.slid
    assert lock.exclusive_waiters == 0


def test_a_waiting_request_passed_by_two_slides_is_refused() -> None:
    """A request for N waiting behind slides to N+1 and N+2 is refused on its next turn."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert lock.request(N, 0.0, hold_for=None) == Wait(queued=False, until=None)
    lock.release(holder)
    lock.release(granted(lock.request(N + 1, 0.0, hold_for=None, queued=True)))
    lock.release(granted(lock.request(N + 2, 0.0, hold_for=None)))
    refusal = lock.request(N, 0.0, hold_for=None)
    assert isinstance(refusal, Refuse)
    assert (refusal.reason, refusal.window) == (FenceRefusal.STALE, (N + 1, N + 2))


def test_timeout_gives_up_leaves_the_queue_and_lets_inside_requests_in() -> None:
    """give_up: Refuse(TIMEOUT), out of the queue, holders still held, fast path open again."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    changes = lock.changes
    refusal = lock.give_up(N + 1, queued=True)
    assert refusal == Refuse(FenceRefusal.TIMEOUT, N + 1, (N, N), None, 1)
    assert lock.changes > changes
    assert lock.exclusive_waiters == 0
    assert lock.is_held(holder)
    assert lock.grant_at_once(N, 0.0, None) is not None


def test_an_inside_request_that_times_out_changes_nothing() -> None:
    """give_up of a request that was not queued: Refuse(TIMEOUT), the queue untouched."""
    lock = lock_at(N)
    granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    changes = lock.changes
    assert lock.give_up(N, queued=False).reason is FenceRefusal.TIMEOUT
    assert (lock.exclusive_waiters, lock.changes) == (1, changes)


def test_withdraw_leaves_the_queue_and_an_idle_withdraw_is_illegal() -> None:
    """withdraw after a queued Wait empties the queue; with nobody queued it raises."""
    lock = lock_at(N)
    granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    lock.withdraw()
    assert lock.exclusive_waiters == 0
    with pytest.raises(IllegalTransition):
        lock.withdraw()
    assert lock.exclusive_waiters == 0


def test_an_expired_hold_is_reclaimed_with_no_slide_waiting() -> None:
    """Issue 51 (4): a writer fenced and crashed on an idle partition. Before its deadline
    the hold stays; at it, reclaim_expired takes it back though nobody waits to slide, and
    its commit can no longer be released as committed."""
    lock = lock_at(N)
    stuck = granted(lock.request(N, 0.0, hold_for=10.0))
    assert lock.reclaim_expired(9.9) == ()
    assert lock.reclaim_expired(10.0) == (stuck,)
    assert not lock.is_held(stuck)
    assert stuck.outcome is Outcome.RECLAIMED
    assert not lock.release(stuck, Outcome.COMMITTED, 1)
    assert lock.taken_back == 1
    assert lock.inflight == 0


def test_a_waiting_slide_reclaims_the_expired_holds_in_its_way() -> None:
    """Past its deadline a hold in a queued slide's way is reclaimed by that slide."""
    lock = lock_at(N)
    stuck = granted(lock.request(N, 0.0, hold_for=10.0))
    wait = lock.request(N + 1, 9.0, hold_for=None)
    assert wait == Wait(queued=True, until=10.0)
    slide = lock.request(N + 1, 10.5, hold_for=None, queued=True)
    assert isinstance(slide, Slide)
    assert slide.reclaimed == (stuck,)
    assert not lock.is_held(stuck)
    assert not lock.release(stuck)
    assert lock.taken_back == 1


def test_reclaim_expired_with_a_slide_waiting() -> None:
    """reclaim_expired (moved clock): takes back only the holds at or past their deadline."""
    lock = lock_at(N)
    early = granted(lock.request(N, 0.0, hold_for=1.0))
    late = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert lock.reclaim_expired(0.5) == ()
    assert lock.reclaim_expired(1.0) == (early,)
    assert lock.is_held(late)


def test_exclusive_block_waits_for_holders_slides_and_blocks_fences() -> None:
    """request_exclusive waits for holders, Enter; inside it the window slides; then left."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request_exclusive(N + 1, 0.0), Wait)
    lock.release(holder)
    assert isinstance(lock.request_exclusive(N + 1, 0.0, queued=True), Enter)
    assert lock.exclusive
    assert lock.grant_at_once(N, 0.0, None) is None
    assert lock.request(N, 0.0, hold_for=None) == Wait(queued=False, until=None)
    slide = lock.exclusive_epoch(N + 1)
    assert isinstance(slide, Slide)
    assert (slide.hold, slide.after) == (None, (N, N + 1))
    assert lock.exclusive_epoch(N + 1) is None  # already covered: INSIDE
    refusal = lock.exclusive_epoch(N - 1)
    assert isinstance(refusal, Refuse)
    assert refusal.reason is FenceRefusal.STALE
    lock.leave_exclusive()
    assert lock.grant_at_once(N + 1, 0.0, None) is not None


def test_exclusive_transitions_out_of_turn_are_illegal() -> None:
    """exclusive_epoch or leave_exclusive without the lock raise and change nothing."""
    lock = lock_at(N)
    with pytest.raises(IllegalTransition):
        lock.exclusive_epoch(N + 1)
    with pytest.raises(IllegalTransition):
        lock.leave_exclusive()
    assert lock.bounds == (N, N)
    assert not lock.exclusive


def test_an_illegal_slide_raises_and_leaves_the_lock_unchanged() -> None:
    """The slide primitive to an epoch that is not above the window raises, nothing moves."""
    lock = lock_at(N, N + 1)
    with pytest.raises(IllegalTransition):
        lock.slide(N)
    assert lock.bounds == (N, N + 1)
    assert lock.grant_at_once(N, 0.0, None) is not None


def test_close_refuses_every_request_and_dequeues_waiters() -> None:
    """After close: fast path none, request and request_exclusive Refuse(CLOSED); holds stay."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert lock.close()
    assert not lock.close()
    assert lock.grant_at_once(N, 0.0, None) is None
    closed = lock.request(N + 1, 0.0, hold_for=None, queued=True)
    assert isinstance(closed, Refuse)
    assert closed.reason is FenceRefusal.CLOSED
    assert lock.exclusive_waiters == 0
    exclusive = lock.request_exclusive(N + 1, 0.0)
    assert isinstance(exclusive, Refuse)
    assert lock.exclusive_waiters == 0
    assert lock.is_held(holder)
    assert lock.release(holder)


def test_revoke_all_takes_back_every_hold() -> None:
    """revoke_all returns the holds taken back and counts them; with none, no change."""
    lock = lock_at(N)
    holds = [granted(lock.request(N, 0.0, hold_for=None)) for _ in range(3)]
    assert set(lock.revoke_all()) == set(holds)
    assert (lock.inflight, lock.taken_back) == (0, 3)
    changes = lock.changes
    assert lock.revoke_all() == ()
    assert lock.changes == changes


@settings(max_examples=100, deadline=None)
@given(
    floor=st.integers(0, 5),
    epochs=st.lists(st.integers(0, 15), min_size=1, max_size=30),
)
def test_no_hold_is_granted_at_or_below_the_floor_or_outside_its_window(
    floor: int, epochs: list[int]
) -> None:
    """Whatever the order, a hold's epoch is > M(p), inside its window, and the fast path
    agrees with the first turn of request."""
    lock: FenceLock[Hold] = FenceLock(EpochWindow.recovered(None, floor))
    for epoch in epochs:
        fast = lock.grant_at_once(epoch, 0.0, None)
        decision = lock.request(epoch, 0.0, hold_for=None) if fast is None else Grant(fast)
        if fast is None:
            assert not isinstance(decision, Grant)  # the fast path grants every INSIDE
        if isinstance(decision, Refuse):
            assert decision.reason is FenceRefusal.STALE
            continue
        hold = granted(decision)
        low, high = hold.window
        assert low is not None
        assert high is not None
        assert hold.epoch > floor
        assert low <= hold.epoch <= high
        lock.release(hold)


# -- how holds end (outcomes), repeats, and the oldest hold -------------------------


def test_every_way_a_hold_ends_is_remembered_on_the_hold() -> None:
    """release records COMMITTED with its offset, ABORTED or REFUSED; a reclaim records
    RECLAIMED and a revoke REVOKED; a second release changes nothing."""
    lock = lock_at(N)
    committed, aborted, refused, revoked = (lock.grant_at_once(N, 0.0, 5.0) for _ in range(4))
    assert committed is not None
    assert aborted is not None
    assert refused is not None
    assert revoked is not None
    assert committed.outcome is None
    assert lock.release(committed, Outcome.COMMITTED, 12)
    assert lock.release(aborted)
    assert lock.release(refused, Outcome.REFUSED)
    assert not lock.release(committed, Outcome.ABORTED)
    assert (committed.outcome, committed.offset) == (Outcome.COMMITTED, 12)
    assert (aborted.outcome, refused.outcome) == (Outcome.ABORTED, Outcome.REFUSED)
    assert lock.revoke_all() == (revoked,)
    assert revoked.outcome is Outcome.REVOKED
    expired = lock.grant_at_once(N, 0.0, 1.0)
    assert expired is not None
    assert isinstance(lock.request(N + 1, 5.0, hold_for=1.0), Slide)  # reclaims, then slides
    assert expired.outcome is Outcome.RECLAIMED


@pytest.mark.parametrize(
    ("outcome", "offset"),
    [
        (Outcome.COMMITTED, None),
        (Outcome.ABORTED, 3),
        (Outcome.RECLAIMED, None),
        (Outcome.REVOKED, None),
    ],
)
def test_release_refuses_an_outcome_that_does_not_fit(outcome: Outcome, offset: int | None) -> None:
    """COMMITTED needs its offset, the others none; RECLAIMED and REVOKED are the lock's."""
    lock = lock_at(N)
    hold = lock.grant_at_once(N, 0.0, None)
    assert hold is not None
    with pytest.raises(IllegalTransition):
        lock.release(hold, outcome, offset)
    assert lock.is_held(hold)
    assert hold.outcome is None


def test_repeat_of_tells_a_lost_answer_from_a_commit_that_must_not_happen() -> None:
    """Held: commit now (False). Committed at this offset: a repeat (True). At another
    offset: AlreadyCommitted. Ended otherwise: FenceExpired naming how."""
    lock = lock_at(N)
    hold = lock.grant_at_once(N, 0.0, None)
    assert hold is not None
    assert repeat_of(hold, 4) is False
    lock.release(hold, Outcome.COMMITTED, 4)
    assert repeat_of(hold, 4) is True
    with pytest.raises(AlreadyCommitted):
        repeat_of(hold, 5)
    aborted = lock.grant_at_once(N, 0.0, None)
    assert aborted is not None
    lock.release(aborted)
    with pytest.raises(FenceExpired, match="aborted"):
        repeat_of(aborted, 4)


def test_a_timed_out_request_names_the_oldest_hold_and_its_age() -> None:
    """give_up with `now` carries (epoch, age) of the longest-held fence."""
    lock = lock_at(N)
    lock.grant_at_once(N, 10.0, None)
    lock.grant_at_once(N, 12.0, None)
    assert isinstance(lock.request(N + 1, 13.0, hold_for=None), Wait)
    refusal = lock.give_up(N + 1, queued=True, now=15.5)
    assert refusal.reason is FenceRefusal.TIMEOUT
    assert refusal.oldest == (N, 5.5)
    assert lock.exclusive_waiters == 0
    assert FenceLock(EpochWindow(), partition="p").oldest(1.0) is None


def test_a_waiting_exclusive_request_stops_the_fast_path_until_it_leaves() -> None:
    """Writer preference for the exclusive lock: while it waits for a holder, fences that
    arrive (fast path or request) wait too; asking again does not queue it twice; once it
    entered and left, the fast path grants again."""
    lock = lock_at(N)
    holder = granted(lock.request(N, 0.0, hold_for=None))
    assert lock.request_exclusive(N + 1, 0.0) == Wait(queued=True, until=None)
    assert lock.exclusive_waiters == 1
    assert lock.grant_at_once(N, 0.0, None) is None
    assert lock.request(N, 0.0, hold_for=None) == Wait(queued=False, until=None)
    assert lock.request_exclusive(N + 1, 0.0, queued=True) == Wait(queued=True, until=None)
    assert lock.exclusive_waiters == 1
    assert lock.grant_at_once(N, 0.0, None) is None
    assert lock.inflight == 1
    lock.release(holder)
    assert lock.request_exclusive(N + 1, 0.0, queued=True) == Enter()
    assert (lock.exclusive, lock.exclusive_waiters) == (True, 0)
    lock.leave_exclusive()
    assert lock.grant_at_once(N, 0.0, None) is not None


def test_a_closed_lock_grants_nothing_even_with_nothing_queued() -> None:
    """close with no request queued shuts the fast path too, and request_exclusive is
    refused as CLOSED."""
    lock = lock_at(N, N + 1)
    assert not lock.closed
    assert lock.close()
    assert lock.closed
    assert lock.grant_at_once(N, 0.0, None) is None
    assert lock.grant_at_once(N + 1, 0.0, None) is None
    refusal = lock.request_exclusive(N + 1, 0.0)
    assert refusal == Refuse(FenceRefusal.CLOSED, N + 1, (N, N + 1), None, 0)


def test_each_transition_that_may_free_a_waiter_counts_one_change() -> None:
    """`changes` starts at 0 and moves by exactly one per release, withdrawal, dequeue,
    reclaim, end of an exclusive block, close and revoke; other transitions leave it."""
    lock = lock_at(N)
    assert lock.changes == 0
    expired = granted(lock.request(N, 0.0, hold_for=1.0))
    other = granted(lock.request(N, 0.0, hold_for=None))
    assert lock.changes == 0  # grants free nobody
    assert isinstance(lock.request(N + 1, 0.0, hold_for=None), Wait)
    assert lock.changes == 0  # queueing frees nobody
    assert lock.reclaim_expired(1.0) == (expired,)
    assert lock.changes == 1
    lock.withdraw()
    assert lock.changes == 2
    assert lock.release(other)
    assert lock.changes == 3
    assert not lock.release(other)
    assert lock.changes == 3
    assert isinstance(lock.request_exclusive(N + 1, 0.0), Enter)
    assert lock.changes == 4  # it left the queue
    lock.leave_exclusive()
    assert lock.changes == 5
    granted(lock.request(N, 0.0, hold_for=None))
    assert len(lock.revoke_all()) == 1
    assert lock.changes == 6
    assert lock.close()
    assert lock.changes == 7
    assert not lock.close()
    assert lock.changes == 7


def test_a_waiting_slide_is_told_the_earliest_deadline() -> None:
    """Wait.until and next_deadline are the earliest hold deadline, so an expired hold is
    reclaimed as soon as it may be, not at the latest one."""
    lock = lock_at(N)
    assert lock.next_deadline() is None
    granted(lock.request(N, 0.0, hold_for=9.0))
    granted(lock.request(N, 0.0, hold_for=3.0))
    granted(lock.request(N, 0.0, hold_for=None))
    assert lock.next_deadline() == 3.0
    assert lock.request(N + 1, 1.0, hold_for=None) == Wait(queued=True, until=3.0)
    assert lock.request_exclusive(N + 1, 1.0) == Wait(queued=True, until=3.0)


def test_the_primitives_record_without_checking() -> None:
    """grant records a hold at any epoch; slide moves the window, returning before/after;
    the window property is the lock's own window."""
    window = EpochWindow()
    window.advance(N)
    lock: FenceLock[Hold] = FenceLock(window, partition="p0")
    assert lock.window is window
    hold = lock.grant(N + 5, 1.0, 2.0, slid=True)
    assert (hold.epoch, hold.slid, hold.deadline, hold.window) == (N + 5, True, 3.0, (N, N))
    assert lock.is_held(hold)
    assert lock.slide(N + 1) == Slide(None, (N, N), (N, N + 1))
    assert lock.bounds == (N, N + 1)


def test_the_oldest_hold_is_never_older_than_zero_seconds() -> None:
    """A clock read before the grant (`now` earlier than `granted_at`) gives age 0.0, and
    with nothing held there is no oldest hold."""
    lock = lock_at(N)
    assert lock.oldest(5.0) is None
    lock.grant_at_once(N, 10.0, None)
    assert lock.oldest(9.0) == (N, 0.0)
    assert lock.oldest(10.25) == (N, 0.25)


def test_raise_floor_takes_back_holds_at_or_below_it() -> None:
    """FenceLock.raise_floor revokes exactly the holds at or below the new floor (their
    outcome REVOKED, counted in taken_back) and the fast path stops granting there."""
    window = EpochWindow()
    window.advance(9)
    window.advance(10)
    lock: FenceLock[Hold] = FenceLock(window, partition="p")
    low = lock.grant(9, 0.0, None, slid=False)
    high = lock.grant(10, 0.0, None, slid=False)
    changes = lock.changes
    assert lock.raise_floor(9) == (low,)
    assert lock.changes == changes + 1  # waiters are woken once
    assert lock.bounds == (10, 10)
    assert (low.outcome, high.outcome, lock.inflight, lock.taken_back) == (
        Outcome.REVOKED,
        None,
        1,
        1,
    )
    assert lock.grant_at_once(9, 0.0, None) is None
    assert lock.grant_at_once(10, 0.0, None) is not None
    assert lock.raise_floor(9) == ()
    assert lock.changes == changes + 1  # a floor that does not rise changes nothing
