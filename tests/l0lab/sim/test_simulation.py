"""The everyday tier: the whole system, simulated over 100 seeds with faults, keeps every
invariant (the deep tier's soak runs seeds 100-199, 1000-1149 and a random range).

The faults include publisher crashes, clean stops and failovers at any moment, also
between a commit and its publish; new owners are told the log's end offset, or not
(then only a sealed record or their first commit tells them).
"""

from __future__ import annotations

import json

import pytest

from gcd.cli.main import main
from l0lab.sim.runner import Report, run_seeds
from l0lab.sim.variants import CORRECT
from l0lab.sim.world import DEFAULT_STEPS
from tests.l0lab.sim.cores import run_correct_seeds

CI_SEEDS = 100
"""Seeds 0..99 in the everyday tier; 100..199 and more run in the deep tier's soak."""


def explain(report: Report) -> str:
    """The first failing seeds, with their reproduction commands and traces."""
    return "\n\n".join(result.describe() for result in report.failed[:3])


@pytest.mark.timeout(900)  # ~100 s of CPU on one core; more when the machine is shared
def test_the_real_code_keeps_every_invariant_over_100_seeds() -> None:
    """100 seeds x DEFAULT_STEPS steps with faults: no safety or liveness violation."""
    report = run_correct_seeds(0, CI_SEEDS)  # one share of the seeds per core
    assert report.seeds == CI_SEEDS
    assert report.ok, explain(report)


def test_gcd_simulate_prints_a_versioned_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    """`gcd simulate --json` exits 0 on a clean run and prints the documented fields."""
    code = main(["simulate", "--seeds", "3", "--steps", "40", "--variant", "correct", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["version"] == 1
    assert document["seeds"] == 3
    assert document["steps"] == 40
    assert document["violations"] == []
    assert document["duration_s"] >= 0
    assert document["seeds_per_s"] > 0


def test_gcd_simulate_exits_1_with_the_seed_step_and_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A violation exits 1 and prints the seed, the step, the replay command and the events."""
    code = main(
        [
            "simulate",
            "--seeds",
            "5",
            "--steps",
            "250",
            "--variant",
            "eager-floor",
            "--stop-at-first",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "unsafe_watermark at step" in out
    assert "reproduce: gcd simulate --seed" in out
    assert "--variant eager-floor" in out
    assert "last events:" in out


@pytest.mark.parametrize("seed", [23132, 21896])
def test_a_clean_stop_that_ends_in_the_quiescent_tail_is_waited_for(seed: int) -> None:
    """Soak finding (seeds 20000-29999, 41 seeds): a clean stop started at the end of the
    chaos phase finished in the tail, after the leaders had reported their log ends, and
    its partitions' new owner never learnt one (M pinned). The tail now waits for it."""
    report = run_seeds(seed, 1, steps=DEFAULT_STEPS, variant=CORRECT)
    assert report.ok, explain(report)
