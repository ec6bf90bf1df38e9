"""Partition GC state: up to which epoch a partition's L0 objects are garbage.

Design notes: docs/internals/publisher.md, `watermark.core.gcstate`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Self

from l0gc.errors import ConfigError, FencingViolation, IllegalTransition
from watermark.core.snapshot import SNAPSHOT_VERSION, parse_snapshot
from watermark.core.window import Admission, EpochWindow

__all__ = ["DEFAULT_MAX_PENDING_SLIDES", "MAX_LOG_OFFSET", "PartitionGcState", "PendingSlide"]

DEFAULT_MAX_PENDING_SLIDES = 1024
MAX_LOG_OFFSET = 2**53 - 1
"""The highest log offset a commit or a log end may carry (9,007,199,254,740,991: exact in
every JSON parser, and 285 years of a million entries a second). A higher one is refused
and changes nothing, so no single writer's value can leave the state where no later
offset is legal (an offset of 2**63 - 1 did, for every writer, across restarts)."""
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class PendingSlide:
    """A raise of the applied window's lower bound at log `offset`, not yet reconciled.

    Every entry after `offset` has an epoch >= `previous_applied`, so once the
    reconciler has lifted everything through `offset`, the floor becomes
    `previous_applied`.
    """

    offset: int
    previous_applied: int


class PartitionGcState:
    """The GC state machine of one partition: feed it the log, read M(p).

    ``PartitionGcState(created_epoch=E)`` starts with the applied window ``[E, E]``,
    floor E and M(p) = E - 1.
    """

    __slots__ = (
        "_created_epoch",
        "_floor",
        "_last_applied_offset",
        "_max_applied",
        "_max_pending_slides",
        "_pending",
        "_previous_applied",
        "_reconciled_offset",
    )

    def __init__(
        self, created_epoch: int, *, max_pending_slides: int = DEFAULT_MAX_PENDING_SLIDES
    ) -> None:
        if type(created_epoch) is not int or not 0 <= created_epoch <= _INT64_MAX:
            raise ConfigError(
                f"created_epoch must be an integer >= 0 (the cluster epoch when the partition "
                f"was registered), got {created_epoch!r}"
            )
        if type(max_pending_slides) is not int or max_pending_slides < 1:
            raise ConfigError(
                f"max_pending_slides must be an integer >= 1, got {max_pending_slides!r}; "
                f"the default is {DEFAULT_MAX_PENDING_SLIDES}"
            )
        self._created_epoch = created_epoch
        self._max_pending_slides = max_pending_slides
        self._floor = created_epoch
        self._previous_applied = created_epoch
        self._max_applied = created_epoch
        self._last_applied_offset: int | None = None
        self._reconciled_offset: int | None = None
        self._pending: deque[PendingSlide] = deque()

    # -- reading -------------------------------------------------------------------

    @property
    def created_epoch(self) -> int:
        """The cluster epoch at which the partition was registered."""
        return self._created_epoch

    @property
    def max_pending_slides(self) -> int:
        """How many slides may wait for the reconciler before the oldest are merged."""
        return self._max_pending_slides

    @property
    def previous_applied(self) -> int:
        """Lower bound of the applied window: no later entry may have a lower epoch.

        The fence's lower bound at the last applied entry (its name is the design's)."""
        return self._previous_applied

    @property
    def last_applied_epoch(self) -> int:
        """Upper bound of the applied window (max_applied); `created_epoch` at first."""
        return self._max_applied

    @property
    def applied_window(self) -> tuple[int, int]:
        """``(previous_applied, max_applied)``."""
        return (self._previous_applied, self._max_applied)

    @property
    def last_applied_offset(self) -> int | None:
        """Offset of the last applied entry (data or housekeeping), None before the first."""
        return self._last_applied_offset

    @property
    def reconciled_offset(self) -> int | None:
        """The reconciler has lifted every entry through this offset; None before it reports."""
        return self._reconciled_offset

    @property
    def floor(self) -> int:
        """The lowest epoch whose objects must be kept: M(p) + 1."""
        return self._floor

    @property
    def gc_eligible_epoch(self) -> int:
        """M(p) = floor - 1: objects of this partition with epoch <= it are garbage."""
        return self._floor - 1

    @property
    def pending_slides(self) -> tuple[PendingSlide, ...]:
        """Slides the reconciler has not passed yet, oldest first."""
        return tuple(self._pending)

    @property
    def is_idle_reconciled(self) -> bool:
        """True when the reconciler has passed every applied entry (or none was applied)."""
        return self._reconciled_offset == self._last_applied_offset

    def window_after_recovery(self) -> EpochWindow:
        """The fencing window a new leader starts with: ``[max_applied]``, floor M(p)."""
        return EpochWindow.recovered(self.last_applied_epoch, self.gc_eligible_epoch)

    # -- events --------------------------------------------------------------------

    def apply(self, offset: int, epoch: int, *, admitted_from: int) -> Admission:
        """Apply the committed data entry at log `offset` whose object has `epoch`.

        `admitted_from` is the fencing window's oldest accepted epoch when the entry
        was committed (``guard.window[0]``): the fence admits nothing below it any
        more, so it becomes the applied window's lower bound if that is lower. Return
        ABOVE if `epoch` raised ``max_applied``, else INSIDE. Raise `FencingViolation`
        if `epoch` is below the applied window or below `admitted_from`, and
        `IllegalTransition` if `offset` does not increase; in every case nothing changes.
        """
        self._require_next_offset(offset, "apply")
        lower = max(self._previous_applied, admitted_from)
        if epoch < lower:
            # Below the applied window, or below the fence's own lower bound (the fence
            # slid past a write it had admitted): either way fencing failed.
            raise FencingViolation(offset, epoch, (lower, max(lower, self._max_applied)))
        return self._take(offset, epoch, admitted_from)

    def advance_epoch(self, offset: int, epoch: int, *, admitted_from: int) -> Admission:
        """Apply the housekeeping entry at log `offset` that advances to `epoch`, no data.

        Like a data entry if `epoch` is not below the applied window (ABOVE or
        INSIDE). Below it, only the offset is recorded and the result is BELOW: an
        entry without data cannot violate fencing, and every replica must still pass
        it. Raise `IllegalTransition` (nothing changes) as `apply` does.
        """
        self._require_next_offset(offset, "advance_epoch")
        self._require_admitted(epoch, admitted_from, "advance_epoch")
        if epoch < self._previous_applied:
            self._last_applied_offset = offset
            return Admission.BELOW
        return self._take(offset, epoch, admitted_from)

    def advance_idle(self, epoch: int, *, admitted_from: int) -> Admission:
        """Advance an idle, fully reconciled partition to `epoch` without a log entry.

        The owner calls it after sliding its fence up to `epoch` with no write in flight;
        `admitted_from` is the fence's lower bound after that slide. Nothing is left for
        the reconciler, so the floor rises at once to the new lower bound. Return ABOVE;
        INSIDE or BELOW (nothing changes) if `epoch` is not above ``max_applied``. Raise
        `IllegalTransition` (nothing changes) if an applied entry is not reconciled yet
        or `admitted_from` is above `epoch`.
        """
        self._require_admitted(epoch, admitted_from, "advance_idle")
        if not self.is_idle_reconciled:
            raise IllegalTransition(
                f"advance_idle to epoch {epoch}: the reconciler has passed offset "
                f"{self._reconciled_offset} but entries through {self._last_applied_offset} "
                "are applied; only a fully reconciled partition is idle"
            )
        if epoch <= self._max_applied:
            return Admission.BELOW if epoch < self._previous_applied else Admission.INSIDE
        self._max_applied = epoch
        self._previous_applied = max(self._previous_applied, admitted_from)
        self._floor = self._previous_applied
        return Admission.ABOVE

    def catch_up(self, log_end_offset: int) -> None:
        """Account for log entries through `log_end_offset` that this state never applied.

        A new owner calls it with the offset of the log's last entry (-1 for an empty
        log): entries committed after the snapshot it restored were admitted by the old
        fence, so their epochs are >= ``previous_applied``; they count as applied but
        unknown, and the reconciler must pass `log_end_offset` before the floor can rise
        above ``previous_applied``. Later entries are applied at higher offsets. A no-op
        at the last applied offset; raise `IllegalTransition` (nothing changes) below
        it: the log cannot be shorter than what was applied from it.
        """
        last = self._last_applied_offset
        if type(log_end_offset) is not int or not -1 <= log_end_offset <= MAX_LOG_OFFSET:
            raise IllegalTransition(
                f"log end offset {log_end_offset!r} must be the offset of the last entry in "
                f"the partition log (0 to {MAX_LOG_OFFSET}), or -1 for an empty log"
            )
        if log_end_offset < (-1 if last is None else last):
            raise IllegalTransition(
                f"log end offset {log_end_offset} is below the last applied offset {last}: "
                "the tracker applied entries the log does not hold; pass the offset of the "
                "log's last entry, and check that this is the right log for the partition"
            )
        if log_end_offset >= 0:
            self._last_applied_offset = log_end_offset

    def reconciled(self, offset: int) -> None:
        """Record that the reconciler has lifted every entry through log `offset`.

        Raise `IllegalTransition` (nothing changes) if `offset` is below the last
        reported one or beyond the last applied entry. Reporting the same offset again
        is a no-op.
        """
        if self._last_applied_offset is None or not 0 <= offset <= self._last_applied_offset:
            raise IllegalTransition(
                f"reconciled offset {offset} is outside the applied log (last applied offset "
                f"{self._last_applied_offset}); the reconciler cannot pass the end of the log: "
                "apply the entries first"
            )
        if self._reconciled_offset is not None and offset < self._reconciled_offset:
            raise IllegalTransition(
                f"reconciled offset {offset} is below the one already reported, "
                f"{self._reconciled_offset}; reconciled offsets only move forward, so report "
                "the highest offset through which every entry has been lifted"
            )
        self._reconciled_offset = offset
        while self._pending and self._pending[0].offset <= offset:
            self._floor = self._pending.popleft().previous_applied

    def _require_next_offset(self, offset: int, event: str) -> None:
        last = self._last_applied_offset
        if offset > MAX_LOG_OFFSET:
            raise IllegalTransition(
                f"{event} at offset {offset}: log offsets may not exceed {MAX_LOG_OFFSET} "
                "(2**53 - 1); this is not an offset of a real log: check the writer"
            )
        if offset < 0 or (last is not None and offset <= last):
            raise IllegalTransition(
                f"{event} at offset {offset}: log offsets must be >= 0 and strictly increase, "
                f"but the last applied offset is {last}; apply each committed entry once, "
                "in log order"
            )

    @staticmethod
    def _require_admitted(epoch: int, admitted_from: int, event: str) -> None:
        if admitted_from > epoch:
            raise IllegalTransition(
                f"{event} of epoch {epoch} with admitted_from {admitted_from}: the fence "
                "admitted an epoch below its own lower bound; pass the fencing window's "
                "oldest accepted epoch at commit time"
            )

    def _take(self, offset: int, epoch: int, admitted_from: int) -> Admission:
        self._last_applied_offset = offset
        if admitted_from > self._previous_applied:
            self._previous_applied = admitted_from
            self._pending.append(PendingSlide(offset, admitted_from))
            while len(self._pending) > self._max_pending_slides:
                # Merge the two oldest slides (o1, p1), (o2, p2) into the later one,
                # (o2, p2): that is dropping (o1, p1). It only delays the floor; see the
                # module docstring.
                self._pending.popleft()
        if epoch <= self._max_applied:
            return Admission.INSIDE
        self._max_applied = epoch
        return Admission.ABOVE

    # -- persistence ---------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole state as a JSON-able dict (``"version": 1``); see `restore`."""
        return {
            "version": SNAPSHOT_VERSION,
            "created_epoch": self._created_epoch,
            "max_pending_slides": self._max_pending_slides,
            "floor": self._floor,
            "previous_applied": self._previous_applied,
            "max_applied": self._max_applied,
            "last_applied_offset": self._last_applied_offset,
            "reconciled_offset": self._reconciled_offset,
            "pending_slides": [
                {"offset": slide.offset, "previous_applied": slide.previous_applied}
                for slide in self._pending
            ],
        }

    @classmethod
    def restore(cls, snapshot: object) -> Self:
        """Rebuild a state from `snapshot()` output, e.g. after a JSON round trip.

        Every field is checked (type, range and the ordering invariants); anything
        malformed raises `InvalidSnapshot` naming the field and the value.
        """
        fields = parse_snapshot(snapshot)
        state = cls(fields.created_epoch, max_pending_slides=fields.max_pending_slides)
        state._floor = fields.floor
        state._previous_applied = fields.previous_applied
        state._max_applied = fields.max_applied
        state._last_applied_offset = fields.last_applied_offset
        state._reconciled_offset = fields.reconciled_offset
        state._pending.extend(PendingSlide(o, p) for o, p in fields.pending_slides)
        return state

    __hash__ = None  # type: ignore[assignment]  # mutable: equal now, maybe not later

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionGcState):
            return NotImplemented
        return self.snapshot() == other.snapshot()

    def __repr__(self) -> str:
        return (
            f"<PartitionGcState created_epoch={self._created_epoch} "
            f"applied=[{self._previous_applied}, {self._max_applied}] floor={self._floor} "
            f"M(p)={self.gc_eligible_epoch} last_applied_offset={self._last_applied_offset} "
            f"reconciled_offset={self._reconciled_offset} pending_slides={len(self._pending)}>"
        )
