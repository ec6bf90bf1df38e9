"""One hosted partition: commits with the fence's bound, reconciled clamping, the log end,
when an idle advance is due, and freezing on a fencing violation."""

from __future__ import annotations

import pytest

from l0gc.errors import FenceExpired, FencingViolation, IllegalTransition
from l0lab.sim.variants import NoDrainGuard
from watermark.core.gcstate import PartitionGcState
from watermark.service.guard import FencingGuard
from watermark.service.hosted import HostedPartition


def hosted(created_epoch: int = 5) -> HostedPartition:
    """A fresh partition created at `created_epoch`, its fence recovered as [created]."""
    state = PartitionGcState(created_epoch=created_epoch)
    guard = FencingGuard(state.window_after_recovery(), partition="p0")
    return HostedPartition("p0", state, guard, owner_epoch=1, published_watermark=4)


async def test_commit_applies_with_the_fence_bound_and_learns_the_log_end() -> None:
    """A commit applies (offset, epoch) with the window's lower bound; the log end is known."""
    part = hosted()
    token = await part.guard.acquire(7, timeout=1)  # [5] -> [5, 7]
    part.commit(token, 3)
    part.guard.release(token)
    assert part.state.applied_window == (5, 7)
    assert part.state.last_applied_offset == 3
    assert part.log_end_known
    assert part.dirty
    with pytest.raises(FenceExpired):
        part.commit(token, 4)  # released: not held any more


async def test_a_fencing_violation_freezes_it_with_the_reason() -> None:
    """An epoch below the fence's bound raises FencingViolation and sets `frozen` once."""
    part = hosted()
    part.guard = NoDrainGuard(part.state.window_after_recovery(), partition="p0")
    token = await part.guard.acquire(5, timeout=1)
    for epoch in (9, 10):  # the broken guard slides past the held fence: [9, 10]
        part.guard.release(await part.guard.acquire(epoch, timeout=1))
    with pytest.raises(FencingViolation) as caught:
        part.commit(token, 0)
    assert part.frozen == str(caught.value)
    assert not part.is_idle_below(20)
    assert part.describe("pub-a")["frozen"] == part.frozen


async def test_reconciled_reports_are_clamped_and_never_go_back() -> None:
    """A report past the applied log is clamped to it; a lower one changes nothing."""
    part = hosted()
    part.reconciled(3)  # nothing applied yet: nothing to do
    assert part.state.reconciled_offset is None
    for offset in (0, 1):
        token = await part.guard.acquire(5, timeout=1)
        part.commit(token, offset)
        part.guard.release(token)
    part.dirty = False
    part.reconciled(10)
    assert (part.state.reconciled_offset, part.dirty) == (1, True)
    part.dirty = False
    part.reconciled(0)
    assert (part.state.reconciled_offset, part.dirty) == (1, False)


async def test_an_idle_advance_is_due_only_when_everything_is_known_and_lifted() -> None:
    """Not before the log end is known, not with unreconciled entries or writes in flight,
    not at or below the applied epoch; then it slides the fence and raises M(p)."""
    part = hosted()
    assert not part.is_idle_below(8)  # log end unknown
    part.learn_log_end(-1)
    assert part.is_idle_below(8)
    assert not part.is_idle_below(5)
    token = await part.guard.acquire(5, timeout=1)
    assert not part.is_idle_below(8)  # a write in flight
    part.guard.release(token)
    assert await part.advance_idle(8, timeout_s=1)
    assert part.guard.window == (5, 8)
    assert part.state.gc_eligible_epoch == 4  # the fence still admits 5
    assert await part.advance_idle(9, timeout_s=1)
    assert part.state.gc_eligible_epoch == 7


def test_a_log_end_below_the_applied_log_is_refused() -> None:
    """learn_log_end below the last applied offset raises; nothing is learnt."""
    part = hosted()
    part.learn_log_end(6)
    part.log_end_known = False
    with pytest.raises(IllegalTransition):
        part.learn_log_end(2)
    assert not part.log_end_known
    assert part.state.last_applied_offset == 6


def test_publication_carries_owner_watermark_window_and_tracker() -> None:
    """What a publish writes: this owner's epoch, M(p), the fence window, the snapshot."""
    part = hosted()
    pub = part.publication("pub-a")
    assert (pub.partition, pub.owner, pub.owner_epoch) == ("p0", "pub-a", 1)
    assert (pub.watermark, pub.window) == (4, (5, 5))
    assert pub.tracker == part.state.snapshot()
