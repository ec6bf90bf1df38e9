"""The publisher service: hosts the GC state of the partitions this process owns.

Theory of operation
-------------------
`adopt(p)` takes ownership of partition ``p`` in etcd (``owner_epoch`` + 1, so any
previous owner is now stale), restores its `PartitionGcState` from the record's
tracker snapshot (or starts fresh at ``created_epoch``) and rebuilds the fencing
window as after recovery: ``[max_applied]``, never admitting an epoch <= the published
M(p). Writers then, per object: ``async with publisher.fence(p, epoch) as f:`` (the
`FencingGuard`'s shared lock, see `watermark.guard`) and ``f.commit(offset)`` once the
entry is in their log; the reconciler reports ``reconciled(p, offset)``. Every
`publish_interval_s`, `run` publishes the records of the partitions that changed, in
one store call (which writes them in transactions of `PUBLISH_BATCH`); the store
refuses a lower M(p) (counted, never written) and refuses a stale owner, on which this
process drops the partition: a stale owner stops publishing.

Idle partitions. A partition whose every applied entry is reconciled would pin the
global M at its floor. With `idle_advance`, each round it gets a housekeeping entry
``advance_epoch(offset, cluster_epoch)`` when its applied epoch is below the cluster
epoch. It is applied under the guard's EXCLUSIVE lock, after sliding the fencing
window up to the cluster epoch, so no write is in flight while it is applied and no
later write can carry an epoch below the new applied window (if the window already
covered the cluster epoch, a writer fenced it: the partition is not idle, skip).

Writer offsets and housekeeping offsets. Log offsets must strictly increase in the GC
state. A housekeeping entry is modelled as the next log entry, ``last_applied_offset
+ 1``, and is reconciled at once: it carries no data, so nothing references it and the
reconciler has nothing to lift. The writer's next real offset may then collide with
it; such an entry is applied at ``last_applied_offset + 1`` instead and the
difference is kept as ``offset_shift``, added to later commits and reconciled reports.
This is exact while the process runs (a collision only follows housekeeping, which
only happens when everything is reconciled). After a restart the shift is re-derived
from the first collision and can only come out smaller than the true one, so later
reconciled reports map to an offset no higher than the real one: the floor may lag,
never lead. Reconciled reports are clamped to the applied log (entries the writer
never fenced have nothing to lift) and a report at or below the current reconciled
offset is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import structlog

from watermark.contract import Publication, PublishStatus
from watermark.errors import (
    FenceTimeout,
    GuardClosed,
    IllegalTransition,
    L0gcError,
    PartitionNotHosted,
    StaleEpoch,
)
from watermark.gcstate import PartitionGcState
from watermark.guard import DEFAULT_HOLD_TTL_S, FenceToken, FencingGuard
from watermark.metrics import PublishOutcome, WatermarkMetrics
from watermark.record import PartitionRecord
from watermark.store import WatermarkStore
from watermark.window import Admission, EpochWindow

__all__ = ["DEFAULT_DRAIN_TIMEOUT_S", "DEFAULT_FENCE_TIMEOUT_S", "Fence", "Publisher"]

DEFAULT_FENCE_TIMEOUT_S = 5.0
DEFAULT_DRAIN_TIMEOUT_S = 5.0
_log = structlog.get_logger("watermark.publisher")

_OUTCOMES = {
    PublishStatus.OK: PublishOutcome.OK,
    PublishStatus.REFUSED_LOWER: PublishOutcome.REFUSED_LOWER,
    PublishStatus.STALE_OWNER: PublishOutcome.STALE_OWNER,
    PublishStatus.MISSING: PublishOutcome.MISSING,
    PublishStatus.MALFORMED: PublishOutcome.ERROR,
}
_REFUSAL_EVENTS = {
    PublishStatus.REFUSED_LOWER: "watermark.refused_lower",
    PublishStatus.STALE_OWNER: "watermark.stale_owner",
    PublishStatus.MISSING: "watermark.partition_missing",
    PublishStatus.MALFORMED: "watermark.record_malformed",
}


@dataclass(slots=True)
class _Hosted:
    """One owned partition: its GC state, its fence and how writer offsets map onto it."""

    partition: str
    state: PartitionGcState
    guard: FencingGuard
    owner_epoch: int
    published_watermark: int
    offset_shift: int = 0
    last_writer_offset: int | None = None
    dirty: bool = True

    def commit_offset(self, offset: int) -> int:
        """The state offset for the writer's `offset` (see "Writer offsets" above)."""
        previous = self.last_writer_offset
        if offset < 0 or (previous is not None and offset <= previous):
            raise IllegalTransition(
                f"partition {self.partition!r}: commit at offset {offset}, but offsets must be "
                f">= 0 and strictly increase (last committed {previous}); "
                "commit each log entry once, in log order"
            )
        last = self.state.last_applied_offset
        shifted = offset + self.offset_shift
        return last + 1 if last is not None and shifted <= last else shifted

    def reconciled_offset(self, offset: int) -> int | None:
        """The state offset a reconciled report maps to, None when it changes nothing."""
        last = self.state.last_applied_offset
        if offset < 0 or last is None:
            return None
        mapped = min(offset + self.offset_shift, last)
        done = self.state.reconciled_offset
        return None if done is not None and mapped <= done else mapped


