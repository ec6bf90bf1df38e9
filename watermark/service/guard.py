"""The async fencing guard of one partition: the asyncio shell of the fence lock.

Design notes: docs/internals/publisher.md, `watermark.service.guard`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from l0gc.errors import FenceExpired, FenceTimeout, GuardClosed, L0gcError, StaleEpoch
from l0gc.events import Emitter, Hooks
from watermark.core.fencelock import Enter, FenceLock, Grant, Hold, Outcome, Refuse, Slide, Wait
from watermark.core.window import Admission, EpochWindow
from watermark.events import (
    FenceGranted,
    FenceReclaimed,
    FenceRefusal,
    FenceRefused,
    FenceReleased,
    FencesRevoked,
    WindowSlid,
)
from watermark.service.eventlog import EVENT_LOG

__all__ = ["DEFAULT_HOLD_TTL_S", "FenceToken", "FencingGuard", "HoldingBlock"]

DEFAULT_HOLD_TTL_S = 30.0
"""How long a granted fence may stay uncommitted before it is reclaimed."""

Bounds = tuple[int | None, int | None]
_GUARD_EVENTS = (
    FenceGranted,
    FenceReleased,
    FenceRefused,
    WindowSlid,
    FenceReclaimed,
    FencesRevoked,
)


# Not frozen, equality is identity: see `Hold`.
@dataclass(slots=True, eq=False)
class FenceToken(Hold):
    """A granted fence: proof that `epoch` was admitted, until released or reclaimed."""

    _secret: str | None = field(default=None, init=False, repr=False)

    @property
    def token(self) -> str:
        """Unguessable id (it is a bearer credential in the HTTP API), drawn on first use."""
        secret = self._secret
        if secret is None:
            secret = self._secret = secrets.token_urlsafe(18)
        return secret


_Turn = Grant[FenceToken] | Slide[FenceToken] | Wait[FenceToken] | Enter[FenceToken] | Refuse


class HoldingBlock:
    """The exit of an ``async with`` that holds a fence: hand the token it acquired (if
    any) to `_give_back`, once. The base of ``guard.fence(...)`` and of
    ``publisher.fence(...)`` (`watermark.service.fence.FenceBlock`); a plain class rather
    than `contextlib.asynccontextmanager`, whose generator machinery cost ~1.5 us per
    fence."""

    __slots__ = ("_give_back", "_token")

    def __init__(self, give_back: Callable[[FenceToken], object]) -> None:
        self._give_back = give_back
        self._token: FenceToken | None = None

    async def __aexit__(self, *exc: object) -> None:
        token = self._token
        if token is not None:
            self._token = None
            self._give_back(token)


class _FenceBlock(HoldingBlock):
    """``async with guard.fence(...)``: acquire on entry, release on exit."""

    __slots__ = ("_epoch", "_guard", "_hold_ttl_s", "_timeout")

    def __init__(
        self, guard: FencingGuard, epoch: int, timeout: float | None, hold_ttl_s: float | None
    ) -> None:
        super().__init__(guard.release)
        self._guard = guard
        self._epoch = epoch
        self._timeout = timeout
        self._hold_ttl_s = hold_ttl_s

    async def __aenter__(self) -> FenceToken:
        token = await self._guard.acquire(self._epoch, self._timeout, hold_ttl_s=self._hold_ttl_s)
        self._token = token
        return token


class FencingGuard:
    """Fences epochs against one partition's `EpochWindow` (see the module docstring)."""

    def __init__(
        self,
        window: EpochWindow,
        *,
        hook: Hooks = EVENT_LOG,
        partition: str = "",
        hold_ttl_s: float | None = DEFAULT_HOLD_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._lock: FenceLock[FenceToken] = FenceLock(
            window, partition=partition, make_hold=FenceToken
        )
        self._partition = partition
        self._hold_ttl_s = hold_ttl_s
        self._clock = clock
        self._changed: asyncio.Event | None = None
        """The broadcast event of the current waiters; None while nobody waits."""
        self._emit = Emitter(hook, _GUARD_EVENTS)
        # The fast path's two routes and events, bound once.
        self._on_granted = self._emit.route_of(FenceGranted)
        self._on_released = self._emit.route_of(FenceReleased)
        self._released = FenceReleased(partition)
        self._granted_inside = FenceGranted(partition, 0, False, 0.0)

    # -- reading -------------------------------------------------------------------

    @property
    def window(self) -> Bounds:
        """The fencing window ``(oldest_accepted, latest_seen)``."""
        return self._lock.bounds

    @property
    def floor(self) -> int | None:
        """The published M(p) the window never admits at or below, if recovered."""
        return self._window.floor

    @property
    def inflight(self) -> int:
        """How many fences are held right now."""
        return self._lock.inflight

    @property
    def exclusive_waiters(self) -> int:
        """How many requests are queued for the exclusive lock."""
        return self._lock.exclusive_waiters

    @property
    def taken_back(self) -> int:
        """Fences reclaimed or revoked so far: their writers may have appended entries
        that were never committed here."""
        return self._lock.taken_back

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._lock.closed

    def is_held(self, token: FenceToken) -> bool:
        """True while `token` is held (not released, committed or reclaimed)."""
        return self._lock.is_held(token)

    def ensure_held(self, token: FenceToken) -> None:
        """Raise `FenceExpired` unless `token` is still held."""
        if not self._lock.is_held(token):
            raise FenceExpired(self._partition, token.epoch)

    # -- fencing -------------------------------------------------------------------

    async def acquire(
        self,
        epoch: int,
        timeout: float | None,  # noqa: ASYNC109 - the fence deadline is protocol (FenceTimeout)
        *,
        hold_ttl_s: float | None = None,
    ) -> FenceToken:
        """Fence `epoch`: return a held token, or raise StaleEpoch / FenceTimeout / GuardClosed.

        `hold_ttl_s` overrides the guard's hold deadline for this fence.
        """
        granted = self.try_acquire(epoch, hold_ttl_s=hold_ttl_s)
        if granted is not None:
            return granted
        return await self._acquire_waiting(epoch, timeout, hold_ttl_s)

    def try_acquire(self, epoch: int, *, hold_ttl_s: float | None = None) -> FenceToken | None:
        """The fast path of `acquire`, without awaiting: a held token when `epoch` is
        inside the window and nothing waits to slide it, else None (then `acquire`
        decides: slide, wait or refuse)."""
        token = self._lock.grant_at_once(
            epoch, self._clock(), self._hold_ttl_s if hold_ttl_s is None else hold_ttl_s
        )
        if token is not None:
            on_granted = self._on_granted
            if on_granted is not None:
                granted = self._granted_inside
                if granted.epoch != epoch:  # equal events are shared: one per epoch
                    granted = FenceGranted(self._partition, epoch, False, 0.0)
                    self._granted_inside = granted
                on_granted(granted)
        return token

    async def _acquire_waiting(
        self,
        epoch: int,
        timeout: float | None,  # noqa: ASYNC109 - see acquire
        hold_ttl_s: float | None,
    ) -> FenceToken:
        """`acquire` when the fast path does not apply: ask the lock, wait, ask again."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = None if timeout is None else started + timeout
        hold_for = self._hold_ttl_s if hold_ttl_s is None else hold_ttl_s
        lock = self._lock
        queued = False
        try:
            while True:
                changes = lock.changes
                decision = lock.request(epoch, self._clock(), hold_for=hold_for, queued=queued)
                self._settle(changes, decision)
                if isinstance(decision, Slide):
                    self._slid(epoch, decision)
                if isinstance(decision, Wait):
                    queued = decision.queued
                    if await self._wait(deadline, decision.until):
                        queued = False
                        raise self._timed_out(epoch, timeout, queued=decision.queued)
                    continue
                queued = False
                if isinstance(decision, Refuse):
                    raise self._refused(decision, timeout)
                token = decision.hold
                assert token is not None
                self._emit(FenceGranted(self._partition, epoch, token.slid, loop.time() - started))
                return token
        finally:
            if queued:  # cancelled while queued
                lock.withdraw()
                self._notify()

    def fence(
        self,
        epoch: int,
        timeout: float | None = None,
        *,
        hold_ttl_s: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[FenceToken]:
        """``async with guard.fence(epoch, timeout) as token:`` commit inside, released on exit."""
        return _FenceBlock(self, epoch, timeout, hold_ttl_s)

    def release(
        self, token: FenceToken, outcome: Outcome = Outcome.ABORTED, offset: int | None = None
    ) -> bool:
        """Give a fence back, ended as `outcome` (see `FenceLock.release`; by default
        aborted); False if it was no longer held."""
        if not self._lock.release(token, outcome, offset):
            return False
        on_released = self._on_released
        if on_released is not None:
            on_released(self._released)
        if self._changed is not None:
            self._notify()
        return True

    @contextlib.asynccontextmanager
    async def exclusive(
        self,
        epoch: int,
        timeout: float | None = None,  # noqa: ASYNC109 - see acquire
    ) -> AsyncIterator[Admission]:
        """Hold the exclusive lock for the block, sliding the window to `epoch` if it is above.

        Yields ABOVE if the window slid to `epoch`, INSIDE if it already covered it;
        raises StaleEpoch if `epoch` is below it. No fence is held or granted while the
        block runs, so the block sees the partition with no write in flight (this is
        how the publisher applies housekeeping epoch advances).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        lock = self._lock
        queued = False
        try:
            while True:
                changes = lock.changes
                decision = lock.request_exclusive(epoch, self._clock(), queued=queued)
                self._settle(changes, decision)
                if isinstance(decision, Enter):
                    queued = False
                    break
                if isinstance(decision, Refuse):
                    queued = False
                    raise self._refused(decision, timeout)
                queued = True
                if await self._wait(deadline, decision.until):
                    queued = False
                    raise self._timed_out(epoch, timeout, queued=True)
        finally:
            if queued:  # cancelled while queued
                lock.withdraw()
                self._notify()
        try:
            slide = lock.exclusive_epoch(epoch)
            if isinstance(slide, Refuse):
                raise self._refused(slide, timeout)
            if slide is not None:
                self._slid(epoch, slide)
            yield Admission.INSIDE if slide is None else Admission.ABOVE
        finally:
            lock.leave_exclusive()
            self._notify()

    def reclaim_expired(self) -> int:
        """Reclaim the fences past their hold deadline; return how many.

        Blocked exclusive waiters reclaim themselves when the earliest hold deadline
        passes; the publisher calls this every round (`Publisher.run_once`), so a fence
        abandoned on an idle partition ends at its deadline too.
        """
        changes = self._lock.changes
        reclaimed = self._lock.reclaim_expired(self._clock())
        self._reclaimed(reclaimed)
        if self._lock.changes != changes:
            self._notify()
        return len(reclaimed)

    def close(self) -> None:
        """Refuse new requests and wake every waiter with `GuardClosed`; idempotent."""
        if self._lock.close():
            self._notify()

    async def drain(self, timeout_s: float | None) -> int:
        """Wait (after `close`) until every held fence is released, at most `timeout_s`;
        then revoke the ones left. Return how many were revoked."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self._lock.inflight and (deadline is None or loop.time() < deadline):
            changed = self._waiting_on()
            limit = None if deadline is None else deadline - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await changed.wait()
        return self.revoke_all()

    def revoke_all(self) -> int:
        """Take back every held fence (their commits now raise FenceExpired); return how many."""
        revoked = len(self._lock.revoke_all())
        if revoked:
            self._emit(FencesRevoked(self._partition, revoked))
            self._notify()
        return revoked

    def raise_floor(self, watermark: int) -> int:
        """Admit no epoch <= `watermark` any more and take back the fences held at or
        below it (their commits raise FenceExpired); return how many were taken back."""
        revoked = len(self._lock.raise_floor(watermark))
        if revoked:
            self._emit(FencesRevoked(self._partition, revoked))
        self._notify()
        return revoked

    # -- for subclasses that break the rules on purpose (l0lab.sim.variants) ---------

    def _slide(self, epoch: int) -> None:
        """Slide the window to `epoch` now, without draining (`FenceLock.slide`)."""
        self._slid(epoch, self._lock.slide(epoch))

    def _grant(self, epoch: int, *, slid: bool, hold_ttl_s: float | None) -> FenceToken:
        """Grant a fence at `epoch` now, without asking the lock (`FenceLock.grant`)."""
        ttl = self._hold_ttl_s if hold_ttl_s is None else hold_ttl_s
        token = self._lock.grant(epoch, self._clock(), ttl, slid=slid)
        self._emit(FenceGranted(self._partition, epoch, slid, 0.0))
        return token

    # -- internals -----------------------------------------------------------------

    def _settle(self, changes: int, decision: _Turn) -> None:
        """After a turn: report the fences it reclaimed, wake waiters if the lock changed."""
        if not isinstance(decision, Refuse):
            self._reclaimed(decision.reclaimed)
        if self._lock.changes != changes:
            self._notify()

    def _slid(self, epoch: int, slide: Slide[FenceToken]) -> None:
        self._emit(WindowSlid(self._partition, epoch, slide.before, slide.after))

    def _reclaimed(self, tokens: tuple[FenceToken, ...]) -> None:
        for token in tokens:
            self._emit(FenceReclaimed(self._partition, token.epoch, self._lock.bounds))

    def _timed_out(self, epoch: int, timeout: float | None, *, queued: bool) -> L0gcError:
        """The request's deadline passed: it gives up (leaving the queue wakes the waiters
        it held back)."""
        changes = self._lock.changes
        refusal = self._lock.give_up(epoch, queued=queued, now=self._clock())
        if self._lock.changes != changes:
            self._notify()
        return self._refused(refusal, timeout)

    def _refused(self, refusal: Refuse, timeout: float | None) -> L0gcError:
        """The one place a refusal becomes an event and an exception."""
        self._emit(
            FenceRefused(
                self._partition,
                refusal.epoch,
                refusal.reason,
                refusal.window,
                refusal.floor,
                refusal.inflight,
                timeout,
            )
        )
        if refusal.reason is FenceRefusal.STALE:
            return StaleEpoch(refusal.epoch, refusal.window, refusal.floor)
        if refusal.reason is FenceRefusal.TIMEOUT:
            return FenceTimeout(refusal.epoch, timeout or 0.0, refusal.window, refusal.oldest)
        return GuardClosed(self._partition)

    def _notify(self) -> None:
        """Wake everyone waiting on the current event (the next waiter makes a new one)."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    def _waiting_on(self) -> asyncio.Event:
        """The event the next `_notify` sets; made here, by the first waiter."""
        changed = self._changed
        if changed is None:
            changed = self._changed = asyncio.Event()
        return changed

    async def _wait(self, deadline: float | None, until: float | None) -> bool:
        """Sleep until the lock changes, the hold deadline `until` passes (on `clock`), or
        the request's `deadline` passes (on the loop's clock): then return True."""
        changed = self._waiting_on()
        loop = asyncio.get_running_loop()
        limit = None if deadline is None else deadline - loop.time()
        if limit is not None and limit <= 0:
            return True
        if until is not None:
            expiry = max(0.0, until - self._clock())
            limit = expiry if limit is None else min(limit, expiry)
        try:
            async with asyncio.timeout(limit):
                await changed.wait()
        except TimeoutError:
            return deadline is not None and loop.time() >= deadline
        return False
