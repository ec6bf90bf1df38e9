"""Issue 54 in the simulation: a reconciler that reports an entry lifted that it has not
lifted misleads M(p) past a live object; the sweepers' references (the second opinion)
keep it, and the `no-cross-check` variant, which ignores them, loses it."""

from __future__ import annotations

import dataclasses

import pytest

from gcd.cli.main import main
from l0lab.sim.checks import SAFETY, ViolationKind
from l0lab.sim.explore import explore, replay
from l0lab.sim.moves import Scope
from l0lab.sim.runner import run_seeds
from l0lab.sim.suite import stage_of
from l0lab.sim.variants import CORRECT, VARIANTS
from l0lab.sim.world import DEFAULT_STEPS

NO_CROSS_CHECK = VARIANTS["no-cross-check"]
PATH = (
    "tick",
    "write w0 p0 1",
    "commit w0",
    "overreport p0",
    "publish pub0",
    "tick",
    "publish pub0",
    "sweep",
)
"""The shortest counterexample of `no-cross-check` (the suite's ``overreport`` stage):
p0's only entry (epoch 1) is reported lifted but is not; two idle advances raise M(p)
to 1; the sweep."""
SEEDS, STEPS = 6, 300
"""The everyday tier's random runs under the reconciler bug (~2 s of CPU a seed)."""


def test_the_counterexample_loses_a_live_object_without_the_cross_check() -> None:
    """Replayed on `no-cross-check`, the path ends with the live object deleted."""
    scope = stage_of("no-cross-check")[0].scope
    assert scope is not None
    run = replay(scope, NO_CROSS_CHECK, PATH)
    assert [v.kind for v in run.violations] == [ViolationKind.DELETED_REFERENCED]
    assert "referenced by p0@0 (reconciled -1)" in run.violations[0].detail
    assert any("BUG p0's reconciler reports 0 lifted, lifted -1" in line for line in run.trace)


def test_the_real_sweeper_keeps_the_referenced_object_on_the_same_path() -> None:
    """The real code on that path: M(p) = 1 covers the object (the publisher was misled,
    not wrong), the sweeper finds its key still referenced, deletes nothing."""
    scope = stage_of("no-cross-check")[0].scope
    assert scope is not None
    run = replay(scope, CORRECT, PATH)
    assert run.violations == []
    assert any("pub0 published {'p0': 1}" in line for line in run.trace)
    swept = run.trace[run.trace.index("   8 > sweep") :]
    assert any("shard0 conflict: 1 referenced keys at or below M" in line for line in swept)
    assert any("deleted=0" in line for line in swept), swept
    assert not any(" deleted 000/" in line for line in swept), swept


def test_without_the_reconciler_bug_no_cross_check_loses_nothing() -> None:
    """The variant breaks only the second opinion: the same path without the false
    report deletes nothing live (M(p) stays below the unreconciled entry)."""
    scope = stage_of("no-cross-check")[0].scope
    assert scope is not None
    honest = tuple(move for move in PATH if not move.startswith("overreport"))
    run = replay(scope, NO_CROSS_CHECK, honest)
    assert run.violations == []
    assert not any("deleted 000/" in line for line in run.trace)


def test_the_real_code_keeps_every_invariant_under_the_reconciler_bug() -> None:
    """Random seeds with the reconciler bug: watermarks are misled past live objects in
    half of them, the sweepers find the conflict in some, and no invariant breaks
    (liveness too: once the reconciler has really lifted the entry, its key is released
    and the rounds delete again)."""
    results: list[tuple[int, int]] = []
    report = run_seeds(
        0,
        SEEDS,
        steps=STEPS,
        variant=CORRECT,
        reconciler_bug=True,
        on_result=lambda result: results.append((result.misled, result.conflicts)),
    )
    assert report.ok, "\n\n".join(result.describe() for result in report.failed[:3])
    assert sum(misled > 0 for misled, _ in results) >= SEEDS // 2, results
    assert sum(conflicts > 0 for _, conflicts in results) >= 2, results


def test_no_cross_check_loses_a_live_object_under_the_reconciler_bug() -> None:
    """The same seeds without the second opinion: a live object is deleted, and the
    replay command names the bug's flag."""
    report = run_seeds(
        0, SEEDS, steps=STEPS, variant=NO_CROSS_CHECK, reconciler_bug=True, stop_at_first=True
    )
    assert report.failed
    caught = report.failed[0]
    assert caught.violations[0].kind is ViolationKind.DELETED_REFERENCED, caught.describe()
    assert "--variant no-cross-check" in caught.reproduce()
    assert "--reconciler-bug" in caught.reproduce()


