"""Seeds of the simulation over every core of the machine: the same seeds and the same
verdicts as one `run_seeds` call, in a fraction of the wall time (the long CI runs)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from l0lab.sim.runner import Report, run_seeds
from l0lab.sim.variants import CORRECT
from l0lab.sim.world import DEFAULT_STEPS


def _seed_range(first: int, count: int) -> Report:
    return run_seeds(first, count, steps=DEFAULT_STEPS, variant=CORRECT)


def run_correct_seeds(first: int, count: int) -> Report:
    """Seeds `first` .. `first + count - 1` of the real code, one contiguous share per
    core (fresh processes: nothing of the test session is inherited). Under pytest-xdist
    the cores are shared out among its workers, which run other tests meanwhile."""
    cores = len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    workers = max(1, min(cores, count))
    shares = [count // workers + (1 if n < count % workers else 0) for n in range(workers)]
    firsts = [first + sum(shares[:n]) for n in range(workers)]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        parts = list(pool.map(_seed_range, firsts, shares))
    report = Report(variant=CORRECT.name, steps=DEFAULT_STEPS)
    for part in parts:
        report.seeds += part.seeds
        report.failed += part.failed
        report.duration_s = max(report.duration_s, part.duration_s)
    return report
