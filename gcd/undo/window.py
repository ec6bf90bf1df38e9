"""The undo window in a round: the sweeper's side of `gcd.rules.undo`.

Design notes: docs/internals/sweep.md, `gcd.undo.window`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import structlog

from gcd.journal.records import JournalRead
from gcd.observe.events import BatchAttempt, BatchOutcome
from gcd.observe.report import RoundCounts
from gcd.rules.candidate import Candidate
from gcd.rules.undo import (
    KeyPlan,
    UndoAction,
    VersionEntry,
    delayed_safe_epoch,
    plan_key,
    store_keeps,
)
from gcd.storage.objectstore import ObjectInfo, SoftDeleteStore
from gcd.undo.mhistory import MHistory
from l0gc.errors import StorageError

__all__ = ["RETENTION_TTL_S", "KeyGroups", "MarkerLedger", "UndoKeeper", "journal_markers"]

RETENTION_TTL_S = 300.0
"""How long a read of the store's soft delete retention is used (as S3's features)."""

log = structlog.get_logger("gcd.undo")


def journal_markers(read: JournalRead) -> Iterator[tuple[str, str]]:
    """(key, marker version id) of every delete marker a journal says l0gc wrote."""
    for record in read.records:
        if record.kind != "after":
            continue
        for pair in record.doc.get("markers") or ():
            if (
                isinstance(pair, list)
                and len(pair) == 2
                and all(isinstance(part, str) for part in pair)
            ):
                yield pair[0], pair[1]


class MarkerLedger:
    """The delete markers l0gc wrote, by key (a `DeleteSink` of the round's deletions)."""

    def __init__(self) -> None:
        self.markers: dict[str, set[str]] = {}

    def add(self, key: str, version_id: str) -> None:
        """Remember one marker l0gc wrote."""
        self.markers.setdefault(key, set()).add(version_id)

    def load(self, read: JournalRead) -> int:
        """Remember every marker `read` names; return how many."""
        count = 0
        for key, version_id in journal_markers(read):
            self.add(key, version_id)
            count += 1
        return count

    def ours(self, key: str) -> set[str]:
        """The version ids of l0gc's markers on `key` (empty: none known)."""
        return self.markers.get(key, set())

    def before(self, attempt: BatchAttempt) -> None:
        """Nothing to do before a request."""

    def after(self, outcome: BatchOutcome) -> None:
        """Remember the markers a request wrote; forget the reclaimed ones."""
        for key, version_id in outcome.markers:
            self.add(key, version_id)
        for key, gone in zip(outcome.deleted, outcome.deleted_version_ids, strict=False):
            known = self.markers.get(key)
            if known is not None and gone in known:
                known.discard(str(gone))
                if not known:
                    del self.markers[key]


@dataclass
class UndoKeeper:
    """A sweeper's undo window: its length, l0gc's markers, and M's history."""

    window_s: float
    ledger: MarkerLedger = field(default_factory=MarkerLedger)
    history: MHistory | None = None
    clock: Callable[[], float] = time.time
    ledger_from: float | None = None
    """The ledger was loaded from the segments shipped since this time only; a marker
    on an eligible key older than it that the ledger does not know may be l0gc's."""
    load_rest: Callable[[], Awaitable[JournalRead]] | None = None
    """Reads every shipped segment (the rest of the ledger), once, when needed."""
    needs_rest: bool = False
    _retention: tuple[float, float | None] | None = None
    _said_short: bool = False

    async def retention(self, store: SoftDeleteStore) -> float | None:
        """The store's soft delete retention (s; None: unreadable), re-read after
        `RETENTION_TTL_S`; a store that cannot keep the window is logged once."""
        now = self.clock()
        if self._retention is None or now - self._retention[0] >= RETENTION_TTL_S:
            try:
                found: float | None = await store.soft_delete_retention()
            except StorageError as exc:  # unreadable: the delayed M, never a guess
                log.warning("undo.store_retention_unreadable", error=str(exc))
                found = None
            self._retention = (now, found)
            log.info("undo.store_retention", retention_s=self._retention[1], window_s=self.window_s)
        found = self._retention[1]
        if not self.covered(found) and not self._said_short:
            self._said_short = True
            log.warning(
                "undo.store_retention_short",
                retention_s=found,
                window_s=self.window_s,
                fix="the store's soft delete does not keep deleted objects for the "
                "whole undo window (or cannot be read): deleting only what was "
                "garbage for a whole window (the M of one window ago) instead; "
                "raise the store's retention to at least the window to delete "
                "plainly",
            )
        return found

    def older_marker(self, marker_at: float | None) -> None:
        """A marker the ledger does not know, on an eligible key: if it is older than
        the segments read, it may be l0gc's; the next round reads the rest first."""
        if (
            self.ledger_from is not None
            and self.load_rest is not None
            and marker_at is not None
            and marker_at < self.ledger_from
        ):
            self.needs_rest = True

    async def complete_ledger(self) -> None:
        """Read every shipped segment once when a round asked for it (`older_marker`)."""
        if not self.needs_rest or self.load_rest is None:
            return
        load, self.load_rest, self.needs_rest, self.ledger_from = self.load_rest, None, False, None
        found = self.ledger.load(await load())
        log.info("undo.ledger_completed", markers=found, keys=len(self.ledger.markers))

    def covered(self, retention_s: float | None) -> bool:
        """True when a store's soft delete keeps deleted objects for the whole window."""
        return store_keeps(retention_s, self.window_s)

    async def ceiling(self, current: int) -> int | None:
        """The delayed M for a store without versions (recording `current` in the history
        first); None when the history does not reach back a whole window, or there is no
        history (no etcd): nothing may be deleted yet. Raises what reading etcd raises."""
        await self.complete_ledger()
        if self.history is None:
            return None
        now = self.clock()
        entries = await self.history.observe(current, now)
        return delayed_safe_epoch(entries, current, now, self.window_s)


@dataclass
class _Group:
    key: str
    epoch: int
    objects: list[tuple[ObjectInfo, bool]] = field(default_factory=list)


class KeyGroups:
    """Every listed version of the key being listed, per listing prefix."""

    def __init__(self, keeper: UndoKeeper) -> None:
        self.keeper = keeper
        self._open: dict[str, _Group] = {}

    def feed(self, prefix: str, obj: ObjectInfo, epoch: int, young: bool) -> _Group | None:
        """Add one version of an eligible key; the group of the key before, once complete."""
        group = self._open.get(prefix)
        done = None
        if group is None or group.key != obj.key:
            done = group
            group = self._open[prefix] = _Group(obj.key, epoch)
        group.objects.append((obj, young))
        return done

    def flush(self, prefix: str | None = None) -> list[_Group]:
        """The open groups of `prefix` (every prefix when None), closed."""
        names = list(self._open) if prefix is None else [prefix]
        return [group for name in names if (group := self._open.pop(name, None)) is not None]

    def plans(
        self, group: _Group, now: float, counts: RoundCounts
    ) -> list[tuple[Candidate, ObjectInfo]]:
        """The candidates to delete for a complete group; what is kept is counted."""
        entries = [
            VersionEntry(
                str(obj.version_id),
                obj.delete_marker,
                obj.is_latest,
                obj.last_modified_s,
                obj.size,
                young,
            )
            for obj, young in group.objects
        ]
        plan = plan_key(entries, self.keeper.ledger.ours(group.key), now, self.keeper.window_s)
        return self._act(plan, group, counts)

    def _act(
        self, plan: KeyPlan, group: _Group, counts: RoundCounts
    ) -> list[tuple[Candidate, ObjectInfo]]:
        by_version = {str(obj.version_id): obj for obj, _ in group.objects}
        if plan.action is UndoAction.HIDE:
            top = next(obj for obj, _ in group.objects if obj.is_latest)
            return [(Candidate(group.key, top.size, group.epoch, hides=plan.hides), top)]
        if plan.action is UndoAction.RECLAIM:
            return [
                (
                    Candidate(
                        group.key,
                        entry.size,
                        group.epoch,
                        entry.version_id,
                        entry.marker,
                        reclaim=True,
                    ),
                    by_version[entry.version_id],
                )
                for entry in plan.targets
            ]
        if plan.action is UndoAction.PENDING:
            counts.pending_keys += 1
            counts.pending_bytes += plan.held_bytes
            oldest = counts.oldest_pending_s
            if plan.marker_at is not None and (oldest is None or plan.marker_at < oldest):
                counts.oldest_pending_s = plan.marker_at
        elif plan.action is UndoAction.FOREIGN:
            counts.foreign_markers += 1
            self.keeper.older_marker(plan.marker_at)
        return []
