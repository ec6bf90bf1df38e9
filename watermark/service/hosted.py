"""One partition hosted by a publisher: its GC state, its fencing guard, its log.

Design notes: docs/internals/publisher.md, `watermark.service.hosted`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from l0gc.contract.namespace import Publication
from l0gc.contract.references import References
from l0gc.errors import ConfigError, FencingViolation
from watermark.core.gcstate import PartitionGcState
from watermark.core.references import ReferenceSet
from watermark.core.window import Admission
from watermark.service.guard import FenceToken, FencingGuard

__all__ = ["WAITING_REFRESH_S", "HostedPartition"]

WAITING_REFRESH_S = 30.0
"""A waiting partition's record is written at least this often (under `RECENT_PUBLISH_S`
of `watermark.api.owners`, 60 s, by which a record's owner counts as running)."""


@dataclass(slots=True)
class HostedPartition:
    """One owned partition: its GC state, its fence and what is known of its log."""

    partition: str
    state: PartitionGcState
    guard: FencingGuard
    owner_epoch: int
    published_watermark: int
    log_end_known: bool = False
    """True once the state has every log entry (a log end given to adopt, or a commit)."""
    frozen: str | None = None
    """Why M(p) no longer moves: the fencing violation that froze it."""
    dirty: bool = True
    """Changed since the last successful publish."""
    sealed: bool = False
    """Its fence is closed and every fence finished: the state holds the whole log."""
    log_end_asked: bool = False
    """An answer to the reconciler has asked for the log end (see "The log end")."""
    waiting_published: str | None = None
    """The `waiting` reason of the last successful publish."""
    waiting_on: str | None = None
    waiting_since: float = 0.0
    """The reason `note_waiting` saw last, and since when (the publisher's clock)."""
    published_at: float | None = None
    """The last successful publish (the publisher's clock)."""
    references: ReferenceSet = field(default_factory=ReferenceSet)
    """The keys its committed, unreleased entries name (`watermark.core.references`)."""

    def _fence_bound(self, default: int) -> int:
        lower = self.guard.window[0]
        return default if lower is None else lower

    def commit(self, token: FenceToken, offset: int, objects: Sequence[object] = ()) -> None:
        """Apply the write fenced by `token` at the log's `offset`, naming `objects` (the
        keys the entry references); the caller releases the fence.

        Raise FenceExpired (the fence is gone: do not commit), InvalidRecord (a bad key)
        or ReferencesFull (no room: the fence stays held) before anything changes,
        IllegalTransition (an offset that does not increase), or FencingViolation, which
        freezes the partition.
        """
        self.guard.ensure_held(token)
        keys = self.references.check(self.partition, objects) if objects else None
        try:
            self.state.apply(offset, token.epoch, admitted_from=self._fence_bound(token.epoch))
        except FencingViolation as exc:
            if self.frozen is None:
                self.frozen = str(exc)
            raise
        if keys is not None:
            self.references.add(offset, keys)
        self.log_end_known = True  # entries before `offset` are older: none is unknown
        self.dirty = True

    def reconciled(self, offset: int, lifted: Collection[str] | None = None) -> None:
        """The reconciler lifted every entry through the log's `offset` (clamped to the
        applied log; a report at or below the last one moves nothing but references),
        and, when it names them, the keys in `lifted` (see `ReferenceSet.release`)."""
        last = self.state.last_applied_offset
        if offset < 0 or last is None:
            return
        mapped = min(offset, last)
        done = self.state.reconciled_offset
        if done is None or mapped > done:
            self.state.reconciled(mapped)
            self.dirty = True
        if self.references.release(mapped, lifted):
            self.dirty = True

    def report(
        self,
        offset: int,
        log_end_offset: int | None,
        lifted: Collection[str] | None = None,
        log_references: References | None = None,
    ) -> bool:
        """A reconciler's report: lifted through `offset`, and (only when an earlier
        answer asked for it) the log's end as read after that answer, with the keys its
        entries name (`learn_log_end`). Return True when the log end was learned from it.
        Raises what `learn_log_end` raises (nothing changes)."""
        learned = False
        if log_end_offset is not None and not self.log_end_known and self.log_end_asked:
            self.learn_log_end(log_end_offset, log_references)
            learned = True
        self.reconciled(offset, lifted)
        if not self.log_end_known:
            self.log_end_asked = True  # this answer says log_end_wanted
        return learned

    @property
    def references_from(self) -> int:
        """The first log offset whose entry the state never applied (a log end is told
        with the keys of the entries from here on: `learn_log_end`)."""
        last = self.state.last_applied_offset
        return 0 if last is None else last + 1

    def learn_log_end(self, log_end_offset: int, log_references: References | None = None) -> None:
        """The log's last entry is at `log_end_offset` (-1: empty); see "The log end".

        `log_references`: the keys the log's entries name, at least those from
        `references_from` through the log end. Entries committed after the last publish
        of a crashed owner are in the log but in no record: without their keys a
        reconciler that reports past them unnamed would release a live object unseen
        (docs/references.md, "After a crash"). So once the partition holds references,
        a log end past the applied log without them raises ConfigError; an entry past
        the log end raises ConfigError, too many keys `ReferencesFull`; IllegalTransition
        for a log end below the applied log. Nothing changes when it raises."""
        recovered: Sequence[tuple[int, tuple[str, ...]]] = ()
        if not self.log_end_known:
            start = self.references_from
            if log_references is not None:
                recovered = self.references.recover(
                    self.partition, log_references, start - 1, log_end_offset
                )
            elif self.references.sent and log_end_offset >= start:
                raise ConfigError(
                    f"partition {self.partition!r} holds references: a log end must come "
                    f"with log_references, the object keys each log entry from offset "
                    f"{start} through {log_end_offset} names (docs/references.md)"
                )
        self.state.catch_up(log_end_offset)
        for offset, keys in recovered:
            self.references.add(offset, keys)
        if log_references is not None:
            self.references.sent = True
        self.log_end_known = True
        self.dirty = True

    def is_idle_below(self, epoch: int) -> bool:
        """True when an idle advance to `epoch` is due: not frozen, the log end known,
        everything reconciled, the applied epoch below `epoch` and no write in flight."""
        state = self.state
        return (
            self.frozen is None
            and self.log_end_known
            and state.is_idle_reconciled
            and state.last_applied_epoch < epoch
            and not self.guard.inflight
        )

    async def advance_idle(self, epoch: int, timeout_s: float) -> bool:
        """Slide the fence to `epoch` under the exclusive lock and advance the GC state;
        False if a writer got there first. Raise what `FencingGuard.exclusive` raises."""
        async with self.guard.exclusive(epoch, timeout_s) as admission:
            # No write is in flight now; re-check what may have changed meanwhile.
            if admission is not Admission.ABOVE or not self.state.is_idle_reconciled:
                return False
            self.state.advance_idle(epoch, admitted_from=self._fence_bound(epoch))
        self.dirty = True
        return True

    async def close(self, drain_timeout_s: float) -> None:
        """Stop admitting writes and wait for the fences held (revoking what is left);
        `sealed` when the state provably holds the whole log: its end was known and no
        fence was ever reclaimed or revoked (such a writer may have appended an entry
        the state never saw)."""
        self.guard.close()
        await self.guard.drain(drain_timeout_s)
        if self.log_end_known and self.frozen is None and self.guard.taken_back == 0:
            self.sealed = True
            self.dirty = True

    def learn_stored_watermark(self, watermark: int) -> int | None:
        """The stored M(p) is `watermark`; if that is above what this owner published (an
        operator raised it), admit no epoch <= it any more and take back the fences held
        at or below it. Return how many fences were taken back, None if nothing changed.
        """
        if watermark <= self.published_watermark:
            return None
        self.published_watermark = watermark
        return self.guard.raise_floor(watermark)

    def waiting(self, cluster_epoch: int | None) -> dict[str, Any] | None:
        """Why M(p) is more than two epochs behind `cluster_epoch` (None: it is not, or
        cannot be told; two behind is the window's steady state): frozen by a fencing
        violation, the log end unknown (since an adoption without it), the reconciler
        behind the committed log, or fences held (an idle partition advances only with
        none in flight). For operators (`gcd status`)."""
        state = self.state
        if cluster_epoch is None or state.gc_eligible_epoch >= cluster_epoch - 2:
            return None
        if self.frozen is not None:
            return {"on": "fencing_violation"}
        if not self.log_end_known:
            return {"on": "log_end"}
        last, done = state.last_applied_offset, state.reconciled_offset
        if last is not None and (done is None or done < last):
            return {
                "on": "reconciler",
                "committed_offset": last,
                "reconciled_offset": -1 if done is None else done,
            }
        if self.guard.inflight:
            return {"on": "fences", "fences": self.guard.inflight}
        return None

    def note_waiting(self, cluster_epoch: int | None, now: float) -> None:
        """Note the `waiting` reason at `now`; mark the partition dirty when it changed
        since the last publish (so the record says it within a round), and every
        `WAITING_REFRESH_S` while it waits: a record behind the cluster epoch that nobody
        refreshes has no running owner (`gcd status`, `l0gc.etcd.liveness.live_owner`)."""
        waiting = self.waiting(cluster_epoch)
        on = None if waiting is None else waiting["on"]
        if on != self.waiting_on:
            self.waiting_on, self.waiting_since = on, now
        stale = self.published_at is None or now - self.published_at >= WAITING_REFRESH_S
        if on != self.waiting_published or (on is not None and stale):
            self.dirty = True

    def publication(self, owner: str, cluster_epoch: int | None = None) -> Publication:
        """What a publish of this partition writes, as `owner`: the GC state's M(p), or
        the stored one when that is higher (it was raised under this owner: publishing
        the lower value would only be refused)."""
        return Publication(
            partition=self.partition,
            owner=owner,
            owner_epoch=self.owner_epoch,
            watermark=max(self.state.gc_eligible_epoch, self.published_watermark),
            window=self.guard.window,
            tracker=self.state.snapshot(),
            sealed=self.sealed,
            waiting=self.waiting(cluster_epoch),
            references=self.references.stored(),
        )

    def describe(self, owner: str) -> dict[str, Any]:
        """What is known of the partition, JSON-able (for the HTTP API and logs)."""
        state = self.state
        return {
            "partition": self.partition,
            "owner": owner,
            "owner_epoch": self.owner_epoch,
            "window": list(self.guard.window),
            "watermark": state.gc_eligible_epoch,
            "published_watermark": self.published_watermark,
            "created_epoch": state.created_epoch,
            "applied_window": list(state.applied_window),
            "last_applied_offset": state.last_applied_offset,
            "reconciled_offset": state.reconciled_offset,
            "log_end_known": self.log_end_known,
            "log_end_wanted": not self.log_end_known and self.frozen is None,
            "references_from": None if self.log_end_known else self.references_from,
            "sealed": self.sealed,
            "frozen": self.frozen,
            "inflight_fences": self.guard.inflight,
            "waiting_slides": self.guard.exclusive_waiters,
            "dirty": self.dirty,
            "references": self.references.keys if self.references.sent else None,
        }
