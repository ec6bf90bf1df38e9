"""The simulated world: one seeded run of writers, publishers, reconcilers and sweepers.

Theory of operation
-------------------
`World.run` drives everything from one coroutine on a `VirtualTimeLoop`. A run is a
sequence of steps; each step moves virtual time by one second, lets every request
that was waiting for the step through (`Turnstile`), starts the publisher and sweeper
rounds whose (jittered) timers fire, performs ONE randomly chosen action or fault
(`l0lab.sim.actions`, `l0lab.sim.faults`), lets every task run until all are blocked
again (`settle`), and then checks the invariants (`l0lab.sim.checks`). Long
actions span steps as tasks: a writer holding a fence, a fence waiting for a slide, a
sweeper round, an adoption. All randomness comes from one `random.Random(seed)`, and
asyncio schedules deterministically, so the same seed gives the same run, event for
event (the trace digest proves it).

After the chaos phase comes a quiescent tail: faults heal, writers finish and stop,
reconcilers catch up, the epoch ticks while publishers advance idle partitions and
publish, and sweepers run complete rounds. Then the liveness checks run.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from gcd.rules.layout import KeyLayout
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import compute_safe_epoch
from l0gc.errors import InvalidRecord
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.sim.actors import (
    Fault,
    HeldFence,
    PartitionSim,
    PublisherSim,
    ShardSim,
    Turnstile,
    WriterSim,
)
from l0lab.sim.checks import Checker, SimLedger, Violation
from l0lab.sim.variants import CORRECT, Variant
from l0lab.sim.vtime import VirtualClock, VirtualTimeLoop
from l0lab.testing.memory import MemoryObjectStore
from watermark.service.publisher import Publisher

DEFAULT_STEPS = 1000
"""Steps of the faulty phase per seed in CI and by default in `gcd simulate`."""

__all__ = ["DEFAULT_STEPS", "NAMESPACE", "START_TIME", "SimConfig", "Trace", "World"]

NAMESPACE = "/l0gc/sim"
START_TIME = 1_700_000_000.0
_SETTLE_LIMIT = 20_000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What a run does; the seed decides everything else."""

    steps: int = 150
    variant: Variant = CORRECT
    faults: bool = True
    stop_on_violation: bool = True
    tail_limit: int = 800
    trace_keep: int = 30
    """How many of the last events to keep verbatim (all are in the digest)."""
    nested_root: bool = False
    """Put another namespace's claimed root inside ours (`l0lab.sim.actions`); off by
    default, so the seeds of the default runs (and the variants they catch) stay as they are."""
    reconciler_bug: bool = False
    """Reconcilers sometimes report the log's end lifted while they lifted less (issue
    54, `l0lab.sim.actions.overreport`); off by default, for the same reason."""


class Trace:
    """The run's events: a running digest of all of them and the last few verbatim."""

    def __init__(self, keep: int = 30) -> None:
        self._digest = hashlib.sha256()
        self.tail: deque[str] = deque(maxlen=keep)
        self.count = 0

    def add(self, step: int, text: str) -> None:
        """Record one event."""
        line = f"{step:>4} {text}"
        self._digest.update(line.encode() + b"\n")
        self.tail.append(line)
        self.count += 1

    def digest(self) -> str:
        """Hex digest of every event so far."""
        return self._digest.hexdigest()


