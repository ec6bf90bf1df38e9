"""Soak: many more seeds of the full simulation (slow; CI runs it, locally -m 'not slow')."""

from __future__ import annotations

import pytest

from tests.l0lab.sim.cores import run_correct_seeds

# ~0.2 s a seed on a shared 2-core machine, one share of the seeds per core: 500 seeds
# keep CI within its budget; the 10,000-seed soak is run by hand (`gcd simulate --seeds
# 10000`).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOAK_SEEDS = 500


def test_five_hundred_more_seeds_keep_every_invariant() -> None:
    """Seeds 1000..1499 (beyond the CI range) of the real code break no invariant."""
    report = run_correct_seeds(1000, SOAK_SEEDS)
    assert report.seeds == SOAK_SEEDS
    assert report.ok, "\n\n".join(result.describe() for result in report.failed[:3])
