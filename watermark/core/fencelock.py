"""The fence lock of one partition as a state machine: every rule of who may commit when.

Design notes: docs/internals/publisher.md, `watermark.core.fencelock`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from l0gc.errors import AlreadyCommitted, FenceExpired, IllegalTransition
from watermark.core.window import Admission, EpochWindow
from watermark.events import FenceRefusal

__all__ = [
    "Enter",
    "FenceLock",
    "Grant",
    "Hold",
    "Outcome",
    "Refuse",
    "Slide",
    "Wait",
    "repeat_of",
]

Bounds = tuple[int | None, int | None]
_INSIDE = Admission.INSIDE
_BELOW = Admission.BELOW


class Outcome(enum.Enum):
    """How a hold ended (`Hold.outcome`); None while it is held."""

    COMMITTED = "committed"
    """Its write was applied at `Hold.offset`."""
    ABORTED = "aborted"
    """Given back without a commit (the writer aborted, or left the block)."""
    REFUSED = "refused"
    """Its commit was refused for good (an offset that does not increase, a fencing
    violation): released, so it does not block the partition."""
    RECLAIMED = "reclaimed"
    """Past its deadline, taken back so a window slide could proceed."""
    REVOKED = "revoked"
    """Taken back when the partition closed or was let go, or when its epoch fell at or
    below a raised floor (`FenceLock.raise_floor`)."""


# Not frozen: a frozen dataclass sets every field through object.__setattr__ (~0.5 us
# per fence on the fast path). Treat it as read-only all the same. Equality is identity
# (eq=False): a hold is a capability, and the lock keys its holds by the object.
@dataclass(slots=True, eq=False)
class Hold:
    """A granted fence: proof that `epoch` was admitted, until released or reclaimed."""

    partition: str
    epoch: int
    window: Bounds
    """The fencing window right after this fence was granted."""
    slid: bool
    """True if this fence slid the window up to `epoch`."""
    deadline: float | None
    """When the hold may be reclaimed, on the lock's clock; None = never."""
    granted_at: float
    """When it was granted, on the lock's clock."""
    outcome: Outcome | None = None
    """How it ended; None while held."""
    offset: int | None = None
    """The log offset it was committed at (`Outcome.COMMITTED` only)."""


def repeat_of(hold: Hold, offset: int) -> bool:
    """Decide a commit of `offset` under a hold that may have ended already: False while
    it is held (commit it now); True when it was committed at this very offset (a repeat
    whose first answer was lost: answer success again). Raise `AlreadyCommitted` when it
    was committed at another offset, `FenceExpired` when it ended any other way."""
    outcome = hold.outcome
    if outcome is None:
        return False
    if outcome is Outcome.COMMITTED:
        if hold.offset == offset:
            return True
        assert hold.offset is not None
        raise AlreadyCommitted(hold.partition, hold.epoch, hold.offset, offset)
    raise FenceExpired(hold.partition, hold.epoch, why=outcome.value)


H = TypeVar("H", bound=Hold)


@dataclass(frozen=True, slots=True)
class Grant(Generic[H]):
    """Granted inside the window (the request left the exclusive queue if it was in it)."""

    hold: H
    reclaimed: tuple[H, ...] = ()


@dataclass(frozen=True, slots=True)
class Slide(Generic[H]):
    """The window slid from `before` to `after`; `hold` is the fence granted at the new
    epoch (None when the exclusive block slid it, see `exclusive_epoch`)."""

    hold: H | None
    before: Bounds
    after: Bounds
    reclaimed: tuple[H, ...] = ()


@dataclass(frozen=True, slots=True)
class Wait(Generic[H]):
    """Not yet: wait for the next change, or until `until` (on the lock's clock), then ask
    again with ``queued=self.queued``."""

    queued: bool
    """The request is in the exclusive queue (it must `give_up` or `withdraw` to leave)."""
    until: float | None
    """The earliest hold deadline a queued slide could reclaim at; None: only a change."""
    reclaimed: tuple[H, ...] = ()


@dataclass(frozen=True, slots=True)
class Enter(Generic[H]):
    """The exclusive lock is taken: no fence is held; call `leave_exclusive` after."""

    reclaimed: tuple[H, ...] = ()


