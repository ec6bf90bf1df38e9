"""The simulated world: one seeded run of writers, publishers, reconcilers and sweepers.

Theory of operation
-------------------
`World.run` drives everything from one coroutine on a `VirtualTimeLoop`. A run is a
sequence of steps; each step moves virtual time by one second, lets every request
that was waiting for the step through (`Turnstile`), starts the publisher and sweeper
rounds whose (jittered) timers fire, performs ONE randomly chosen action or fault
(`gcd.sim.actions`, `gcd.sim.faults`), lets every task run until all are blocked
again (`settle`), and then checks the invariants (`gcd.sim.checks`). Long
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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from gcd.layout import KeyLayout
from gcd.objectstore import MemoryObjectStore
from gcd.sim import actions, faults
from gcd.sim.actors import Grant, PartitionSim, PublisherSim, ShardSim, Turnstile, WriterSim
from gcd.sim.checks import Checker, Ledger, Violation
from gcd.sim.variants import CORRECT, Variant
from gcd.sim.vtime import VirtualClock, VirtualTimeLoop
from watermark.errors import InvalidRecord
from watermark.memory_kv import MemoryKV
from watermark.publisher import Publisher
from watermark.record import PartitionRecord
from watermark.safe_epoch import compute_safe_epoch
from watermark.store import WatermarkStore

__all__ = ["NAMESPACE", "START_TIME", "SimConfig", "Trace", "World"]

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
        self.ledger = Ledger(self._fence_is_live)
        self.checker = Checker(self.ledger)
        self.trace = Trace(config.trace_keep)
        self.step = 0
        self.cluster_epoch = 0
        self.partitions: dict[str, PartitionSim] = {}
        self.publishers: list[PublisherSim] = []
        self.writers: list[WriterSim] = []
        self.shards: list[ShardSim] = []
        self.grants: dict[int, Grant] = {}
        self.stale: list[tuple[int, PublisherSim, str]] = []
        self.active_faults: list[faults.Fault] = []
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

    def _reap(self) -> None:
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

    def new_publisher(self, slot: str) -> PublisherSim:
        """Start a publisher process (a new incarnation after a crash) named `slot`."""
        publisher = Publisher(
            self.pub_store,
            slot,
            state_class=self.variant.state_class,
            guard_class=self.variant.guard_class,
            clock=self.clock,
            hold_ttl_s=self.hold_ttl_s,
            fence_timeout_s=self.fence_timeout_s,
            drain_timeout_s=5.0,
        )
        return PublisherSim(slot, publisher)

    def live_partitions(self) -> list[PartitionSim]:
        """Registered partitions not being deleted, in creation order."""
        return [p for p in self.partitions.values() if not p.deleted and not p.deleting]

    @property
    def violations(self) -> list[Violation]:
        """Violations found so far."""
        return self.checker.violations

    # -- the run -------------------------------------------------------------------

    async def run(self) -> None:
        """Set up, run the chaos phase, the quiescent tail and the final checks."""
        try:
            await actions.setup(self)
            for _ in range(self.config.steps):
                await self.step_once(chaos=True)
                if self.violations and self.config.stop_on_violation:
                    return
            await self.quiesce()
        finally:
            await self.cancel_all()

    async def step_once(self, *, chaos: bool) -> None:
        """One step: time moves, one action (in the chaos phase), settle, check."""
        self.step += 1
        self.checker.step = self.step
        self.clock.advance(1.0)
        self.turnstile.open()
        await self.settle()
        actions.housekeeping(self, daemons=chaos)
        await faults.expire(self)
        if chaos:
            if self.rng.random() < self.fault_rate:
                await faults.inject(self)
            else:
                await actions.random_action(self)
        await self.settle()
        self._reap()
        await self.check_step()

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

    # -- the quiescent tail ----------------------------------------------------------

    async def _steps_until(self, done: Callable[[], bool], what: str) -> bool:
        """Step (no chaos) until `done()`; record TAIL_STUCK and return False if never."""
        while not done():
            if self.step >= self.config.steps + self.config.tail_limit:
                self.checker.stuck(f"tail: {what} did not finish in {self.config.tail_limit} steps")
                return False
            await self.step_once(chaos=False)
            if self.violations and self.config.stop_on_violation:
                return False
        return True

    async def quiesce(self) -> None:
        """Heal, drain, catch up, advance idle partitions, sweep; then check liveness."""
        self.event("tail: faults off, writers stop")
        await faults.heal_all(self)
        if not await self._steps_until(self._drained, "draining writes"):
            return
        await actions.report_log_ends(self)
        for _ in range(3):
            await actions.tick(self)
            actions.reconcile_all(self)
            for pub in [p for p in self.publishers if p.alive]:
                actions.start_publish_round(self, pub)
            if not await self._steps_until(self._publishers_idle, "publishing"):
                return
        final = await self.store.read_safe_epoch()
        self.event(f"tail: cluster epoch {self.cluster_epoch}, M {final.safe_epoch}")
        self.clock.advance(self.grace_s + 1.0)
        for _ in range(4):
            for shard in self.shards:
                if not shard.busy:
                    actions.start_sweep(self, shard)
            if not await self._steps_until(self._sweepers_idle, "sweeping"):
                return
            if self._sweeps_complete(final.safe_epoch):
                break
        final = await self.store.read_safe_epoch()
        self.checker.check_final(final.safe_epoch, self.cluster_epoch, self.bucket.keys())

    def _drained(self) -> bool:
        """Commit what is ready; True once no write, adoption or deletion is in flight."""
        for writer in self.writers:
            if writer.op is not None and writer.op.fenced:
                actions.commit(self, writer)
        if any(writer.op is not None for writer in self.writers):
            return False
        if any(pub.alive and pub.stopping for pub in self.publishers):
            return False  # a clean stop is under way: its partitions move on after it
        for part in self.partitions.values():
            if part.task is not None and not part.task.done():
                return False
            if part.deleting and not part.deleted:
                return False
            if not part.deleted and (part.leader is None or not part.leader.alive):
                return False
        hosted = [(p, n) for p in self.publishers if p.alive for n in p.publisher.partitions]
        return all(self.partitions[name].leader is pub for pub, name in hosted)

    def _publishers_idle(self) -> bool:
        return all(p.round_task is None or p.round_task.done() for p in self.publishers)

    def _sweepers_idle(self) -> bool:
        return not any(shard.busy for shard in self.shards)

    def _sweeps_complete(self, safe_epoch: int | None) -> bool:
        """True when every shard's last round was complete and used `safe_epoch`."""
        return all(
            shard.last is not None and shard.last.complete
            and shard.last.summary.safe_epoch == safe_epoch
            for shard in self.shards
        )  # fmt: skip
