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
global M at its floor. With `idle_advance`, each round such a partition is advanced to
the cluster epoch when its applied epoch is below it: under the guard's EXCLUSIVE
lock, after sliding the fencing window up to the cluster epoch (so no write is in
flight), the GC state's `advance_idle` raises the floor to the fence's new lower bound.
If the window already covered the cluster epoch, a writer fenced it: the partition is
not idle, skip. An idle advance is not a log entry and uses no offset, so the state's
offsets are the writer's log offsets, one to one.

The log end. A new owner restores the last *published* snapshot; the log may hold
entries committed after it (the previous owner crashed or lost ownership before it
published them). Their epochs are unknown, so the partition may not count as idle
until the reconciler has passed them. `adopt(p, log_end_offset=N)` says where the log
ends (-1: it is empty; see `PartitionGcState.catch_up`). Without it the log end is
unknown and the partition gets no idle advance until its first commit (whose offset is
past every older entry) or a later `adopt` with the log end. Floors rise through the
reconciler either way. Reconciled reports are clamped to the applied log (entries the
writer never fenced have nothing to lift); a report at or below the current reconciled
offset is a no-op.

Fencing violations. A commit below the promised window (`FencingViolation`) means an
entry whose object may already be exposed to the sweepers is in the log. The partition
is then *frozen* until an operator has investigated and it is adopted again: its M(p)
is not published any more and gets no idle advance (the stored one stays where it
is), `state()` says why, and ``l0gc_watermark_fencing_violations_total`` counts it.

Pluggable parts. `state_class` and `guard_class` choose the GC state and guard classes
hosted per partition (the deterministic simulation swaps in deliberately broken ones).
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
    FencingViolation,
    GuardClosed,
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
    """One owned partition: its GC state, its fence and what is known of its log."""

    partition: str
    state: PartitionGcState
    guard: FencingGuard
    owner_epoch: int
    published_watermark: int
    log_end_known: bool = False
    """True once the state has every log entry (a log end given to adopt, or a commit)."""
    frozen: str | None = None
    """Why M(p) no longer moves here: a fencing violation (see `Publisher.commit`)."""
    dirty: bool = True

    def reconciled_offset(self, offset: int) -> int | None:
        """The state offset a reconciled report maps to, None when it changes nothing."""
        last = self.state.last_applied_offset
        if offset < 0 or last is None:
            return None
        mapped = min(offset, last)
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
        state_class: type[PartitionGcState] = PartitionGcState,
        guard_class: type[FencingGuard] = FencingGuard,
    ) -> None:
        self._store = store
        self._state_class = state_class
        self._guard_class = guard_class
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

    async def adopt(self, partition: str, *, log_end_offset: int | None = None) -> dict[str, Any]:
        """Own `partition` (bumping owner_epoch), restore its state; return `state()`.

        `log_end_offset` is the offset of the last entry in the partition's log, -1 if
        the log is empty, None if unknown (see "The log end" above); give it whenever
        it is known, also to a partition already hosted here. Raise `IllegalTransition`
        if it is below the last applied offset (the partition stays hosted and what is
        known of its log does not change).
        """
        async with self._adopt_lock:
            hosted = self._hosted.get(partition)
            if hosted is None:
                record = await self._store.acquire_ownership(partition, self.owner_id)
                hosted = self._host(record)
        if log_end_offset is not None:
            hosted.state.catch_up(log_end_offset)
            hosted.log_end_known = True
            hosted.dirty = True
        self._update_gauges()
        return self.state(partition)

    def _host(self, record: PartitionRecord) -> _Hosted:
        state = (
            self._state_class.restore(record.tracker)
            if record.tracker is not None
            else self._state_class(created_epoch=record.created_epoch)
        )
        window = state.window_after_recovery()
        if window.floor is None or record.watermark > window.floor:
            # The stored M(p) is the one sweepers act on: never admit at or below it.
            window = EpochWindow.recovered(state.last_applied_epoch, record.watermark)
        guard = self._guard_class(
            window,
            metrics=self.metrics,
            partition=record.partition,
            hold_ttl_s=self._hold_ttl_s,
            clock=self.clock,
        )
        hosted = self._hosted[record.partition] = _Hosted(
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
        return hosted

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
        guard = hosted.guard
        guard.ensure_held(token)
        # While a fence is held the window cannot slide: its lower bound now is the
        # fence's promise for every later entry (see watermark.gcstate).
        lower = guard.window[0]
        try:
            hosted.state.apply(
                offset, token.epoch, admitted_from=token.epoch if lower is None else lower
            )
        except FencingViolation as exc:
            self._freeze(hosted, exc)
            raise
        hosted.log_end_known = True  # entries before `offset` are older: none is unknown
        hosted.dirty = True
        self.abort(token)

    def _freeze(self, hosted: _Hosted, violation: FencingViolation) -> None:
        """Stop moving M(p): an entry below the promised window is in the log, and its
        object may be exposed already. Only an operator can tell what to trust now."""
        if hosted.frozen is None:
            hosted.frozen = str(violation)
            self.metrics.fencing_violations.inc()
        _log.error(
            "watermark.fencing_violation",
            partition=hosted.partition,
            offset=violation.offset,
            epoch=violation.epoch,
            window=list(violation.window),
            published_watermark=hosted.published_watermark,
            error=str(violation),
        )

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
            "log_end_known": hosted.log_end_known,
            "frozen": hosted.frozen,
            "inflight_fences": hosted.guard.inflight,
            "waiting_slides": hosted.guard.exclusive_waiters,
            "dirty": hosted.dirty,
        }

    # -- publishing ----------------------------------------------------------------

    async def publish_now(self, only: Iterable[_Hosted] | None = None) -> dict[str, PublishStatus]:
        """Publish every changed partition (or `only` those) now; return each status."""
        hosts = self._hosted.values() if only is None else only
        chosen = [h for h in hosts if h.dirty and h.frozen is None]
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
            if hosted.frozen or not hosted.log_end_known or not state.is_idle_reconciled:
                continue
            if state.last_applied_epoch >= epoch:
                continue
            if hosted.guard.inflight:
                continue  # writes in flight: it is not idle; do not hold them back
            try:
                async with hosted.guard.exclusive(epoch, self.fence_timeout_s) as admission:
                    # No write is in flight now; re-check what may have changed meanwhile.
                    if admission is Admission.ABOVE and state.is_idle_reconciled:
                        self._advance(hosted, epoch)
                        advanced += 1
            except (StaleEpoch, FenceTimeout, GuardClosed) as exc:
                _log.info(
                    "watermark.idle_advance_skipped", partition=hosted.partition, error=str(exc)
                )
        return advanced

    def _advance(self, hosted: _Hosted, epoch: int) -> None:
        lower = hosted.guard.window[0]
        hosted.state.advance_idle(epoch, admitted_from=epoch if lower is None else lower)
        hosted.dirty = True
        self.metrics.idle_advances.inc()
        _log.info(
            "watermark.idle_advance",
            partition=hosted.partition,
            epoch=epoch,
            watermark=hosted.state.gc_eligible_epoch,
        )

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