@dataclass(frozen=True, slots=True)
class Refuse:
    """No fence; `reason` says why. The request is out of the exclusive queue."""

    reason: FenceRefusal
    epoch: int
    window: Bounds
    floor: int | None
    inflight: int
    oldest: tuple[int, float] | None = None
    """(epoch, age in seconds) of the oldest fence held when a request timed out."""


class FenceLock(Generic[H]):
    """The fence lock of one partition (see the module docstring).

    `make_hold(partition, epoch, window, slid, deadline, granted_at)` builds each hold
    (default `Hold`; the guard's `FenceToken` adds a bearer secret).
    """

    __slots__ = (
        "_bounds",
        "_closed",
        "_exclusive",
        "_exclusive_waiters",
        "_holds",
        "_make_hold",
        "_open_high",
        "_open_low",
        "_window",
        "changes",
        "partition",
        "taken_back",
    )

    def __init__(
        self,
        window: EpochWindow,
        *,
        partition: str = "",
        make_hold: Callable[[str, int, Bounds, bool, float | None, float], H] = Hold,  # type: ignore[assignment]
    ) -> None:
        self._window = window
        self.partition = partition
        self._make_hold = make_hold
        self._holds: dict[H, None] = {}
        self._exclusive = False
        self._exclusive_waiters = 0
        self._closed = False
        self.taken_back = 0
        """Holds reclaimed or revoked so far."""
        self.changes = 0
        """How many transitions so far may have let a waiter proceed (see the docstring)."""
        self._bounds: Bounds = window.bounds
        self._open_low = 1
        self._open_high = 0
        self._reopen()

    # -- reading -------------------------------------------------------------------

    @property
    def window(self) -> EpochWindow:
        """The fencing window (slide it only through this lock)."""
        return self._window

    @property
    def bounds(self) -> Bounds:
        """``(oldest_accepted, latest_seen)`` of the window."""
        return self._bounds

    @property
    def inflight(self) -> int:
        """How many holds are granted and not yet released, reclaimed or revoked."""
        return len(self._holds)

    @property
    def exclusive_waiters(self) -> int:
        """How many requests are queued for the exclusive lock."""
        return self._exclusive_waiters

    @property
    def exclusive(self) -> bool:
        """True while an exclusive block runs."""
        return self._exclusive

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def is_held(self, hold: H) -> bool:
        """True while `hold` is held."""
        return hold in self._holds

    def oldest(self, now: float) -> tuple[int, float] | None:
        """(epoch, age at `now`) of the longest-held fence, None if none is held."""
        holds = self._holds
        if not holds:
            return None
        first = min(holds, key=lambda h: h.granted_at)
        return first.epoch, max(0.0, now - first.granted_at)

    def next_deadline(self) -> float | None:
        """The earliest hold deadline, None if no hold has one."""
        deadlines = [h.deadline for h in self._holds if h.deadline is not None]
        return min(deadlines) if deadlines else None

    # -- fence requests ------------------------------------------------------------

    def grant_at_once(self, epoch: int, now: float, hold_for: float | None) -> H | None:
        """The fast path: a shared hold if `epoch` is in the open range, else None (ask
        `request`, which decides the same on its first turn and also the rest)."""
        if self._open_low <= epoch <= self._open_high:
            deadline = None if hold_for is None else now + hold_for
            hold = self._make_hold(self.partition, epoch, self._bounds, False, deadline, now)
            self._holds[hold] = None
            return hold
        return None

    def request(
        self, epoch: int, now: float, *, hold_for: float | None, queued: bool = False
    ) -> Grant[H] | Slide[H] | Wait[H] | Refuse:
        """One turn of a fence request for `epoch` at `now` (`queued`: as the last `Wait`
        said). A granted hold's deadline is ``now + hold_for`` (None: never)."""
        if self._closed:
            return self._refuse(FenceRefusal.CLOSED, epoch, queued=queued)
        admission = self._window.classify(epoch)
        if admission is _BELOW:
            return self._refuse(FenceRefusal.STALE, epoch, queued=queued)
        if admission is _INSIDE:
            if queued:
                self._dequeue()
            if self._exclusive or self._exclusive_waiters:
                return Wait(queued=False, until=None)
            return Grant(self._hold(epoch, now, hold_for, slid=False))
        turn = self._exclusive_turn(now, queued=queued)
        if isinstance(turn, Wait):
            return turn
        before = self._bounds
        self._advance(epoch)
        return Slide(self._hold(epoch, now, hold_for, slid=True), before, self._bounds, turn)

    def give_up(self, epoch: int, *, queued: bool, now: float | None = None) -> Refuse:
        """A waiting request's deadline passed: it leaves the queue, refused (TIMEOUT);
        with `now`, the refusal names the oldest fence held (`Refuse.oldest`)."""
        refusal = self._refuse(FenceRefusal.TIMEOUT, epoch, queued=queued)
        if now is None:
            return refusal
        return Refuse(
            refusal.reason,
            refusal.epoch,
            refusal.window,
            refusal.floor,
            refusal.inflight,
            self.oldest(now),
        )

    def withdraw(self) -> None:
        """A queued request leaves the exclusive queue without an answer (cancelled)."""
        if self._exclusive_waiters <= 0:
            raise IllegalTransition(
                f"no request of partition {self.partition!r} is queued for the exclusive "
                "lock; withdraw only a request whose last Wait said queued=True"
            )
        self._dequeue()

    def release(
        self, hold: H, outcome: Outcome = Outcome.ABORTED, offset: int | None = None
    ) -> bool:
        """Give a hold back, ended as `outcome` (COMMITTED with its `offset`, ABORTED or
        REFUSED); False if it was no longer held (its outcome then stays as it was)."""
        holds = self._holds
        if hold not in holds:
            return False
        if (outcome is Outcome.COMMITTED) != (offset is not None) or outcome in (
            Outcome.RECLAIMED,
            Outcome.REVOKED,
        ):
            raise IllegalTransition(
                f"a hold of partition {self.partition!r} is released as committed with an "
                f"offset, or as aborted or refused without one; got {outcome.value} with "
                f"offset {offset!r}"
            )
        del holds[hold]
        hold.outcome = outcome
        hold.offset = offset
        self.changes += 1
        return True

    def reclaim_expired(self, now: float) -> tuple[H, ...]:
        """Take back the holds whose deadline is at or before `now`, whether or not a
        slide waits: their commits are refused from now on."""
        return self._reclaim(now)

    # -- the exclusive lock on its own -----------------------------------------------

    def request_exclusive(
        self, epoch: int, now: float, *, queued: bool = False
    ) -> Enter[H] | Wait[H] | Refuse:
        """One turn of taking the exclusive lock to slide to `epoch` (no fence: the block
        runs with none held; the epoch is only checked by `exclusive_epoch`)."""
        if self._closed:
            return self._refuse(FenceRefusal.CLOSED, epoch, queued=queued)
        turn = self._exclusive_turn(now, queued=queued)
        if isinstance(turn, Wait):
            return turn
        self._exclusive = True
        self._reopen()
        return Enter(turn)

    def exclusive_epoch(self, epoch: int) -> Slide[H] | Refuse | None:
        """Inside the exclusive lock: slide the window to `epoch` if it is ABOVE (a `Slide`
        without a hold), refuse it if BELOW (STALE), None if the window already covers it."""
        if not self._exclusive:
            raise IllegalTransition(
                f"the exclusive lock of partition {self.partition!r} is not held; take it "
                "with request_exclusive first"
            )
        admission = self._window.classify(epoch)
        if admission is _BELOW:
            return self._refuse(FenceRefusal.STALE, epoch, queued=False)
        if admission is _INSIDE:
            return None
        return self.slide(epoch)

    def leave_exclusive(self) -> None:
        """The exclusive block ended: waiting requests may proceed."""
        if not self._exclusive:
            raise IllegalTransition(
                f"the exclusive lock of partition {self.partition!r} is not held; there is "
                "nothing to leave"
            )
        self._exclusive = False
        self.changes += 1
        self._reopen()

    # -- ending ----------------------------------------------------------------------

    def close(self) -> bool:
        """Refuse every request from now on; False if already closed."""
        if self._closed:
            return False
        self._closed = True
        self.changes += 1
        self._reopen()
        return True

    def revoke_all(self) -> tuple[H, ...]:
        """Take back every hold (their commits must fail); return them."""
        revoked = self._take_back(tuple(self._holds), Outcome.REVOKED)
        if revoked:
            self.changes += 1
        return revoked

    def raise_floor(self, watermark: int) -> tuple[H, ...]:
        """Admit no epoch <= `watermark` from now on (`EpochWindow.raise_floor`) and take
        back every hold at or below it (their commits must fail); return those holds."""
        if not self._window.raise_floor(watermark):
            return ()
        self._bounds = self._window.bounds
        revoked = self._take_back(
            tuple(h for h in self._holds if h.epoch <= watermark), Outcome.REVOKED
        )
        self.changes += 1
        self._reopen()
        return revoked

    # -- primitives (the transitions above check before calling them) ----------------

    def grant(self, epoch: int, now: float, hold_for: float | None, *, slid: bool) -> H:
        """Record a hold at `epoch` without checking the rules (the transitions above
        call it once they have; a deliberately broken guard may call it directly)."""
        return self._hold(epoch, now, hold_for, slid=slid)

    def slide(self, epoch: int) -> Slide[H]:
        """Slide the window to `epoch` (ABOVE, else IllegalTransition) without checking for
        holders; the same caveat as `grant`."""
        before = self._bounds
        self._advance(epoch)
        return Slide(None, before, self._bounds)

    def _hold(self, epoch: int, now: float, hold_for: float | None, *, slid: bool) -> H:
        deadline = None if hold_for is None else now + hold_for
        hold = self._make_hold(self.partition, epoch, self._bounds, slid, deadline, now)
        self._holds[hold] = None
        return hold

    def _advance(self, epoch: int) -> None:
        self._window.advance(epoch)  # IllegalTransition unless ABOVE; nothing changed then
        self._bounds = self._window.bounds
        self._reopen()

    def _refuse(self, reason: FenceRefusal, epoch: int, *, queued: bool) -> Refuse:
        if queued:
            self._dequeue()
        window = self._window
        return Refuse(reason, epoch, self._bounds, window.floor, len(self._holds))

    def _exclusive_turn(self, now: float, *, queued: bool) -> Wait[H] | tuple[H, ...]:
        """A turn in the exclusive queue, joined now unless `queued`: the expired holds
        are reclaimed; a `Wait` while the lock or a hold is still taken, else the request
        leaves the queue with the lock free, and the reclaimed holds are returned."""
        if not queued:
            self._exclusive_waiters += 1
            self._reopen()
        reclaimed = self._reclaim(now)
        if self._exclusive or self._holds:
            return Wait(queued=True, until=self.next_deadline(), reclaimed=reclaimed)
        self._dequeue()
        return reclaimed

    def _dequeue(self) -> None:
        self._exclusive_waiters -= 1
        self.changes += 1
        self._reopen()

    def _reclaim(self, now: float) -> tuple[H, ...]:
        expired = tuple(h for h in self._holds if h.deadline is not None and h.deadline <= now)
        if expired:
            self._take_back(expired, Outcome.RECLAIMED)
            self.changes += 1
        return expired

    def _take_back(self, holds: tuple[H, ...], outcome: Outcome) -> tuple[H, ...]:
        """Remove `holds` (all held), ended as `outcome`; counted in `taken_back`."""
        for hold in holds:
            del self._holds[hold]
            hold.outcome = outcome
        self.taken_back += len(holds)
        return holds

    def _reopen(self) -> None:
        """Recompute the open range of `grant_at_once` (see the module docstring)."""
        low, high = self._bounds
        if self._exclusive or self._exclusive_waiters or self._closed or low is None:
            self._open_low, self._open_high = 1, 0
            return
        assert high is not None
        floor = self._window.floor
        self._open_low = low if floor is None or floor < low else floor + 1
        self._open_high = high
