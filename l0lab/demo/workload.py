"""Simulated writers and a lagging reconciler, driving the real `Publisher` API.

A `Writer` is one partition's leader: per object it reads the cached cluster epoch
(`EpochClock`), stamps it (`stamp_epoch` with the partition's creation epoch), uploads
the object under a random prefix 000-999 of the key layout, fences the epoch on the
publisher and commits the entry at the partition's next log offset (offsets are taken
at commit time, so they follow commit order). A few uploads stall between upload and
fence (a slow network, a GC pause): by then the fencing window has usually moved on,
the fence is refused (`StaleEpoch`), the upload becomes an orphan and the writer
re-reads the clock. Orphans are garbage the sweeper must collect too.

The `Reconciler` lifts committed entries some seconds after their commit
(`lag_s`), and reports per partition the offset it has lifted everything through.
One partition can be given a stall window, during which its reconciler lifts nothing:
it then pins the global M until the stall ends and it catches up at once.
`horizon` is the pure rule for "lifted up to which commit time".
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from gcd.rules.layout import PREFIX_COUNT, KeyLayout
from l0gc.errors import (
    IllegalTransition,
    L0gcError,
    StorageError,
    WriteRefused,
)
from l0lab.demo.storage import DemoObjects
from l0lab.testing.ledger import Ledger
from watermark.service.clock import EpochClock, stamp_epoch
from watermark.service.publisher import Publisher

__all__ = ["CommitLog", "Reconciler", "Writer", "WriterStats", "horizon"]

_log = structlog.get_logger("gcd.demo")
_REFUSED = (WriteRefused, IllegalTransition)  # a commit out of order is refused too


@dataclass(slots=True)
class CommitLog:
    """Commit times of one partition's entries not yet reported as reconciled."""

    pending: deque[tuple[float, int]] = field(default_factory=deque)  # (commit time, offset)

    def lifted_through(self, horizon_s: float) -> int | None:
        """Drop entries committed at or before `horizon_s`; the highest offset dropped."""
        through: int | None = None
        while self.pending and self.pending[0][0] <= horizon_s:
            through = self.pending.popleft()[1]
        return through


@dataclass(slots=True)
class WriterStats:
    """What the writers did (summed over partitions)."""

    written: int = 0
    committed: int = 0
    orphaned: int = 0
    stalled: int = 0
    put_errors: int = 0


class Writer:
    """One partition's writer; see the module docstring."""

    def __init__(
        self,
        partition: str,
        created_epoch: int,
        *,
        publisher: Publisher,
        clock: EpochClock,
        bucket: DemoObjects,
        ledger: Ledger,
        layout: KeyLayout,
        log: CommitLog,
        stats: WriterStats,
        rng: random.Random,
        rate_per_s: float,
        stall_probability: float,
        stall_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.partition = partition
        self.created_epoch = created_epoch
        self._publisher = publisher
        self._clock = clock
        self._bucket = bucket
        self._ledger = ledger
        self._layout = layout
        self._log = log
        self._stats = stats
        self._rng = rng
        self._rate_per_s = rate_per_s
        self._stall_probability = stall_probability
        self._stall_s = stall_s
        self._now = now
        self.next_offset = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Write objects at about `rate_per_s` (Poisson arrivals) until `stop` is set.

        A stalled upload goes on in a task of its own, as a slow request would, so the
        partition keeps writing meanwhile; it is awaited before `run` returns.
        """
        due = self._now()
        stalled: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                if self._rng.random() < self._stall_probability:
                    task = asyncio.create_task(self.write_one(stop, stall_s=self._stall_s))
                    stalled.add(task)
                    task.add_done_callback(stalled.discard)
                else:
                    await self.write_one(stop)
                due = max(due + self._rng.expovariate(self._rate_per_s), self._now() - 1.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=max(0.0, due - self._now()))
        finally:
            await asyncio.gather(*stalled, return_exceptions=True)

    async def write_one(self, stop: asyncio.Event, *, stall_s: float = 0.0) -> None:
        """Stamp, upload, (stall,) fence and commit one object, or leave an orphan."""
        epoch = stamp_epoch(await self._clock.current(), (self.created_epoch,))
        prefix = self._rng.randrange(PREFIX_COUNT)
        key = self._layout.format(prefix, epoch, uuid.UUID(int=self._rng.getrandbits(128)).hex)
        self._ledger.uploaded(key, epoch, self.partition)
        self._stats.written += 1
        try:
            await self._bucket.put(key)
        except StorageError as exc:
            self._stats.put_errors += 1
            self._ledger.orphaned(key)  # it may or may not exist: garbage either way
            _log.warning("demo.put_failed", partition=self.partition, error=str(exc))
            return
        if stall_s > 0:
            self._stats.stalled += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=stall_s)
        try:
            async with self._publisher.fence(self.partition, epoch) as fence:
                offset = self.next_offset
                fence.commit(offset)
                self._ledger.committed(key, self.partition, offset)
                self._log.pending.append((self._now(), offset))
                self.next_offset += 1
                self._stats.committed += 1
        except _REFUSED as exc:
            self._ledger.orphaned(key)
            self._stats.orphaned += 1
            _log.debug(
                "demo.upload_orphaned",
                partition=self.partition,
                epoch=epoch,
                reason=type(exc).__name__,
            )
            with contextlib.suppress(L0gcError, OSError):
                await self._clock.refresh()


def horizon(now_s: float, lag_s: float, stall: tuple[float, float] | None) -> float:
    """Entries committed at or before this time are lifted (a stall freezes it)."""
    if stall is not None and stall[0] <= now_s < stall[1]:
        return stall[0] - lag_s
    return now_s - lag_s


class Reconciler:
    """Reports, per partition, the offset through which everything is lifted."""

    def __init__(
        self,
        publisher: Publisher,
        ledger: Ledger,
        logs: dict[str, CommitLog],
        *,
        lag_s: float,
        stalls: dict[str, tuple[float, float]],
        now: Callable[[], float] = time.monotonic,
        every_s: float = 0.25,
    ) -> None:
        self._publisher = publisher
        self._ledger = ledger
        self._logs = logs
        self.lag_s = lag_s
        self.stalls = stalls
        self._now = now
        self._every_s = every_s
        self.reported: dict[str, int] = {}

    def lift(self, partition: str, horizon_s: float) -> None:
        """Report everything of `partition` committed at or before `horizon_s`."""
        through = self._logs[partition].lifted_through(horizon_s)
        if through is None:
            return
        try:
            self._publisher.reconciled(partition, through)
        except L0gcError as exc:
            _log.warning("demo.reconcile_failed", partition=partition, error=str(exc))
            return
        self._ledger.reconciled(partition, through)
        self.reported[partition] = through

    def step(self) -> None:
        """One pass over every partition at the current time."""
        now = self._now()
        for partition in self._logs:
            self.lift(partition, horizon(now, self.lag_s, self.stalls.get(partition)))

    def catch_up(self, horizon_s: float) -> None:
        """Lift every partition up to `horizon_s`, ignoring stalls (end of the run)."""
        for partition in self._logs:
            self.lift(partition, horizon_s)

    async def run(self, stop: asyncio.Event) -> None:
        """Step every `every_s` seconds until `stop` is set."""
        while not stop.is_set():
            self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._every_s)
