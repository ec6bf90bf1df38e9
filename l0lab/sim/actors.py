"""The simulated actors: partitions with their log and reconciler, publishers, writers
and sweeper shards, and the object store the sweepers talk to.

Each actor is a small record the `World` keeps; the actions that move them live in
`l0lab.sim.world` (one action per simulation step). What the code under test sees is
always the real thing: `Publisher`, `EpochClock`,
`WatermarkStore` on `MemoryKV`, `Sweeper` and `run_round` on `MemoryObjectStore`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Unpack

from gcd.observe.report import RoundResult
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.storage.objectstore import DeleteResult, ListOptions, ListPage
from gcd.storage.retry import Retrier
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.sim.vtime import VirtualClock
from l0lab.testing.memory import MemoryObjectStore
from watermark.service.clock import EpochClock
from watermark.service.guard import FenceToken
from watermark.service.publisher import Publisher

__all__ = [
    "Fault",
    "HeldFence",
    "PartitionSim",
    "PublisherSim",
    "ShardSim",
    "SimObjectStore",
    "Turnstile",
    "WriteOp",
    "WriterSim",
    "shard_config",
]


class Turnstile:
    """Lets every waiting request through once per simulation step (request latency)."""

    def __init__(self) -> None:
        self._open = asyncio.Event()

    async def wait(self) -> None:
        """Wait for the next step."""
        await self._open.wait()

    def open(self) -> None:
        """Start a new step: release everyone waiting now, make later callers wait."""
        self._open.set()
        self._open = asyncio.Event()


class SimObjectStore:
    """One sweeper's view of the shared bucket: a step of latency per request, and every
    key it really deletes is reported to the checker at that instant.

    A DeleteObjects takes effect, then its answer needs one more step to come back, so
    a sweeper killed in between has deleted keys without knowing it.
    """

    def __init__(
        self,
        bucket: MemoryObjectStore,
        turnstile: Turnstile,
        on_deleted: Callable[[str, str], None],
        name: str,
    ) -> None:
        self.bucket = bucket
        self.turnstile = turnstile
        self.on_deleted = on_deleted
        self.name = name

    async def list_page(self, prefix: str, **options: Unpack[ListOptions]) -> ListPage:
        """One ListObjectsV2 page, a step after it was asked for."""
        await self.turnstile.wait()
        return await self.bucket.list_page(prefix, **options)

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """One DeleteObjects: applied a step after the call, answered a step later."""
        await self.turnstile.wait()
        existed = [key for key in keys if key in self.bucket.objects]
        result = await self.bucket.delete_batch(keys)
        gone = set(result.deleted)
        for key in existed:
            if key in gone:
                self.on_deleted(key, self.name)
        await self.turnstile.wait()
        return result


@dataclass(slots=True)
class PublisherSim:
    """One publisher process incarnation; a crash makes a new one."""

    name: str
    publisher: Publisher
    alive: bool = True
    stopping: bool = False
    """A clean stop (SIGTERM) is under way: draining, then the final, sealed publish."""
    round_task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class PartitionSim:
    """A partition: its log (ground truth), its reconciler, and who leads it."""

    name: str
    created_epoch: int
    leader: PublisherSim | None = None
    next_offset: int = 0
    reconciled: int = -1
    seen_end: int = -1
    """The log end the reconciler read last (it may predate the owner's adoption)."""
    log: list[str] = field(default_factory=list)
    """The object key each log entry names, by offset (what the writer names on commit
    and the reconciler names once it has lifted the entry)."""
    claimed: int = -1
    """The highest offset the reconciler reported lifted: above `reconciled` only after
    the reconciler bug (`l0lab.sim.actions.overreport`)."""
    deleting: bool = False
    deleted: bool = False
    task: asyncio.Task[None] | None = None
    """Adoption or deletion in progress."""

    @property
    def writable(self) -> bool:
        """True when writers may fence and commit on it."""
        return self.leader is not None and self.leader.alive and not self.deleting


@dataclass(frozen=True, slots=True)
class HeldFence:
    """A fence a writer was granted, with the publisher incarnation that granted it."""

    fence_id: int
    partition: str
    token: FenceToken
    publisher: PublisherSim


@dataclass(slots=True)
class WriteOp:
    """One object in flight: uploaded, fencing or fenced on its partitions."""

    key: str
    epoch: int
    fences: dict[str, asyncio.Task[HeldFence | None]]
    targets: dict[str, PublisherSim]
    """The publisher each fence request went to."""
    started_step: int

    @property
    def fenced(self) -> bool:
        """True once every fence request has an answer."""
        return all(task.done() for task in self.fences.values())


@dataclass(slots=True)
class WriterSim:
    """A writer with a stale epoch cache (the real `EpochClock`)."""

    name: str
    clock: EpochClock
    patience: int
    """Commit at the earliest this many steps after the upload (slow writers)."""
    seq: int = 0
    op: WriteOp | None = None


@dataclass(slots=True)
class ShardSim:
    """One sweeper replica (shard `index` of `count`); a kill restarts it fresh."""

    index: int
    count: int
    config: RoundConfig
    store: SimObjectStore
    clock: VirtualClock
    seed: int
    sweeper: Sweeper = field(init=False)
    gate: SafetyGate = field(init=False)
    task: asyncio.Task[RoundResult] | None = None
    last: RoundResult | None = None
    restarts: int = 0

    def __post_init__(self) -> None:
        self.restart_process()

    def restart_process(self) -> None:
        """A fresh sweeper process: no memory of earlier rounds (gate, limiter)."""
        rng = random.Random(f"{self.seed}/{self.index}/{self.restarts}")
        retrier = Retrier(self.config.backoff, rng=rng)
        self.sweeper = Sweeper(
            self.store, self.config, retrier=retrier, clock=self.clock, monotonic=self.clock
        )
        self.gate = SafetyGate()
        self.last = None
        self.restarts += 1

    @property
    def busy(self) -> bool:
        """True while a round is running."""
        return self.task is not None and not self.task.done()


def shard_config(rng: random.Random, index: int, count: int, grace_s: float) -> RoundConfig:
    """A randomised but valid sweeper configuration for one shard."""
    return RoundConfig(
        grace_s=grace_s,
        batch_size=rng.choice([2, 3, 5, 8]),
        concurrency=rng.choice([1, 2]),
        list_concurrency=rng.choice([1, 2]),
        shard_index=index,
        shard_count=count,
        page_size=rng.choice([3, 5, 10, 50]),
        backoff=Backoff(base_s=0.5, cap_s=3.0, max_attempts=4),
    )


@dataclass(slots=True)
class Fault:
    """An active fault: it ends at step `until` by calling `end`."""

    name: str
    until: int
    end: Callable[[], Awaitable[bool]]
    """Undo the fault; False when it cannot be undone yet (try again next step)."""
