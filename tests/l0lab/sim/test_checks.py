"""The simulation's invariants, fed hand-made histories: each check must be able to fail."""

from __future__ import annotations

import pytest

from l0lab.sim.checks import Checker, SimLedger, ViolationKind
from l0lab.testing.ledger import Ledger

KEY_4 = "level_zero/data/001/000000000000000004/a"
KEY_6 = "level_zero/data/002/000000000000000006/b"
JUNK = "level_zero/data/README"


def make(fence_is_live: bool = True) -> tuple[Ledger, Checker]:
    """A ledger with partitions p0 and p1, objects at epochs 4 and 6 and one junk key."""
    ledger = Ledger(lambda _fence: fence_is_live)
    ledger.partition_created("p0")
    ledger.partition_created("p1")
    ledger.uploaded(KEY_4, 4)
    ledger.uploaded(KEY_6, 6)
    ledger.uploaded(JUNK, None)
    return ledger, Checker(ledger)


def kinds(checker: Checker) -> list[ViolationKind]:
    """The kinds found, in order."""
    return [violation.kind for violation in checker.violations]


def test_deleting_unreconciled_data_is_a_violation() -> None:
    """An object referenced above the reconciled offset must not be deleted."""
    ledger, checker = make()
    ledger.committed(KEY_4, "p0", 0)
    ledger.committed(KEY_4, "p0", 1)
    ledger.reconciled("p0", 0)
    checker.on_deleted(KEY_4, "shard0")
    assert kinds(checker) == [ViolationKind.DELETED_REFERENCED]
    assert "p0@1" in checker.violations[0].detail


def test_deleting_reconciled_data_is_fine() -> None:
    """Once every reference is reconciled, deleting the object is allowed."""
    ledger, checker = make()
    ledger.committed(KEY_4, "p0", 0)
    ledger.reconciled("p0", 0)
    checker.on_deleted(KEY_4, "shard0")
    assert checker.violations == []


def test_a_multi_partition_object_stays_protected_by_any_partition() -> None:
    """An object reconciled on one partition but not on another is still protected."""
    ledger, checker = make()
    ledger.committed(KEY_4, "p0", 0)
    ledger.committed(KEY_4, "p1", 0)
    ledger.reconciled("p0", 0)
    checker.on_deleted(KEY_4, "shard0")
    assert kinds(checker) == [ViolationKind.DELETED_REFERENCED]


def test_a_deleted_partition_no_longer_protects_its_data() -> None:
    """Unreconciled data of a deleted partition is dropped with it: its objects are garbage."""
    ledger, checker = make()
    ledger.committed(KEY_4, "p0", 0)
    ledger.partition_deleted("p0")
    checker.on_deleted(KEY_4, "shard0")
    assert checker.violations == []


def test_deleting_a_fenced_object_is_a_violation_while_the_fence_is_live() -> None:
    """An uploaded, fenced, uncommitted object must not be deleted."""
    ledger, checker = make()
    ledger.fence_granted(7, KEY_4, "p0")
    checker.on_deleted(KEY_4, "shard1")
    assert kinds(checker) == [ViolationKind.DELETED_FENCED]


def test_a_reclaimed_or_finished_fence_protects_nothing() -> None:
    """A fence the guard reclaimed (not live) or the writer finished no longer protects."""
    ledger, checker = make(fence_is_live=False)
    ledger.fence_granted(7, KEY_4, "p0")
    checker.on_deleted(KEY_4, "shard1")
    ledger2, checker2 = make()
    ledger2.fence_granted(8, KEY_4, "p0")
    ledger2.fence_finished(8, KEY_4)
    checker2.on_deleted(KEY_4, "shard1")
    assert checker.violations == checker2.violations == []


def test_deleting_a_key_outside_the_layout_is_a_violation() -> None:
    """Junk under the root (or outside it) is never deleted."""
    _, checker = make()
    checker.on_deleted(JUNK, "shard0")
    assert kinds(checker) == [ViolationKind.DELETED_OUTSIDE_LAYOUT]


def test_fencing_or_committing_a_deleted_object_is_a_violation() -> None:
    """A fence granted, or an entry committed, for an object already gone loses data."""
    _, checker = make()
    checker.on_fence_granted(KEY_4, "p0", exists=False)
    checker.on_committed(KEY_4, "p0", 3, exists=False)
    checker.on_fence_granted(KEY_6, "p0", exists=True)
    assert kinds(checker) == [ViolationKind.FENCED_DELETED, ViolationKind.FENCED_DELETED]


def test_a_published_watermark_must_not_decrease() -> None:
    """M(p) going down between two reads is a violation."""
    _, checker = make()
    checker.check_watermarks({"p0": 3}, safe_epoch=3, cluster_epoch=5)
    checker.check_watermarks({"p0": 2}, safe_epoch=2, cluster_epoch=5)
    assert kinds(checker) == [ViolationKind.WATERMARK_DECREASED]


