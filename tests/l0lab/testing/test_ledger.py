"""The ground-truth ledger shared by the simulation and the demo (its protection rules
are tested through the simulation's checks, tests/l0lab/sim/test_checks.py)."""

from __future__ import annotations

import pytest

from l0lab.testing.ledger import Ledger, ObjectState


def test_committed_objects_are_live_until_reconciled() -> None:
    """A committed object is referenced; reconciling its offset makes it garbage."""
    ledger = Ledger()
    ledger.uploaded("k0", 5, "p")
    ledger.uploaded("k1", 6, "p")
    ledger.committed("k0", "p", 0)
    ledger.committed("k1", "p", 1)
    assert ledger.referenced() == ["k0", "k1"]
    assert ledger.reconciled("p", 0) == 1
    assert ledger.state("k0") is ObjectState.RECONCILED
    assert ledger.referenced() == ["k1"]
    counts = ledger.counts()
    assert (counts.written, counts.live, counts.garbage, counts.deleted) == (2, 1, 1, 0)


def test_deleting_a_referenced_object_is_a_loss() -> None:
    """The sweeper deleting a referenced object is recorded as live_lost; garbage is not."""
    ledger = Ledger()
    for key, offset in (("dead", 0), ("live", 1)):
        ledger.uploaded(key, 3, "p")
        ledger.committed(key, "p", offset)
    ledger.reconciled("p", 0)
    losses = ledger.deleted(["dead", "live", "never-written"])
    assert [loss.key for loss in losses] == ["live"]
    assert losses[0].how == "deleted while referenced"
    assert ledger.counts().live_lost == 1
    assert ledger.unknown_deleted == 1


def test_committing_an_already_deleted_upload_is_a_loss() -> None:
    """An upload deleted before its fence, then committed, is a loss too."""
    ledger = Ledger()
    ledger.uploaded("k", 2, "p")
    assert ledger.deleted(["k"]) == []
    ledger.committed("k", "p", 0)
    assert [loss.how for loss in ledger.losses] == ["committed after deletion"]


def test_orphans_are_garbage_even_when_deleted_first() -> None:
    """A refused fence makes the upload an orphan; deleting it is no loss."""
    ledger = Ledger()
    ledger.uploaded("a", 1, "p")
    ledger.uploaded("b", 1, "p")
    ledger.orphaned("a")
    ledger.deleted(["b"])
    ledger.orphaned("b")
    assert ledger.state("a") is ObjectState.ORPHANED
    assert ledger.is_garbage("b")
    assert (ledger.counts().orphans, ledger.counts().live_lost) == (2, 0)
    assert ledger.max_epoch == 1


def test_a_key_cannot_be_written_twice_nor_committed_out_of_order() -> None:
    """Keys are unique and a partition's commits come in offset order."""
    ledger = Ledger()
    ledger.uploaded("k", 1, "p")
    with pytest.raises(ValueError, match="already in the ledger"):
        ledger.uploaded("k", 2, "p")
    ledger.uploaded("j", 1, "p")
    ledger.committed("k", "p", 5)
    with pytest.raises(ValueError, match="offset 4"):
        ledger.committed("j", "p", 4)


def test_an_object_stays_referenced_until_every_partition_reconciles_it() -> None:
    """A multi-partition object is garbage only once each of its references is lifted."""
    ledger = Ledger()
    ledger.uploaded("k", 4)
    ledger.committed("k", "p0", 0)
    ledger.committed("k", "p1", 7)
    assert ledger.reconciled("p0", 0) == 0
    assert ledger.state("k") is ObjectState.REFERENCED
    assert ledger.deleted(["k"])[0].how == "deleted while referenced"
    ledger2 = Ledger()
    ledger2.uploaded("k", 4)
    ledger2.committed("k", "p0", 0)
    ledger2.committed("k", "p1", 7)
    ledger2.reconciled("p0", 0)
    assert ledger2.reconciled("p1", 7) == 1
    assert ledger2.state("k") is ObjectState.RECONCILED
    assert ledger2.deleted(["k"]) == []


def test_a_commit_below_the_reconciled_offset_is_garbage_at_once() -> None:
    """An entry the reconciler has already lifted past never protects its object."""
    ledger = Ledger()
    ledger.reconciled("p", 10)
    ledger.uploaded("k", 1, "p")
    ledger.committed("k", "p", 3)
    assert ledger.state("k") is ObjectState.RECONCILED
    assert ledger.protection("k") is None
    assert ledger.counts().garbage == 1


def test_an_orphan_cannot_be_committed() -> None:
    """A refused fence is final: committing its object is refused loudly."""
    ledger = Ledger()
    ledger.uploaded("k", 1, "p")
    ledger.orphaned("k")
    with pytest.raises(ValueError, match="refused"):
        ledger.committed("k", "p", 0)
