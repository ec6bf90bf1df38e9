"""The simulation of the undo window (`l0lab.sim.undo`): a wrong M(p) and a restore in the
middle of a run lose nothing, and a restore without the pause is caught."""

from __future__ import annotations

from l0lab.sim.undo import run_undo_seed

SEEDS = range(16)


def test_a_restore_in_the_middle_of_a_run_loses_nothing() -> None:
    """Every seed: no needed object loses its bytes, every restored object is current
    with its own bytes through the paused rounds and after, no delete is sent while
    paused, and the tail frees every garbage version and l0gc marker (never a writer's
    own marker); the seeds do hide and restore objects and do reclaim."""
    results = [run_undo_seed(seed) for seed in SEEDS]
    assert [(r.seed, r.violations) for r in results if not r.ok] == []
    assert sum(r.hidden_by_bug > 0 for r in results) >= 3
    assert sum(r.restored for r in results) >= sum(r.hidden_by_bug for r in results)
    assert all(r.reclaimed > 0 for r in results)


def test_a_restore_without_the_pause_is_caught() -> None:
    """Restoring while GC runs (what `gcd restore` refuses): the next rounds hide the
    restored objects again, and the checks say so."""
    caught = [run_undo_seed(seed, broken_restore=True) for seed in SEEDS]
    found = [r for r in caught if any("not current" in v for v in r.violations)]
    assert len(found) >= 3
    assert all(r.hidden_by_bug > 0 for r in found)


def test_a_seed_plays_the_same_twice() -> None:
    """Same seed, same story."""
    assert run_undo_seed(4).events == run_undo_seed(4).events
