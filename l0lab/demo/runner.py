"""One demo run: the real publisher, ticker and sweeper daemon against simulated writers.

Theory of operation
-------------------
Everything here is the production code path except the writers and the reconciler:
partitions are registered and adopted by a `Publisher`, an `EpochTicker` advances the
cluster epoch every `epoch_interval_s`, writers fence and commit through the
publisher, the `Reconciler` reports lifted offsets, and a sweeper `Daemon` (real loop,
short intervals and grace) deletes through a `CountingStore` that tells the ground
truth `Ledger` about every completed delete.

Phases: *writing* for `duration_s` (or until stopped). *draining*: writers stop;
every object referenced now is read back (HEAD); then the reconciler catches up
completely, so everything written is garbage, and the publisher's idle advances lift
M past the newest epoch within two epoch ticks; the grace period passes. *final
round*: the daemon stops and one more round runs with the final M. *verifying*: the
demo's root is listed and each key checked against the ledger.
If the demo's own etcd is gone (a Ctrl-C in a terminal reaches its process group),
the etcd steps are skipped and the read-back of the storage still runs.

The storage is S3 or an Azure Blob container (`l0lab.demo.storage`, the one place that
tells them apart); the runner sees the demo's own client (`DemoObjects`) and the
sweeper's store, whichever they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TextIO

import structlog

from gcd.observe.report import RoundSummary
from gcd.rules.layout import DEFAULT_ROOT, KeyLayout
from gcd.service.daemon import Daemon, DaemonConfig
from gcd.service.runtime import SweepRuntime, SweepSettings
from gcd.storage.objectstore import BucketStore
from gcd.sweep.binding import bind_namespace
from gcd.sweep.sweeper import RoundConfig
from l0gc.contract.kv import KV
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.errors import ConfigError, L0gcError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.demo.s3io import CountingStore
from l0lab.demo.storage import (
    DemoObjects,
    DemoStorage,
    SweptStore,
    open_storage,
)
from l0lab.demo.verify import (
    BucketCheck,
    DemoSummary,
    Readback,
    check_bucket,
    problems,
    read_back,
)
from l0lab.demo.view import LiveView, Snapshot
from l0lab.demo.workload import CommitLog, Reconciler, Writer, WriterStats
from l0lab.testing.ledger import Ledger
from watermark.service.clock import EpochClock
from watermark.service.publisher import Publisher
from watermark.service.ticker import EpochTicker

__all__ = ["DemoConfig", "DemoRun", "Servers"]

_log = structlog.get_logger("gcd.demo")
_SAMPLE_TIMEOUT_S = 1.0
_SETTLE_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """How big and how fast the simulated system is."""

    duration_s: float = 60.0
    partitions: int = 8
    write_rate: float = 40.0
    epoch_interval_s: float = 2.0
    grace_s: float = 2.0
    reconcile_lag_s: float = 3.0
    stall_reconciler: bool = True
    stall_probability: float = 0.005
    seed: int = 0
    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        checks = (
            (self.duration_s > 0, f"--duration {self.duration_s!r} must be > 0"),
            (1 <= self.partitions <= 1000, f"--partitions {self.partitions!r} must be 1-1000"),
            (self.write_rate > 0, f"--write-rate {self.write_rate!r} must be > 0"),
            (
                self.epoch_interval_s >= 0.2,
                f"--epoch-interval {self.epoch_interval_s!r} must be >= 0.2 s",
            ),
            (self.grace_s >= 0, f"--grace {self.grace_s!r} must be >= 0"),
            (self.reconcile_lag_s >= 0, f"--reconcile-lag {self.reconcile_lag_s!r} must be >= 0"),
            (0 <= self.stall_probability <= 1, "stall probability must be 0-1"),
        )
        for ok, problem in checks:
            if not ok:
                raise ConfigError(problem)

    @property
    def slow_partition(self) -> str | None:
        """The partition whose reconciler stalls for a while, if any."""
        return _name(min(3, self.partitions - 1)) if self.stall_reconciler else None


def _name(index: int) -> str:
    return f"orders/{index}"


@dataclass(frozen=True, slots=True)
class Servers:
    """Where etcd and the storage are, and (for a demo-owned etcd) whether it still runs."""

    etcd: EtcdSettings
    storage: DemoStorage
    etcd_pid: int | None = None
    etcd_alive: Callable[[], bool] = field(default=lambda: True)


@dataclass(slots=True)
class _Parts:
    """The running components of one demo."""

    store: WatermarkStore
    bucket: DemoObjects
    publisher: Publisher
    reconciler: Reconciler
    counting: CountingStore
    runtime: SweepRuntime
    daemon: Daemon
    writers: list[asyncio.Task[None]] = field(default_factory=list)


class DemoRun:
    """One run; `run(stop)` returns the summary. See the module docstring."""

    def __init__(self, config: DemoConfig, servers: Servers, *, stream: TextIO, tty: bool) -> None:
        self.config = config
        self.servers = servers
        self.stream = stream
        self.tty = tty
        self.phase = "starting"
        self.ledger = Ledger()
        self.stats = WriterStats()
        self.started = time.monotonic()
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._stall: tuple[float, float] | None = None
        self._runtime = contextlib.AsyncExitStack()
        """Holds the sweeper's `SweepRuntime` open from `_start` until `run` ends."""
        self.abort = asyncio.Event()
        """Set (with a cancel of the running task) to give up at once; checked at every
        phase change too, because Python 3.11's wait_for can swallow a cancellation."""

    def _note(self, event: str, **fields: Any) -> None:
        """A demo event in the logs (on a terminal the live view says it instead)."""
        if not self.tty:
            _log.info(event, **fields)

    def _set_phase(self, phase: str) -> None:
        if self.abort.is_set():
            raise asyncio.CancelledError
        self.phase = phase
        self._note("demo.phase", phase=phase, elapsed_s=round(time.monotonic() - self.started, 1))

    def _spawn(self, name: str, job: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
        self._stops[name] = stop
        self._tasks[name] = asyncio.create_task(job, name=name)

    async def _stop(self, name: str) -> None:
        self._stops[name].set()
        await asyncio.gather(self._tasks[name], return_exceptions=True)

    async def run(self, stop: asyncio.Event) -> DemoSummary:
        """Run every phase; on any exit, stop what was started."""
        kv = await open_kv(self.servers.etcd)
        try:
            store = WatermarkStore(kv, self.servers.etcd.namespace)
            async with open_storage(self.servers.storage) as (bucket, objects):
                await bucket.ensure_bucket()
                parts = await self._start(store, kv, bucket, objects)
                return await self._run(stop, parts)
        finally:
            for event in self._stops.values():
                event.set()
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await self._runtime.aclose()
            await kv.close()

    async def _start(
        self, store: WatermarkStore, kv: KV, bucket: DemoObjects, objects: SweptStore
    ) -> _Parts:
        """Register and adopt the partitions, start every component and the writers."""
        config = self.config
        rng = random.Random(config.seed)
        layout = KeyLayout.default(config.root)
        await store.init_cluster_epoch(1)
        storage = self.servers.storage
        target = storage.settings.target(config.root)
        await bind_namespace(store, objects, target)  # as `gcd namespace bind` does
        publisher = Publisher(store, "demo-publisher", publish_interval_s=0.5)
        created: dict[str, int] = {}
        for index in range(config.partitions):
            record = await store.register_partition(_name(index))
            created[record.partition] = record.created_epoch
            await publisher.adopt(record.partition, log_end_offset=-1)  # a fresh, empty log
        lease_ttl = max(2, math.ceil(3 * config.epoch_interval_s))
        ticker = EpochTicker(store, kv, config.epoch_interval_s, "demo-ticker", lease_ttl)
        clock = EpochClock(store, refresh_interval_s=min(0.5, config.epoch_interval_s / 4))
        logs = {name: CommitLog() for name in created}
        slow = config.slow_partition
        if slow is not None:
            at = time.monotonic()
            self._stall = (at + 0.25 * config.duration_s, at + 0.55 * config.duration_s)
        stalls = {} if slow is None or self._stall is None else {slow: self._stall}
        round_config = RoundConfig(
            layout=layout, grace_s=config.grace_s, concurrency=4, list_concurrency=4
        )
        # The sweeper is assembled as `gcd daemon` assembles it (`SweepRuntime`: its own
        # etcd client and store client), its store wrapped to count requests for the view.
        counted: list[CountingStore] = []

        def counting_store(inner: BucketStore) -> BucketStore:
            counted.append(CountingStore(inner, self.ledger, time.monotonic))
            return counted[-1]

        settings = SweepSettings(round_config, storage.settings, self.servers.etcd)
        runtime = await self._runtime.enter_async_context(
            SweepRuntime.open(settings, wrap=counting_store)
        )
        counting = counted[-1]
        pacing = DaemonConfig(
            interval_s=1.0,
            idle_interval_s=2.0,
            max_interval_s=4.0,
            full_pass_interval_s=10.0,
            unready_after_s=30.0,
        )
        parts = _Parts(
            store=store,
            bucket=bucket,
            publisher=publisher,
            reconciler=Reconciler(
                publisher, self.ledger, logs, lag_s=config.reconcile_lag_s, stalls=stalls
            ),
            counting=counting,
            runtime=runtime,
            daemon=runtime.daemon(pacing),
        )
        view = LiveView(
            lambda: self._sample(store, counting),
            self.stream,
            tty=self.tty,
            log_every_s=min(5.0, max(1.0, config.duration_s / 10)),
        )
        for name, job in (
            ("ticker", ticker.run),
            ("publisher", publisher.run),
            ("reconciler", parts.reconciler.run),
            ("view", view.run),
        ):
            stop = asyncio.Event()
            self._spawn(name, job(stop), stop)
        self._spawn("sweeper", parts.daemon.run(), parts.daemon.stop)
        writers_stop = asyncio.Event()
        for name, epoch in created.items():
            writer = Writer(
                name,
                epoch,
                publisher=publisher,
                clock=clock,
                bucket=bucket,
                ledger=self.ledger,
                layout=layout,
                log=logs[name],
                stats=self.stats,
                rng=random.Random(rng.getrandbits(64)),
                rate_per_s=config.write_rate / config.partitions * rng.uniform(0.5, 1.5),
                stall_probability=config.stall_probability,
                stall_s=2.5 * config.epoch_interval_s,
            )
            self._spawn(f"writer {name}", writer.run(writers_stop), writers_stop)
            parts.writers.append(self._tasks[f"writer {name}"])
        self._note(
            "demo.started",
            partitions=config.partitions,
            slow_partition=slow,
            duration_s=config.duration_s,
            epoch_interval_s=config.epoch_interval_s,
            grace_s=config.grace_s,
            root=config.root,
        )
        return parts

    async def _run(self, stop: asyncio.Event, parts: _Parts) -> DemoSummary:
        config = self.config
        self._set_phase("writing")
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([stopped], timeout=config.duration_s)
        finally:
            stopped.cancel()
        interrupted = stop.is_set()

        self._set_phase("draining")
        for task in parts.writers:
            self._stops[task.get_name()].set()
        for outcome in await asyncio.gather(*parts.writers, return_exceptions=True):
            if isinstance(outcome, BaseException):
                _log.error("demo.writer_failed", error=repr(outcome))
        last_write = time.monotonic()
        await self._stop("reconciler")
        readback = await read_back(self.ledger, parts.bucket)
        parts.reconciler.catch_up(math.inf)
        etcd_up = self.servers.etcd_alive()
        if etcd_up:
            await self._settled(parts.store, self.ledger.max_epoch)
            await asyncio.sleep(max(0.0, last_write + config.grace_s + 0.5 - time.monotonic()))
        else:
            _log.warning(
                "demo.etcd_gone",
                detail="the demo's etcd stopped; skipping the final "
                "sweeper round, verifying the storage only",
            )

        self._set_phase("final round")
        await self._stop("sweeper")
        final: RoundSummary | None = None
        if etcd_up and self.servers.etcd_alive():  # one more round of the same sweeper
            parts.runtime.sweeper.stop.clear()
            final = (await parts.runtime.run_round()).summary

        self._set_phase("verifying")
        check = await check_bucket(self.ledger, parts.bucket, config.root)
        last = await self._read(parts.store) if self.servers.etcd_alive() else None
        self._set_phase("done")
        await self._stop("view")
        await self._stop("publisher")
        await self._stop("ticker")
        return self._summary(
            interrupted, readback=readback, check=check, parts=parts, final=final, last=last
        )

    async def _settled(self, store: WatermarkStore, max_epoch: int | None) -> bool:
        """Wait (bounded) until the global M covers every epoch written: everything is
        reconciled now, so the publisher's idle advances lift M within two epoch ticks."""
        if max_epoch is None:
            return True
        deadline = time.monotonic() + 4 * self.config.epoch_interval_s + _SETTLE_SLACK_S
        while time.monotonic() < deadline:
            read = await self._read(store)
            if read is not None and read.safe_epoch is not None and read.safe_epoch >= max_epoch:
                return True
            await asyncio.sleep(0.2)
        _log.warning("demo.settle_timeout", max_epoch=max_epoch)
        return False

    async def _read(self, store: WatermarkStore) -> SafeEpoch | None:
        try:
            return await asyncio.wait_for(store.read_safe_epoch(), _SAMPLE_TIMEOUT_S)
        except (L0gcError, OSError, TimeoutError):
            return None

    async def _sample(self, store: WatermarkStore, counting: CountingStore) -> Snapshot:
        now = time.monotonic()
        read = await self._read(store)
        counts = self.ledger.counts()
        pinning = () if read is None else read.pinning
        stalled = None
        if self._stall is not None and self._stall[0] <= now < self._stall[1]:
            stalled = self.config.slow_partition
        return Snapshot(
            phase=self.phase,
            elapsed_s=now - self.started,
            duration_s=self.config.duration_s,
            cluster_epoch=None if read is None else read.cluster_epoch,
            safe_epoch=None if read is None else read.safe_epoch,
            pinned_by=tuple(record.partition for record in pinning),
            pinned_watermark=pinning[0].watermark if pinning else None,
            blocked_reason="etcd unreachable" if read is None else read.blocked_reason,
            written=counts.written,
            live=counts.live,
            garbage=counts.garbage,
            deleted=counts.deleted,
            orphans=counts.orphans,
            live_lost=counts.live_lost,
            list_requests=counting.counts.list_requests,
            delete_requests=counting.counts.delete_requests,
            deletes_per_s=counting.delete_rate(now),
            stalled_partition=stalled,
        )

    def _summary(
        self,
        interrupted: bool,
        *,
        readback: Readback,
        check: BucketCheck,
        parts: _Parts,
        final: RoundSummary | None,
        last: SafeEpoch | None,
    ) -> DemoSummary:
        elapsed = time.monotonic() - self.started
        counts = self.ledger.counts()
        requests = parts.counting.counts
        summary = DemoSummary(
            interrupted=interrupted,
            duration_s=round(elapsed, 2),
            partitions=self.config.partitions,
            objects_written=counts.written,
            objects_committed=self.stats.committed,
            orphans=counts.orphans,
            deleted=requests.deleted,
            live_lost=counts.live_lost,
            live_at_stop=readback.referenced,
            live_verified=readback.present,
            garbage_remaining=check.garbage_remaining,
            max_epoch_written=self.ledger.max_epoch,
            unknown_deleted=self.ledger.unknown_deleted,
            safe_epoch=None if last is None else last.safe_epoch,
            cluster_epoch=None if last is None else last.cluster_epoch,
            list_requests=requests.list_requests,
            delete_requests=requests.delete_requests,
            put_requests=parts.bucket.put_requests,
            deletes_per_s=round(requests.deleted / max(elapsed, 1e-9), 1),
            final_round={} if final is None else final.to_dict(),
            losses=[dataclasses.asdict(loss) for loss in self.ledger.losses[:20]],
            etcd=",".join(self.servers.etcd.endpoints),
            etcd_pid=self.servers.etcd_pid,
            storage=self.servers.storage.kind,
            endpoint_url=self.servers.storage.endpoint_url,
            bucket=self.servers.storage.name,
            root=self.config.root,
            namespace=self.servers.etcd.namespace,
            seed=self.config.seed,
        )
        found = problems(summary, self.config.duration_s)
        if check.deleted_but_present:
            found.append(f"{check.deleted_but_present} deleted objects are still listed")
        notes = []
        if final is None:
            notes.append(
                "the demo's etcd stopped before the final round (a Ctrl-C in a "
                "terminal reaches it too), so the garbage left was not collected"
            )
        return dataclasses.replace(
            summary, ok=not found and not interrupted, problems=found, notes=notes
        )
