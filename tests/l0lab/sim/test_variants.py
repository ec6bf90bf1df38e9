"""Teeth: every deliberately broken variant is caught by the simulation within a bound."""

from __future__ import annotations

import pytest

from l0lab.sim.checks import SAFETY
from l0lab.sim.runner import run_seeds
from l0lab.sim.variants import BROKEN, RANDOM, VARIANTS
from l0lab.sim.world import DEFAULT_STEPS

SEED_BOUND = 120
"""Each variant must be caught by one of seeds 0..SEED_BOUND-1. Today every variant but one
falls within the first 26; applied-max-window first at seed 110 (it was 46 before the
publishers watched their records and reconcilers reported idle partitions: the random
trajectories moved). That spread is why the exhaustive search exists (`gcd simulate
--exhaustive`, tests/l0lab/sim/test_explore.py)."""


def test_there_are_at_least_five_broken_variants_and_the_real_code() -> None:
    """Five distinct bugs, each on its own, besides `correct` (the real code)."""
    assert len(BROKEN) >= 5
    assert not VARIANTS["correct"].broken
    assert set(VARIANTS) == {"correct", *BROKEN}


@pytest.mark.timeout(900)  # CPU-bound: up to 120 seeds (~1 s of CPU each) on a shared core
@pytest.mark.parametrize("name", RANDOM)
def test_each_broken_variant_is_caught_within_a_bounded_number_of_seeds(name: str) -> None:
    """The simulation finds a safety violation for the variant within SEED_BOUND seeds
    (under the reconciler bug for the variants that need it: no-cross-check)."""
    variant = VARIANTS[name]
    report = run_seeds(
        0,
        SEED_BOUND,
        steps=DEFAULT_STEPS,
        variant=variant,
        stop_at_first=True,
        reconciler_bug=variant.reconciler_bug,
    )
    assert report.failed, f"variant {name!r} survived {SEED_BOUND} seeds"
    caught = report.failed[0]
    assert caught.violations[0].kind in SAFETY, caught.describe()
    assert f"--variant {name}" in caught.reproduce()