@dataclass(frozen=True, slots=True)
class Fence:
    """A granted fence of the Python API: commit the write's log offset inside the block."""

    publisher: Publisher
    token: FenceToken
    """Its `epoch` and the `window` right after it was granted."""

    def commit(self, offset: int) -> None:
        """Apply (offset, epoch) to the partition's GC state and release the fence."""
        self.publisher.commit(self.token, offset)


class _FenceBlock:
    """``async with publisher.fence(...)``: acquire on entry, abort (if not committed) on exit.

    A plain class rather than `contextlib.asynccontextmanager`, whose generator
    machinery cost ~1.5 us per fence (see `watermark.guard`).
    """

    __slots__ = ("_epoch", "_partition", "_publisher", "_timeout_s", "_token")

    def __init__(
        self, publisher: Publisher, partition: str, epoch: int, timeout_s: float | None
    ) -> None:
        self._publisher = publisher
        self._partition = partition
        self._epoch = epoch
        self._timeout_s = timeout_s
        self._token: FenceToken | None = None

    async def __aenter__(self) -> Fence:
        token = await self._publisher.acquire(self._partition, self._epoch, self._timeout_s)
        self._token = token
        return Fence(self._publisher, token)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token = self._token
        if token is not None:
            self._token = None
            self._publisher.abort(token)