def test_global_m_above_the_cluster_epoch_is_a_violation() -> None:
    """M must stay <= cluster epoch - 1."""
    _, checker = make()
    checker.check_watermarks({}, safe_epoch=5, cluster_epoch=5)
    assert kinds(checker) == [ViolationKind.WATERMARK_ABOVE_EPOCH]


@pytest.mark.parametrize(("watermark", "unsafe"), [(3, False), (4, True), (9, True)])
def test_a_partition_watermark_must_not_cover_its_own_protected_data(
    watermark: int, unsafe: bool
) -> None:
    """Published M(p) >= the epoch of an object p still references is unsafe, deletes or not."""
    ledger, checker = make()
    ledger.committed(KEY_4, "p0", 0)
    checker.check_watermarks({"p0": watermark, "p1": 9}, safe_epoch=None, cluster_epoch=10)
    assert kinds(checker) == ([ViolationKind.UNSAFE_WATERMARK] if unsafe else [])


def test_a_global_m_covering_protected_data_is_a_violation() -> None:
    """The M a sweeper is about to use must stay below every protected object."""
    ledger, checker = make()
    ledger.fence_granted(1, KEY_6, "p1")
    checker.check_safe_epoch(5, "M read by shard0")
    assert checker.violations == []
    checker.check_safe_epoch(6, "M read by shard0")
    assert kinds(checker) == [ViolationKind.UNSAFE_WATERMARK]


def test_liveness_garbage_left_and_pinned_m_are_violations() -> None:
    """After the tail, garbage at or below M must be gone and M must follow the epoch."""
    _, checker = make()
    checker.check_final(5, cluster_epoch=10, present=[KEY_4, KEY_6, JUNK])
    assert kinds(checker) == [ViolationKind.M_PINNED, ViolationKind.GARBAGE_LEFT]
    assert KEY_4 in checker.violations[1].detail
    assert KEY_6 not in checker.violations[1].detail


def test_liveness_holds_when_only_live_objects_and_junk_remain() -> None:
    """Objects above M and unparsable keys may stay."""
    _, checker = make()
    checker.check_final(5, cluster_epoch=7, present=[KEY_6, JUNK])
    assert checker.violations == []


def test_a_stuck_tail_and_an_undefined_final_m_are_violations() -> None:
    """The tail must come to rest with M defined."""
    _, checker = make()
    checker.check_final(None, cluster_epoch=7, present=[])
    checker.check_final(6, cluster_epoch=7, present=[], stuck="sweeping did not finish")
    assert kinds(checker) == [ViolationKind.TAIL_STUCK, ViolationKind.TAIL_STUCK]


def told() -> tuple[SimLedger, Checker]:
    """A `SimLedger` with p0's entry 0 naming KEY_4 and entry 1 naming KEY_6."""
    ledger = SimLedger(lambda _fence: True)
    ledger.partition_created("p0")
    ledger.uploaded(KEY_4, 4)
    ledger.uploaded(KEY_6, 6)
    ledger.committed(KEY_4, "p0", 0)
    ledger.committed(KEY_6, "p0", 1)
    return ledger, Checker(ledger)


def test_a_watermark_misled_by_a_false_report_is_an_observation_not_a_violation() -> None:
    """p0's reconciler reports entry 0 lifted, but it is not: M(p0) = 5 covers KEY_4
    because of the reconciler, which the checker notes (misled); KEY_6 (entry 1, not
    reported) is still judged as before."""
    ledger, checker = told()
    ledger.claimed("p0", 0)
    checker.check_watermarks({"p0": 5}, 5, 7)
    assert checker.violations == []
    assert checker.misled_count == 1
    assert "covers 'level_zero/data/001/000000000000000004/a'" in checker.misled[0]
    checker.check_watermarks({"p0": 6}, 6, 7)
    assert kinds(checker) == [ViolationKind.UNSAFE_WATERMARK, ViolationKind.UNSAFE_WATERMARK]
    assert all(KEY_6 in v.detail for v in checker.violations)


def test_deleting_an_object_a_reconciler_only_claimed_is_still_a_loss() -> None:
    """The truth decides deletions: KEY_4's entry was reported, not lifted."""
    ledger, checker = told()
    ledger.claimed("p0", 0)
    checker.on_deleted(KEY_4, "shard0")
    assert kinds(checker) == [ViolationKind.DELETED_REFERENCED]
    assert "p0@0 (reconciled -1)" in checker.violations[0].detail


def test_without_a_false_report_the_told_ledger_changes_nothing() -> None:
    """A true report moves both ledgers: the watermark is judged as with a plain ledger."""
    ledger, checker = told()
    ledger.reconciled("p0", 0)
    checker.check_watermarks({"p0": 5}, 5, 7)
    checker.check_safe_epoch(6, "M read by shard0")
    assert kinds(checker) == [ViolationKind.UNSAFE_WATERMARK]
    assert checker.misled_count == 0
    assert not ledger.misled
