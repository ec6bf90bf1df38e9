"""The publisher service: hosts the GC state of the partitions this process owns.

Design notes: docs/internals/publisher.md, `watermark.service.publisher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Literal

import structlog

from l0gc.contract.namespace import PublishStatus, partition_order
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import DEFAULT_MAX_REFERENCES, References
from l0gc.errors import (
    EpochAhead,
    FencingViolation,
    IllegalTransition,
    InvalidRecord,
    L0gcError,
    PartitionNotHosted,
    WriteRefused,
)
from l0gc.etcd.store import WatermarkStore
from l0gc.events import Emitter, Hooks
from watermark.core.fencelock import Outcome, repeat_of
from watermark.core.gcstate import PartitionGcState
from watermark.core.references import ReferenceSet
from watermark.core.window import EpochWindow
from watermark.events import (
    ClusterEpochRead,
    FencingViolationFound,
    HostedChanged,
    IdleAdvanced,
    IdleAdvanceSkipped,
    Published,
    PublishFailed,
    PublishRefused,
    PublishRound,
)
from watermark.service.eventlog import EVENT_LOG
from watermark.service.fence import Fence, FenceBlock
from watermark.service.guard import DEFAULT_HOLD_TTL_S, FenceToken, FencingGuard
from watermark.service.hosted import HostedPartition
from watermark.service.metrics import WatermarkMetrics
from watermark.service.records import RecordWatch

__all__ = ["DEFAULT_DRAIN_TIMEOUT_S", "DEFAULT_FENCE_TIMEOUT_S", "Publisher"]

DEFAULT_FENCE_TIMEOUT_S = 5.0
DEFAULT_DRAIN_TIMEOUT_S = 5.0
_log = structlog.get_logger("watermark.publisher")
_PUBLISHER_EVENTS = (
    Published,
    PublishRefused,
    PublishFailed,
    PublishRound,
    ClusterEpochRead,
    IdleAdvanced,
    IdleAdvanceSkipped,
    FencingViolationFound,
    HostedChanged,
)


class _Default(enum.Enum):
    HOOK = "metrics and log"
    """`Publisher(hook=...)` not given: its metrics' hook and the log."""


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
        hook: Hooks | Literal[_Default.HOOK] = _Default.HOOK,
        max_references: int = DEFAULT_MAX_REFERENCES,
    ) -> None:
        self._store = store
        self.max_references = max_references
        self._state_class = state_class
        self._guard_class = guard_class
        self.owner_id = owner_id
        self.publish_interval_s = publish_interval_s
        self.idle_advance = idle_advance
        self.clock = clock
        self.metrics = metrics if metrics is not None else WatermarkMetrics()
        self._hook: Hooks = (self.metrics.hook, EVENT_LOG) if hook is _Default.HOOK else hook
        self._emit = Emitter(self._hook, _PUBLISHER_EVENTS)
        self._on_published = self._emit.route_of(Published)
        self._on_refused = self._emit.route_of(PublishRefused)
        self._on_failed = self._emit.route_of(PublishFailed)
        self._hold_ttl_s = hold_ttl_s
        self.fence_timeout_s = fence_timeout_s
        self._drain_timeout_s = drain_timeout_s
        self._hosted: dict[str, HostedPartition] = {}
        self._adopt_lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()
        """One publish at a time: a round's publish still in flight must not land after a
        hand-over's sealed one (its retry would write the record again, unsealed)."""
        self.cluster_epoch: int | None = None
        self._epoch_read_lock = asyncio.Lock()
        self._epoch_reads_started = 0
        self._epoch_read_last = (0, -1)  # (sequence number, cluster epoch) of the last read
        self.published_once = False
        self.owned_until: float | None = None
        """Ownership lease deadline on `clock` (None: no lease; see the module docstring)."""
        self._records = RecordWatch(store, owner_id)

    # -- ownership -----------------------------------------------------------------

    @property
    def store(self) -> WatermarkStore:
        """The partition records' store (the HTTP API registers partitions through it)."""
        return self._store

    @property
    def partitions(self) -> list[str]:
        """The partitions hosted here, in `partition_order` (orders/2 before orders/10)."""
        return sorted(self._hosted, key=partition_order)

    def hosts(self, partition: str) -> bool:
        """True when `partition` is hosted here (a membership test, without sorting)."""
        return partition in self._hosted

    async def adopt(
        self,
        partition: str,
        *,
        log_end_offset: int | None = None,
        log_references: References | None = None,
    ) -> dict[str, Any]:
        """Own `partition` (bumping owner_epoch), restore its state; return `state()`.

        `log_end_offset` is the offset of the last entry in the partition's log, -1 if
        the log is empty, None if unknown (see "The log end" above); give it whenever
        it is known, also to a partition already hosted here, with `log_references`,
        the keys its entries name (`HostedPartition.learn_log_end`). Raise what that
        raises (`IllegalTransition` for a log end below the last applied offset): the
        partition stays hosted and what is known of its log does not change.
        """
        async with self._adopt_lock:
            hosted = self._hosted.get(partition)
            if hosted is not None and not await self._still_owned(hosted):
                # Owned elsewhere since (A -> B -> A): this copy of the window predates
                # what the other owner applied and published; it must not admit anything.
                self._drop(hosted, "owned by another publisher since")
                hosted = None
            if hosted is None:
                record = await self._store.acquire_ownership(partition, self.owner_id)
                hosted = self._host(record)
        if log_end_offset is not None:
            hosted.learn_log_end(log_end_offset, log_references)
        self._update_gauges()
        return self.state(partition)

    async def _still_owned(self, hosted: HostedPartition) -> bool:
        """True if the stored record still names this publisher at the owner_epoch it
        acquired (an unregistered or unreadable record counts as moved)."""
        try:
            record = await self._store.get_partition(hosted.partition)
        except InvalidRecord:
            return False
        return (
            record is not None
            and record.owner == self.owner_id
            and record.owner_epoch == hosted.owner_epoch
        )

    def _host(self, record: PartitionRecord) -> HostedPartition:
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
            hook=self._hook,
            partition=record.partition,
            hold_ttl_s=self._hold_ttl_s,
            clock=self.clock,
        )
        hosted = self._hosted[record.partition] = HostedPartition(
            partition=record.partition,
            state=state,
            guard=guard,
            owner_epoch=record.owner_epoch,
            published_watermark=record.watermark,
            # Sealed by the previous owner (or by registration): the snapshot is the log.
            log_end_known=record.log_is_complete,
            references=ReferenceSet.restore(record.references, max_keys=self.max_references),
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

    def serving(self, partition: str) -> bool:
        """True while `partition` is hosted here and its fence is open (not handing over)."""
        hosted = self._hosted.get(partition)
        return hosted is not None and not hosted.guard.closed and not self.lapsed()

    def learn_log_end(
        self, partition: str, log_end_offset: int, log_references: References | None = None
    ) -> dict[str, Any]:
        """Tell a hosted partition where its log ends (as `adopt` does, but never taking
        ownership); PartitionNotHosted if it is not hosted here. Returns `state()`."""
        self._get(partition).learn_log_end(log_end_offset, log_references)
        return self.state(partition)

    async def hand_over(self, partitions: Iterable[str]) -> dict[str, bool]:
        """Stop hosting `partitions` for their next owner: close their fences, let held
        ones finish (bounded by the drain timeout), publish each once (sealed when its
        state provably holds the whole log) and drop them. Returns, per partition, True
        when a sealed publish landed (the next owner knows where the log ends)."""
        hosts = [self._hosted[p] for p in dict.fromkeys(partitions) if p in self._hosted]
        await asyncio.gather(*(h.close(self._drain_timeout_s) for h in hosts))
        results: dict[str, PublishStatus] = {}
        if not self.lapsed():
            results = await self.publish_now(hosts)
        for hosted in hosts:
            self._drop(hosted, "handed over")
        return {
            h.partition: h.sealed and results.get(h.partition) is PublishStatus.OK for h in hosts
        }

    def drop(self, partition: str, reason: str) -> bool:
        """Stop hosting `partition` at once, publishing nothing (it was lost); False if
        it was not hosted."""
        hosted = self._hosted.get(partition)
        if hosted is None:
            return False
        self._drop(hosted, reason)
        return True

    def lapsed(self) -> bool:
        """True (after dropping every partition) once the ownership lease has lapsed."""
        until = self.owned_until
        if until is None or self.clock() < until:
            return False
        if self._hosted:
            _log.warning(
                "watermark.ownership_lapsed", owner=self.owner_id, partitions=len(self._hosted)
            )
            for hosted in list(self._hosted.values()):
                self._drop(hosted, "ownership lease lapsed")
        return True

    async def release(self, partition: str) -> None:
        """Stop hosting `partition`: abort fence waiters, drain holders, publish, drop."""
        hosted = self._get(partition)
        await hosted.close(self._drain_timeout_s)
        await self.publish_now([hosted])
        self._drop(hosted, "released")

    def _drop(self, hosted: HostedPartition, reason: str) -> None:
        if self._hosted.get(hosted.partition) is not hosted:
            return
        del self._hosted[hosted.partition]
        hosted.guard.close()
        hosted.guard.revoke_all()
        self._update_gauges()
        _log.info("watermark.partition_dropped", partition=hosted.partition, reason=reason)

    def _get(self, partition: str) -> HostedPartition:
        self.lapsed()
        hosted = self._hosted.get(partition)
        if hosted is None:
            raise PartitionNotHosted(partition)
        return hosted

    # -- writers -------------------------------------------------------------------

    async def acquire(
        self, partition: str, epoch: int, timeout_s: float | None = None
    ) -> FenceToken:
        """Fence `epoch` on `partition`; the token must be committed or aborted.

        Raises EpochAhead for an epoch above the cluster epoch (re-read from etcd once
        before refusing; EtcdUnavailable if that read fails), StaleEpoch below the window.
        """
        hosted = self._get(partition)
        known = self.cluster_epoch
        if known is None or epoch > known:
            await self._refuse_epoch_ahead(partition, epoch)
        timeout = self.fence_timeout_s if timeout_s is None else timeout_s
        return await hosted.guard.acquire(epoch, timeout)

    def try_acquire(self, partition: str, epoch: int) -> FenceToken | None:
        """`acquire` when it can decide without waiting or reading etcd (the epoch is
        inside the window and at most the known cluster epoch): the token, else None.
        PartitionNotHosted as `acquire`."""
        hosted = self._get(partition)
        known = self.cluster_epoch
        if known is None or epoch > known:
            return None
        return hosted.guard.try_acquire(epoch)

    async def _refuse_epoch_ahead(self, partition: str, epoch: int) -> None:
        """Raise EpochAhead if `epoch` is above the cluster epoch, as read from etcd after
        this fence arrived: a writer that has just seen the ticker advance is not refused.

        The cluster epoch only goes up, so any value read that is >= `epoch` proves it
        real. Fences waiting together share one read that began after they all arrived
        (the lock serialises reads; a read's sequence number says when it began).
        """
        arrived = self._epoch_reads_started
        async with self._epoch_read_lock:
            seq, current = self._epoch_read_last
            if seq <= arrived:  # no read began after this fence arrived: read now
                self._epoch_reads_started += 1
                seq = self._epoch_reads_started
                current = await self.read_cluster_epoch()
                self._epoch_read_last = (seq, current)
        if epoch > max(current, self.cluster_epoch or current):
            _log.warning(
                "watermark.epoch_ahead", partition=partition, epoch=epoch, cluster_epoch=current
            )
            raise EpochAhead(epoch, current)

    def fence(
        self, partition: str, epoch: int, timeout_s: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Fence]:
        """``async with publisher.fence(p, epoch) as f: ... f.commit(offset)``."""
        return FenceBlock(self, partition, epoch, timeout_s)

    def commit(self, token: FenceToken, offset: int, objects: Sequence[object] = ()) -> bool:
        """Apply the committed write at the writer's log `offset`, then release the fence;
        `objects`: the keys the entry references (see `watermark.core.references`).

        Idempotent: a commit repeated with the same offset after it succeeded returns
        True and changes nothing (False: committed now). Raises AlreadyCommitted (that
        fence was committed at another offset), FenceExpired (reclaimed, aborted,
        revoked or refused before: do not commit), PartitionNotHosted, or, refused for
        good, IllegalTransition (an offset that does not increase) and FencingViolation;
        a fence refused for good is released at once (its `outcome` is REFUSED), so it
        holds up nobody's window slide.
        """
        if repeat_of(token, offset):
            return True
        hosted = self._get(token.partition)
        try:
            hosted.commit(token, offset, objects)
        except FencingViolation as exc:
            hosted.guard.release(token, Outcome.REFUSED)
            self._emit(
                FencingViolationFound(
                    hosted.partition,
                    exc.offset,
                    exc.epoch,
                    exc.window,
                    hosted.published_watermark,
                    str(exc),
                )
            )
            raise
        except IllegalTransition:
            hosted.guard.release(token, Outcome.REFUSED)
            raise
        hosted.guard.release(token, Outcome.COMMITTED, offset)
        return False

    def abort(self, token: FenceToken) -> bool:
        """Release a fence without committing; False if it was no longer held."""
        hosted = self._hosted.get(token.partition)
        return hosted is not None and hosted.guard.release(token)

    def is_held(self, token: FenceToken) -> bool:
        """True while `token` may still be committed (held, partition still hosted)."""
        hosted = self._hosted.get(token.partition)
        return hosted is not None and hosted.guard.is_held(token)

    def reclaim_expired(self) -> int:
        """Reclaim the fences past their hold deadline, on every partition."""
        return sum(h.guard.reclaim_expired() for h in self._hosted.values())

    def reconciled(
        self,
        partition: str,
        offset: int,
        *,
        log_end_offset: int | None = None,
        objects: Collection[str] | None = None,
        log_references: References | None = None,
    ) -> None:
        """The reconciler lifted every entry of `partition` through the writer's `offset`
        (and, when given, exactly the keys in `objects`: `watermark.core.references`);
        `log_end_offset`: the log's last offset, read after a `state()` that said
        ``log_end_wanted`` (see "The log end" in `watermark.service.hosted`), with
        `log_references`, the keys of its entries from ``references_from`` on."""
        hosted = self._get(partition)
        if hosted.report(offset, log_end_offset, objects, log_references):
            _log.info(
                "watermark.log_end_reported", partition=partition, log_end_offset=log_end_offset
            )

    def state(self, partition: str) -> dict[str, Any]:
        """What this process knows of `partition`, JSON-able (for the HTTP API and logs)."""
        return self._get(partition).describe(self.owner_id)

    # -- publishing ----------------------------------------------------------------

    async def publish_now(
        self, only: Iterable[HostedPartition] | None = None
    ) -> dict[str, PublishStatus]:
        """Publish every changed partition (or `only` those) now; return each status.
        Publishes run one at a time (a hand-over's sealed publish waits for a round in
        flight, and the round's partitions are chosen once it has the turn)."""
        results: dict[str, PublishStatus] = {}
        async with self._publish_lock:
            self.lapsed()
            hosts = list(self._hosted.values()) if only is None else only
            hosted = self._hosted
            chosen = [
                h for h in hosts if h.dirty and h.frozen is None and hosted.get(h.partition) is h
            ]
            if chosen:
                started = time.perf_counter()
                # One store call for all of them: the store reads the records once (one
                # range read from a few hundred partitions on) and writes them in
                # transactions of PUBLISH_BATCH itself. Calling it per PUBLISH_BATCH slice
                # cost a round of ~100 gets plus a txn per slice (10k partitions on etcd:
                # 2.5 s instead of 0.7 s).
                await self._publish(chosen, results)
                elapsed = time.perf_counter() - started
                ok = sum(status is PublishStatus.OK for status in results.values())
                self._emit(PublishRound(len(chosen), ok, elapsed))
        self.published_once = True
        self._update_gauges()
        return results

    async def _publish(
        self, batch: list[HostedPartition], results: dict[str, PublishStatus]
    ) -> None:
        pubs = [hosted.publication(self.owner_id, self.cluster_epoch) for hosted in batch]
        for hosted in batch:
            hosted.dirty = False  # a change during the await marks it dirty again
        try:
            outcomes = await self._store.publish(pubs)
        except L0gcError as exc:
            # Transactions that landed before the failure stay written; their partitions
            # are published again (same M(p), accepted) next round.
            for hosted in batch:
                hosted.dirty = True
            if self._on_failed is not None:
                self._on_failed(PublishFailed(len(batch), str(exc)))
            return
        on_published, on_refused = self._on_published, self._on_refused
        for hosted, pub, outcome in zip(batch, pubs, outcomes, strict=True):
            status = outcome.status
            results[hosted.partition] = status
            if status is PublishStatus.OK:
                hosted.published_watermark = pub.watermark
                hosted.waiting_published = None if pub.waiting is None else pub.waiting["on"]
                hosted.published_at = self.clock()
                if on_published is not None:
                    on_published(Published(pub.partition, pub.watermark))
                continue
            if on_refused is not None:
                stored = outcome.record
                on_refused(
                    PublishRefused(
                        pub.partition,
                        status,
                        pub.watermark,
                        pub.owner_epoch,
                        None if stored is None else stored.watermark,
                        None if stored is None else stored.owner,
                        None if stored is None else stored.owner_epoch,
                        outcome.detail,
                    )
                )
            if status is PublishStatus.REFUSED_LOWER and outcome.record is not None:
                self._learn_watermark(hosted, outcome.record.watermark)
            if status in (PublishStatus.STALE_OWNER, PublishStatus.MISSING):
                self._drop(hosted, status.value)  # a stale owner stops publishing
            elif status is PublishStatus.MALFORMED:
                hosted.dirty = True  # retried next round; an operator must repair the record

    def _learn_watermark(self, hosted: HostedPartition, watermark: int) -> None:
        revoked = hosted.learn_stored_watermark(watermark)
        if revoked is not None:
            _log.warning(
                "watermark.floor_raised",
                partition=hosted.partition,
                watermark=watermark,
                fences_revoked=revoked,
                detail="the stored M(p) was raised above this owner's: no epoch at or below "
                "it is admitted any more",
            )

    async def check_records(self) -> None:
        """Learn what others wrote to the hosted records since the last check
        (`watermark.service.records`): a record deleted (deregistered), or owned by another
        owner or at another owner_epoch (revoked), drops the partition at once; an M(p)
        raised above this owner's raises its fencing floor
        (`HostedPartition.learn_stored_watermark`)."""
        for name, record in (await self._records.changed(self._hosted)).items():
            hosted = self._hosted.get(name)
            if hosted is not None:
                self._apply_record(hosted, record)

    def _apply_record(
        self, hosted: HostedPartition, record: PartitionRecord | InvalidRecord | None
    ) -> None:
        if record is None:
            self._drop(hosted, "deregistered")
        elif isinstance(record, InvalidRecord):
            return  # sweepers block on it; an operator repairs it, then it is read again
        elif record.owner != self.owner_id or record.owner_epoch != hosted.owner_epoch:
            self._drop(
                hosted,
                f"revoked: the record names owner {record.owner!r} at owner_epoch "
                f"{record.owner_epoch} (this owner holds {hosted.owner_epoch})",
            )
        else:
            self._learn_watermark(hosted, record.watermark)

    async def read_cluster_epoch(self) -> int:
        """Read the cluster epoch (and export it as a metric)."""
        self.cluster_epoch = await self._store.get_cluster_epoch()
        self._emit(ClusterEpochRead(self.cluster_epoch))
        return self.cluster_epoch

    async def advance_idle(self, epoch: int | None = None) -> int:
        """Advance idle, reconciled partitions to the cluster epoch (read now unless
        given); return how many were advanced. See `watermark.service.hosted`."""
        if epoch is None:
            epoch = await self.read_cluster_epoch()
        self.lapsed()
        advanced = 0
        for hosted in list(self._hosted.values()):
            if not hosted.is_idle_below(epoch):
                continue
            try:
                if await hosted.advance_idle(epoch, self.fence_timeout_s):
                    advanced += 1
                    self._emit(
                        IdleAdvanced(hosted.partition, epoch, hosted.state.gc_eligible_epoch)
                    )
            except WriteRefused as exc:
                self._emit(IdleAdvanceSkipped(hosted.partition, str(exc)))
        return advanced

    async def run_once(self) -> None:
        """One round: reclaim the fences past their hold deadline, learn what others
        wrote to the records (`check_records`), idle advances (if enabled), then publish
        what changed."""
        self.reclaim_expired()
        try:
            await self.check_records()
            epoch = await self.read_cluster_epoch()
            if self.idle_advance:
                await self.advance_idle(epoch)
            now = self.clock()
            for hosted in self._hosted.values():
                hosted.note_waiting(epoch, now)
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
        """Close every guard, wait (bounded by the drain timeout) for held fences to
        finish and revoke the rest; partitions left provably complete are sealed, so
        the final publish tells the next owner where their logs end."""
        hosted = list(self._hosted.values())
        await asyncio.gather(*(h.close(self._drain_timeout_s) for h in hosted))

    async def shutdown(self) -> None:
        """Abort fence waiters, let holders commit (bounded), publish a final time."""
        self.abort_waiters()
        await self.drain()
        await self.publish_now()
        await self._records.close()
        _log.info("watermark.publisher_stopped", partitions=len(self._hosted))

    def _update_gauges(self) -> None:
        watermarks = [h.published_watermark for h in self._hosted.values()]
        waits = [h.waiting_since for h in self._hosted.values() if h.waiting_on == "log_end"]
        self._emit(
            HostedChanged(
                len(self._hosted),
                min(watermarks) if watermarks else None,
                len(waits),
                self.clock() - min(waits) if waits else 0.0,
            )
        )