class Publisher:
    """Hosts owned partitions' GC state and publishes M(p); see the module docstring."""

    def __init__(
        self,
        store: WatermarkStore,
        owner_id: str,
        *,
        publish_interval_s: float = 1.0,
        idle_advance: bool = True,
        clock: Callable[[], float] = time.monotonic,
        metrics: WatermarkMetrics | None = None,
        hold_ttl_s: float | None = DEFAULT_HOLD_TTL_S,
        fence_timeout_s: float = DEFAULT_FENCE_TIMEOUT_S,
        drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
    ) -> None:
        self._store = store
        self.owner_id = owner_id
        self.publish_interval_s = publish_interval_s
        self.idle_advance = idle_advance
        self.clock = clock
        self.metrics = metrics if metrics is not None else WatermarkMetrics()
        self._hold_ttl_s = hold_ttl_s
        self.fence_timeout_s = fence_timeout_s
        self._drain_timeout_s = drain_timeout_s
        self._hosted: dict[str, _Hosted] = {}
        self._adopt_lock = asyncio.Lock()
        self.cluster_epoch: int | None = None
        self.published_once = False

    # -- ownership -----------------------------------------------------------------

    @property
    def partitions(self) -> list[str]:
        """The partitions hosted here, sorted."""
        return sorted(self._hosted)

    async def adopt(self, partition: str) -> dict[str, Any]:
        """Own `partition` (bumping owner_epoch), restore its state; return `state()`."""
        async with self._adopt_lock:
            if partition not in self._hosted:
                record = await self._store.acquire_ownership(partition, self.owner_id)
                self._host(record)
        self._update_gauges()
        return self.state(partition)

    def _host(self, record: PartitionRecord) -> None:
        state = (
            PartitionGcState.restore(record.tracker)
            if record.tracker is not None
            else PartitionGcState(created_epoch=record.created_epoch)
        )
        window = state.window_after_recovery()
        if window.floor is None or record.watermark > window.floor:
            # The stored M(p) is the one sweepers act on: never admit at or below it.
            window = EpochWindow.recovered(state.last_applied_epoch, record.watermark)
        guard = FencingGuard(
            window,
            metrics=self.metrics,
            partition=record.partition,
            hold_ttl_s=self._hold_ttl_s,
            clock=self.clock,
        )
        self._hosted[record.partition] = _Hosted(
            partition=record.partition,
            state=state,
            guard=guard,
            owner_epoch=record.owner_epoch,
            published_watermark=record.watermark,
        )
        _log.info(
            "watermark.partition_adopted",
            partition=record.partition,
            owner=self.owner_id,
            owner_epoch=record.owner_epoch,
            window=list(window.bounds),
            watermark=record.watermark,
        )

    async def release(self, partition: str) -> None:
        """Stop hosting `partition`: abort fence waiters, drain holders, publish, drop."""
        hosted = self._get(partition)
        hosted.guard.close()
        await hosted.guard.drain(self._drain_timeout_s)
        await self.publish_now([hosted])
        self._drop(hosted, "released")

    def _drop(self, hosted: _Hosted, reason: str) -> None:
        if self._hosted.get(hosted.partition) is not hosted:
            return
        del self._hosted[hosted.partition]
        hosted.guard.close()
        hosted.guard.revoke_all()
        self._update_gauges()
        _log.info("watermark.partition_dropped", partition=hosted.partition, reason=reason)

    def _get(self, partition: str) -> _Hosted:
        hosted = self._hosted.get(partition)
        if hosted is None:
            raise PartitionNotHosted(partition)
        return hosted

    # -- writers -------------------------------------------------------------------

    async def acquire(
        self, partition: str, epoch: int, timeout_s: float | None = None
    ) -> FenceToken:
        """Fence `epoch` on `partition`; the token must be committed or aborted."""
        hosted = self._get(partition)
        timeout = self.fence_timeout_s if timeout_s is None else timeout_s
        return await hosted.guard.acquire(epoch, timeout)

    def fence(
        self, partition: str, epoch: int, timeout_s: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Fence]:
        """``async with publisher.fence(p, epoch) as f: ... f.commit(offset)``."""
        return _FenceBlock(self, partition, epoch, timeout_s)

    def commit(self, token: FenceToken, offset: int) -> None:
        """Apply the committed write at the writer's log `offset`, then release the fence.

        Raises FenceExpired (fence reclaimed or finished: do not commit),
        PartitionNotHosted, or IllegalTransition for an offset that does not increase
        (the fence stays held; commit again with the right offset or abort).
        """
        hosted = self._get(token.partition)
        hosted.guard.ensure_held(token)
        state_offset = hosted.commit_offset(offset)
        hosted.state.apply(state_offset, token.epoch)
        hosted.offset_shift = state_offset - offset
        hosted.last_writer_offset = offset
        hosted.dirty = True
        self.abort(token)

    def abort(self, token: FenceToken) -> bool:
        """Release a fence without committing; False if it was no longer held."""
        hosted = self._hosted.get(token.partition)
        return hosted is not None and hosted.guard.release(token)

    def is_held(self, token: FenceToken) -> bool:
        """True while `token` may still be committed (held, partition still hosted)."""
        hosted = self._hosted.get(token.partition)
        return hosted is not None and hosted.guard.is_held(token)

    def reclaim_expired(self) -> int:
        """Reclaim expired fences that block a waiting slide, on every partition."""
        return sum(h.guard.reclaim_expired() for h in self._hosted.values())

    def reconciled(self, partition: str, offset: int) -> None:
        """The reconciler lifted every entry of `partition` through the writer's `offset`."""
        hosted = self._get(partition)
        state_offset = hosted.reconciled_offset(offset)
        if state_offset is not None:
            hosted.state.reconciled(state_offset)
            hosted.dirty = True

    def state(self, partition: str) -> dict[str, Any]:
        """What this process knows of `partition`, JSON-able (for the HTTP API and logs)."""
        hosted = self._get(partition)
        state = hosted.state
        return {
            "partition": partition,
            "owner": self.owner_id,
            "owner_epoch": hosted.owner_epoch,
            "window": list(hosted.guard.window),
            "watermark": state.gc_eligible_epoch,
            "published_watermark": hosted.published_watermark,
            "created_epoch": state.created_epoch,
            "applied_window": list(state.applied_window),
            "last_applied_offset": state.last_applied_offset,
            "reconciled_offset": state.reconciled_offset,
            "last_writer_offset": hosted.last_writer_offset,
            "offset_shift": hosted.offset_shift,
            "inflight_fences": hosted.guard.inflight,
            "waiting_slides": hosted.guard.exclusive_waiters,
            "dirty": hosted.dirty,
        }

    # -- publishing ----------------------------------------------------------------

    async def publish_now(self, only: Iterable[_Hosted] | None = None) -> dict[str, PublishStatus]:
        """Publish every changed partition (or `only` those) now; return each status."""
        chosen = [h for h in (self._hosted.values() if only is None else only) if h.dirty]
        results: dict[str, PublishStatus] = {}
        if chosen:
            started = time.perf_counter()
            # One store call for all of them: the store reads the records once (one range
            # read from a few hundred partitions on) and writes them in transactions of
            # PUBLISH_BATCH itself. Calling it per PUBLISH_BATCH slice cost a round of
            # ~100 gets plus a txn per slice (10k partitions on etcd: 2.5 s instead of 0.7 s).
            await self._publish(chosen, results)
            elapsed = time.perf_counter() - started
            self.metrics.publish_duration.observe(elapsed)
            _log.info(
                "watermark.publish",
                partitions=len(chosen),
                ok=sum(status is PublishStatus.OK for status in results.values()),
                duration_s=round(elapsed, 4),
            )
        self.published_once = True
        self._update_gauges()
        return results

    async def _publish(self, batch: list[_Hosted], results: dict[str, PublishStatus]) -> None:
        pubs = [
            Publication(
                partition=h.partition,
                owner=self.owner_id,
                owner_epoch=h.owner_epoch,
                watermark=h.state.gc_eligible_epoch,
                window=h.guard.window,
                tracker=h.state.snapshot(),
            )
            for h in batch
        ]
        for hosted in batch:
            hosted.dirty = False  # a change during the await marks it dirty again
        try:
            outcomes = await self._store.publish(pubs)
        except L0gcError as exc:
            # Transactions that landed before the failure stay written; their partitions
            # are published again (same M(p), accepted) next round.
            for hosted in batch:
                hosted.dirty = True
            self.metrics.publish(PublishOutcome.ERROR, len(batch))
            _log.warning("watermark.publish_failed", partitions=len(batch), error=str(exc))
            return
        for hosted, pub, outcome in zip(batch, pubs, outcomes, strict=True):
            status = outcome.status
            results[hosted.partition] = status
            self.metrics.publish(_OUTCOMES[status])
            if status is PublishStatus.OK:
                hosted.published_watermark = pub.watermark
                continue
            stored = outcome.record
            _log.warning(
                _REFUSAL_EVENTS[status],
                partition=pub.partition,
                watermark=pub.watermark,
                owner_epoch=pub.owner_epoch,
                stored_watermark=None if stored is None else stored.watermark,
                stored_owner=None if stored is None else stored.owner,
                stored_owner_epoch=None if stored is None else stored.owner_epoch,
                detail=outcome.detail,
            )
            if status in (PublishStatus.STALE_OWNER, PublishStatus.MISSING):
                self._drop(hosted, status.value)  # a stale owner stops publishing
            elif status is PublishStatus.MALFORMED:
                hosted.dirty = True  # retried next round; an operator must repair the record

    async def read_cluster_epoch(self) -> int:
        """Read the cluster epoch (and export it as a metric)."""
        self.cluster_epoch = await self._store.get_cluster_epoch()
        self.metrics.cluster_epoch.set(self.cluster_epoch)
        return self.cluster_epoch

    async def advance_idle(self, epoch: int | None = None) -> int:
        """Give idle, reconciled partitions a housekeeping advance to the cluster epoch
        (read now unless given); return how many were advanced."""
        if epoch is None:
            epoch = await self.read_cluster_epoch()
        advanced = 0
        for hosted in list(self._hosted.values()):
            state = hosted.state
            if not state.is_idle_reconciled or state.last_applied_epoch >= epoch:
                continue
            if hosted.guard.inflight:
                continue  # writes in flight: it is not idle; do not hold them back
            try:
                async with hosted.guard.exclusive(epoch, self.fence_timeout_s) as admission:
                    # No write is in flight now; re-check what may have changed meanwhile.
                    if admission is Admission.ABOVE and state.is_idle_reconciled:
                        self._apply_housekeeping(hosted, epoch)
                        advanced += 1
            except (StaleEpoch, FenceTimeout, GuardClosed) as exc:
                _log.info(
                    "watermark.idle_advance_skipped", partition=hosted.partition, error=str(exc)
                )
        return advanced

    def _apply_housekeeping(self, hosted: _Hosted, epoch: int) -> None:
        last = hosted.state.last_applied_offset
        offset = 0 if last is None else last + 1
        hosted.state.advance_epoch(offset, epoch)
        hosted.state.reconciled(offset)  # no data: nothing for the reconciler to lift
        hosted.dirty = True
        self.metrics.idle_advances.inc()
        _log.info("watermark.idle_advance", partition=hosted.partition, epoch=epoch, offset=offset)

    async def run_once(self) -> None:
        """One round: idle advances (if enabled), then publish what changed."""
        try:
            epoch = await self.read_cluster_epoch()
            if self.idle_advance:
                await self.advance_idle(epoch)
        except L0gcError as exc:
            _log.warning("watermark.round_failed", error=str(exc))
        await self.publish_now()

    async def run(self, stop: asyncio.Event) -> None:
        """Publish every interval until `stop`; then abort waiters, drain, publish once more."""
        while not stop.is_set():
            await self.run_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.publish_interval_s)
        await self.shutdown()

    def abort_waiters(self) -> None:
        """Close every guard: queued fences fail with GuardClosed, new ones are refused;
        fences already held may still commit."""
        for hosted in self._hosted.values():
            hosted.guard.close()

    async def drain(self) -> None:
        """Wait (bounded by the drain timeout) for held fences to finish; revoke the rest."""
        hosted = list(self._hosted.values())
        await asyncio.gather(*(h.guard.drain(self._drain_timeout_s) for h in hosted))

    async def shutdown(self) -> None:
        """Abort fence waiters, let holders commit (bounded), publish a final time."""
        self.abort_waiters()
        await self.drain()
        await self.publish_now()
        _log.info("watermark.publisher_stopped", partitions=len(self._hosted))

    def _update_gauges(self) -> None:
        self.metrics.partitions_owned.set(len(self._hosted))
        watermarks = [h.published_watermark for h in self._hosted.values()]
        self.metrics.min_watermark.set(min(watermarks) if watermarks else -1)
