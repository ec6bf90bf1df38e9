"""Soak: many more seeds of the full simulation (the deep tier, `make test-deep`).

Two runs: a fixed range beyond the everyday tier's 200 seeds, and a range starting at a
fresh random seed each time, which prints its first seed and, on a failure, the command
that replays each failing seed (`gcd simulate --seed S`). A seed that ever found a bug
becomes a fixed case of the everyday tier (tests/l0lab/sim/test_simulation.py)."""

from __future__ import annotations

import random

import pytest

from tests.l0lab.sim.cores import run_correct_seeds

# ~1 s of CPU a seed, and under pytest-xdist the soak gets one core: 150 seeds (beyond the
# 200 of test_simulation) keep it near 2.5 minutes (500 took CI past its 10-minute
# timeout); the 10,000-seed soak is run by hand (`gcd simulate --seeds 10000 --seed 1000`).
pytestmark = [pytest.mark.deep, pytest.mark.slow, pytest.mark.timeout(600)]

SOAK_SEEDS = 150
HUNT_SEEDS = 100


@pytest.mark.parametrize(("first", "count"), [(100, 100), (1000, SOAK_SEEDS)])
def test_more_seeds_keep_every_invariant(first: int, count: int) -> None:
    """Seeds 100..199 (beyond the everyday tier's 100) and 1000..1149 of the real code
    break no invariant."""
    report = run_correct_seeds(first, count)
    assert report.seeds == count
    assert report.ok, "\n\n".join(result.describe() for result in report.failed[:3])


def test_a_random_range_of_seeds_keeps_every_invariant() -> None:
    """HUNT_SEEDS seeds from a random first seed (printed, with the range's replay)."""
    first = random.SystemRandom().randrange(10**6, 2**31 - HUNT_SEEDS)
    print(f"simulation hunt: gcd simulate --seed {first} --seeds {HUNT_SEEDS}")
    report = run_correct_seeds(first, HUNT_SEEDS)
    assert report.seeds == HUNT_SEEDS
    assert report.ok, (
        f"first seed {first} (range: gcd simulate --seed {first} --seeds {HUNT_SEEDS})\n\n"
        + "\n\n".join(result.describe() for result in report.failed[:3])
    )