GAP = (
    "issue 54 gap, found here: an owner that adopts a partition (failover, crash) restores "
    "the references of the last published record; entries committed after that publish "
    "keep their place in the log (catch_up holds the floor) but lose their keys, so a "
    "reconciler that then reports past them misleads M(p) with no reference to refuse"
)
LOST_REFERENCE = (
    "write w0 p0 1",
    "commit w0",
    "failover p0 pub1",
    "overreport p0",
    "tick",
    "publish pub1",
    "tick",
    "publish pub1",
    "sweep",
)
"""The gap's shortest path found by hand: the commit is never published by pub0; pub1
adopts with the log end (0) but without the entry's key."""


def test_a_reference_committed_after_the_last_publish_survives_a_failover() -> None:
    """The real code on `LOST_REFERENCE` keeps the object (today it deletes it: the
    xfail documents the gap; fixing it makes this pass, and strict makes that visible)."""
    scope = Scope(
        partitions=1,
        writers=1,
        publishers=2,
        faults=2,
        depth=9,
        fault_kinds=frozenset({"overreport", "failover"}),
    )
    run = replay(scope, CORRECT, LOST_REFERENCE)
    assert run.violations == []


@pytest.mark.deep
@pytest.mark.timeout(1800)  # ~3 s of CPU a seed
def test_more_seeds_of_the_real_code_under_the_reconciler_bug() -> None:
    """60 seeds x DEFAULT_STEPS with the reconciler bug: no violation of any kind."""
    report = run_seeds(100, 60, steps=DEFAULT_STEPS, variant=CORRECT, reconciler_bug=True)
    assert report.ok, "\n\n".join(result.describe() for result in report.failed[:3])


@pytest.mark.deep
@pytest.mark.timeout(3600)
def test_two_writers_and_a_crash_keep_the_real_code_safe_under_the_reconciler_bug() -> None:
    """A wider scope than the suite's stage: two writers, a crash or a failover besides
    the false report (restored references after a new owner adopts, and those a log end
    brings), depth 6: 16,664 states (16,598 before a log end brought its entries' keys),
    ~4 minutes of CPU (depth 7: ~60,000)."""
    wider = Scope(
        partitions=1,
        writers=2,
        publishers=2,
        faults=2,
        depth=6,
        fault_kinds=frozenset({"overreport", "crash", "failover"}),
    )
    result = explore(wider, CORRECT, liveness=False)
    assert result.ok, result.counterexample
    assert result.states == 16664


def test_gcd_simulate_turns_the_bug_on_for_the_variant_that_needs_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--variant no-cross-check` alone runs with the reconciler bug (its reproduce command
    says so); `--reconciler-bug` belongs to random seeds, not to `--exhaustive`."""
    args = ["simulate", "--seeds", "2", "--steps", str(STEPS), "--stop-at-first"]
    assert main([*args, "--variant", "no-cross-check"]) == 1
    out = capsys.readouterr().out
    assert "deleted_referenced at step" in out
    assert "--variant no-cross-check --reconciler-bug" in out
    assert main(["simulate", "--exhaustive", "--reconciler-bug"]) == 2
    assert "--reconciler-bug belong to random seeds" in capsys.readouterr().err


def test_the_second_opinion_also_stops_a_new_owner_that_forgets_the_log_end() -> None:
    """Bug 3 (`forgetful-adopt`, run without the cross-check to show it alone) with the
    cross-check on: the log end brought the forgotten entries' keys, so the sweepers find
    them referenced at or below the misled M and delete nothing: the seed where the
    variant alone breaks safety ends with GC paused and its garbage left instead."""
    alone = VARIANTS["forgetful-adopt"]
    assert alone.cross_check is False
    checked = dataclasses.replace(alone, cross_check=True)
    lost = run_seeds(0, 40, steps=DEFAULT_STEPS, variant=alone, stop_at_first=True)
    assert lost.failed
    seed = lost.failed[0].seed
    assert lost.failed[0].violations[0].kind in SAFETY, lost.failed[0].describe()
    conflicts: list[int] = []
    kept = run_seeds(
        seed,
        1,
        steps=DEFAULT_STEPS,
        variant=checked,
        on_result=lambda result: conflicts.append(result.conflicts),
    )
    found = [v.kind for result in kept.failed for v in result.violations]
    assert found == [ViolationKind.GARBAGE_LEFT], kept.failed[0].describe()  # GC paused
    assert conflicts[0] > 0