class World:
    """One seeded simulation run; see the module docstring."""

    def __init__(
        self, seed: int, config: SimConfig, loop: VirtualTimeLoop, clock: VirtualClock
    ) -> None:
        self.seed = seed
        self.config = config
        self.variant = config.variant
        self.loop = loop
        self.clock = clock
        self.rng = random.Random(seed)
        self.kv = MemoryKV(now=clock)
        self.store = WatermarkStore(self.kv, NAMESPACE, wall_clock=clock)
        self.pub_store = self.variant.publisher_store(self.kv, NAMESPACE, wall_clock=clock)
        self.bucket = MemoryObjectStore()
        self.layout = KeyLayout.default()
        self.turnstile = Turnstile()
        self.ledger = SimLedger(self._fence_is_live)
        self.checker = Checker(self.ledger)
        self.trace = Trace(config.trace_keep)
        self.step = 0
        self.cluster_epoch = 0
        self.partitions: dict[str, PartitionSim] = {}
        self.publishers: list[PublisherSim] = []
        self.writers: list[WriterSim] = []
        self.shards: list[ShardSim] = []
        self.grants: dict[int, HeldFence] = {}
        self.stale: list[tuple[int, PublisherSim, str]] = []
        self.active_faults: list[Fault] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self.counters: dict[str, int] = {}
        self._decoded: dict[tuple[str, bytes], int] = {}  # record -> M(p), for the checks
        rng = self.rng
        self.grace_s = float(rng.choice([2, 4, 8]))
        self.hold_ttl_s = float(rng.choice([6, 12, 30]))
        self.fence_timeout_s = float(rng.choice([4, 8, 15]))
        self.fault_rate = rng.choice([0.0, 0.04, 0.08, 0.15]) if config.faults else 0.0
        self.publish_rate = rng.choice([0.1, 0.3, 0.6])
        self.sweep_rate = rng.choice([0.05, 0.15, 0.4])

    # -- plumbing ------------------------------------------------------------------

    def event(self, text: str) -> None:
        """Record an event in the trace."""
        self.trace.add(self.step, text)

    def next_id(self, counter: str) -> int:
        """A fresh number for names and ids (deterministic)."""
        value = self.counters.get(counter, 0)
        self.counters[counter] = value + 1
        return value

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `coro` as a task the world waits for, reaps and cancels at the end."""
        task = self.loop.create_task(coro)
        self._tasks.append(task)
        return task

    async def settle(self) -> None:
        """Yield until every task is blocked (on an event, a lock or virtual time)."""
        for _ in range(_SETTLE_LIMIT):
            await asyncio.sleep(0)
            if not self.loop.has_ready():
                return
        raise RuntimeError(f"seed {self.seed}: tasks kept running for {_SETTLE_LIMIT} yields")

    def reap(self) -> None:
        """Drop finished tasks; an unexpected exception in any of them is a finding."""
        running = []
        for task in self._tasks:
            if not task.done():
                running.append(task)
            elif not task.cancelled() and task.exception() is not None:
                error = task.exception()
                self.checker.crash(f"{type(error).__name__}: {error}")
                self.event(f"CRASH {type(error).__name__}: {error}")
        self._tasks = running

    async def cancel_all(self) -> None:
        """Cancel every task still running (end of the run)."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def on_deleted(self, key: str, who: str) -> None:
        """A sweeper's DeleteObjects removed `key` (called at that instant)."""
        self.event(f"{who} deleted {key[len(self.layout.listing_root) :]}")
        self.checker.on_deleted(key, who)

    def _fence_is_live(self, fence_id: int) -> bool:
        grant = self.grants.get(fence_id)
        if grant is None:
            return False
        part = self.partitions[grant.partition]
        pub = grant.publisher
        return part.leader is pub and pub.alive and pub.publisher.is_held(grant.token)

    def new_publisher(self, slot: str, **extra: Any) -> PublisherSim:
        """Start a publisher process (a new incarnation after a crash) named `slot`;
        `extra` goes to `Publisher` (the exhaustive explorer shares metrics, no hook)."""
        publisher = Publisher(
            self.pub_store,
            slot,
            state_class=self.variant.state_class,
            guard_class=self.variant.guard_class,
            clock=self.clock,
            hold_ttl_s=self.hold_ttl_s,
            fence_timeout_s=self.fence_timeout_s,
            drain_timeout_s=5.0,
            **extra,
        )
        return PublisherSim(slot, publisher)

    def live_partitions(self) -> list[PartitionSim]:
        """Registered partitions not being deleted, in creation order."""
        return [p for p in self.partitions.values() if not p.deleted and not p.deleting]

    @property
    def violations(self) -> list[Violation]:
        """Violations found so far."""
        return self.checker.violations

    async def check_step(self) -> None:
        """Per-step invariants on what etcd holds now (skipped while etcd is down)."""
        if self.kv.unavailable:
            return
        view = await self.store.read_gc_view()
        safe = compute_safe_epoch(view)
        published: dict[str, int] = {}
        for name, raw in view.partitions.items():
            watermark = self._decoded.get((name, raw))
            if watermark is None:
                try:
                    watermark = PartitionRecord.decode(raw, partition=name).watermark
                except InvalidRecord:
                    continue
                if len(self._decoded) > 4096:
                    self._decoded.clear()
                self._decoded[(name, raw)] = watermark
            published[name] = watermark
        self.checker.check_watermarks(published, safe.safe_epoch, self.cluster_epoch)
