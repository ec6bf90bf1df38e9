"""Same seed, same run: the trace digest is identical; different seeds differ."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from l0lab.sim.runner import run_seed
from l0lab.sim.variants import CORRECT, VARIANTS
from l0lab.sim.vtime import VirtualClock, VirtualTimeLoop, VirtualTimeStall
from l0lab.sim.world import SimConfig

ROOT = Path(__file__).resolve().parents[3]
STEPS = 250


def test_the_same_seed_gives_the_same_trace() -> None:
    """Two runs of one seed produce the same events, digest and verdict."""
    config = SimConfig(steps=STEPS, variant=CORRECT)
    first, second = run_seed(7, config), run_seed(7, config)
    assert first.trace_digest == second.trace_digest
    assert first.events == second.events > 100
    assert first.trace_tail == second.trace_tail
    assert first.violations == second.violations


def test_a_failing_seed_fails_the_same_way_every_time() -> None:
    """A broken variant's violation is reproduced exactly: same step, same detail."""
    config = SimConfig(steps=STEPS, variant=VARIANTS["eager-floor"])
    first, second = run_seed(1, config), run_seed(1, config)
    assert first.violations
    assert first.violations == second.violations
    assert first.trace_digest == second.trace_digest


def test_different_seeds_give_different_runs() -> None:
    """Ten seeds, ten different traces."""
    config = SimConfig(steps=80, variant=CORRECT)
    digests = {run_seed(seed, config).trace_digest for seed in range(10)}
    assert len(digests) == 10


@pytest.mark.parametrize("hash_seed", ["1", "2"])
def test_the_trace_does_not_depend_on_string_hashing(hash_seed: str) -> None:
    """Another process with another PYTHONHASHSEED replays the seed to the same digest."""
    here = run_seed(3, SimConfig(steps=120, variant=CORRECT)).trace_digest
    code = (
        "from l0lab.sim.runner import run_seed; from l0lab.sim.variants import CORRECT;"
        "from l0lab.sim.world import SimConfig;"
        "print(run_seed(3, SimConfig(steps=120, variant=CORRECT)).trace_digest)"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.strip() == here


def test_virtual_timers_fire_only_when_the_clock_moves() -> None:
    """A 5 s sleep completes after the simulator advances the clock 5 s, not before."""
    clock = VirtualClock(100.0)
    loop = VirtualTimeLoop(clock)
    woke: list[float] = []

    async def sleeper() -> None:
        await asyncio.sleep(5)
        woke.append(clock.now)

    async def driver() -> None:
        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)  # the sleeper starts its 5 s sleep at t=100
        for _ in range(4):
            clock.advance(1.0)
            await asyncio.sleep(0)
        assert not task.done()
        clock.advance(1.0)
        for _ in range(3):
            await asyncio.sleep(0)
        assert task.done()

    try:
        loop.run_until_complete(driver())
    finally:
        loop.close()
    assert woke == [105.0]


def test_a_driver_waiting_for_virtual_time_is_reported_not_hung() -> None:
    """Awaiting a timer from the driver itself raises VirtualTimeStall instead of spinning."""
    loop = VirtualTimeLoop(VirtualClock())
    try:
        with pytest.raises(VirtualTimeStall):
            loop.run_until_complete(asyncio.sleep(1))
    finally:
        loop.close()
