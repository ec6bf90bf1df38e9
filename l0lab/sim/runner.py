"""Running seeds: one `World` per seed on its own virtual-time loop, and the report.

`run_seed` is the unit: build a fresh loop and world, run it, and return what was
found (violations with the trace tail that led to them) and the digest of the whole
trace (same seed, same digest). `run_seeds` runs a range of seeds and summarises them
in a `Report`, whose `to_dict` is the `gcd simulate --json` document.

The simulated components log through structlog like in production; while a seed runs
their logs are dropped (`quiet_logs`), since thousands of simulated events per second
would drown whatever the caller logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog

from l0lab.sim.checks import Violation, ViolationKind
from l0lab.sim.play import play
from l0lab.sim.variants import CORRECT, Variant
from l0lab.sim.vtime import VirtualClock, VirtualTimeLoop
from l0lab.sim.world import START_TIME, SimConfig, World

__all__ = ["REPORT_VERSION", "Report", "SeedResult", "quiet_logs", "run_seed", "run_seeds"]

REPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class SeedResult:
    """What one seed's run found."""

    seed: int
    variant: str
    steps: int
    violations: tuple[Violation, ...]
    trace_digest: str
    trace_tail: tuple[str, ...]
    events: int
    flags: str = ""
    """Extra `gcd simulate` flags the run used (e.g. " --keep-going")."""
    misled: int = 0
    """Checks at which a watermark covered a live object because a reconciler reported
    it lifted (the reconciler bug; `Checker.misled`)."""
    conflicts: int = 0
    """Sweeper rounds that found a referenced key at or below M and deleted nothing."""

    @property
    def ok(self) -> bool:
        """True when no invariant was broken."""
        return not self.violations

    def reproduce(self) -> str:
        """The command that replays this seed."""
        variant = "" if self.variant == CORRECT.name else f" --variant {self.variant}"
        return f"gcd simulate --seed {self.seed} --steps {self.steps}{variant}{self.flags}"

    def describe(self, *, full: bool = False) -> str:
        """The first violation (if any) and the events before it; `full`: every kept event."""
        if not self.violations:
            head = [f"seed {self.seed}: ok ({self.events} events, trace {self.trace_digest[:16]})"]
        else:
            first = self.violations[0]
            head = [
                f"seed {self.seed}: {first.kind.value} at step {first.step}: {first.detail}",
                *(
                    f"  also: {v.kind.value} at step {v.step}: {v.detail}"
                    for v in self.violations[1:4]
                ),
                f"  reproduce: {self.reproduce()}",
            ]
        if not full and not self.violations:
            return head[0]
        label = "events" if full else "last events"
        return "\n".join([*head, f"  {label}:", *(f"    {line}" for line in self.trace_tail)])


@dataclass(slots=True)
class Report:
    """The outcome of a range of seeds."""

    variant: str
    steps: int
    seeds: int = 0
    failed: list[SeedResult] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every seed passed."""
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document."""
        return {
            "version": REPORT_VERSION,
            "variant": self.variant,
            "seeds": self.seeds,
            "steps": self.steps,
            "violations": [
                {
                    "seed": result.seed,
                    **violation.to_dict(),
                    "reproduce": result.reproduce(),
                    "trace": list(result.trace_tail),
                }
                for result in self.failed
                for violation in result.violations[:1]
            ],
            "failed_seeds": len(self.failed),
            "duration_s": round(self.duration_s, 3),
            "seeds_per_s": round(self.seeds / self.duration_s, 2) if self.duration_s else None,
        }


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Drop structlog output while the simulated components run; restore it after."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[],
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**saved)


def run_seed(seed: int, config: SimConfig | None = None) -> SeedResult:
    """Run one seed to the end (or its first violation) on a fresh virtual-time loop."""
    config = config or SimConfig()
    clock = VirtualClock(START_TIME)
    loop = VirtualTimeLoop(clock)
    world = World(seed, config, loop, clock)
    try:
        with quiet_logs():
            loop.run_until_complete(play(world))
    except Exception as exc:  # noqa: BLE001 - any escape is a finding, reported with its seed
        where = traceback.extract_tb(exc.__traceback__)[-1]
        world.checker.crash(f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno})")
        world.event(f"CRASH {type(exc).__name__}: {exc}")
        _cancel_leftovers(loop)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return SeedResult(
        seed=seed,
        variant=config.variant.name,
        steps=config.steps,
        violations=tuple(world.violations),
        trace_digest=world.trace.digest(),
        trace_tail=tuple(world.trace.tail),
        events=world.trace.count,
        flags=_flags(config),
        misled=world.checker.misled_count,
        conflicts=world.checker.conflict_count,
    )


def _flags(config: SimConfig) -> str:
    flags = "" if config.stop_on_violation else " --keep-going"
    return flags + (" --reconciler-bug" if config.reconciler_bug else "")


def _cancel_leftovers(loop: VirtualTimeLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def run_seeds(
    first: int,
    count: int,
    *,
    steps: int,
    variant: Variant = CORRECT,
    stop_at_first: bool = False,
    on_result: Callable[[SeedResult], None] | None = None,
    **config: Any,
) -> Report:
    """Run seeds `first` .. `first + count - 1`; stop early if asked to."""
    sim = SimConfig(steps=steps, variant=variant, **config)
    report = Report(variant=variant.name, steps=steps)
    started = time.perf_counter()
    for seed in range(first, first + count):
        result = run_seed(seed, sim)
        report.seeds += 1
        if not result.ok:
            report.failed.append(result)
        if on_result is not None:
            on_result(result)
        if stop_at_first and not result.ok:
            break
    report.duration_s = time.perf_counter() - started
    return report


def first_kind(result: SeedResult) -> ViolationKind | None:
    """The kind of the first violation, None when the seed passed."""
    return result.violations[0].kind if result.violations else None
