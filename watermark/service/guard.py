"""The async fencing guard of one partition: the windowed epoch fence with its locks.

Theory of operation
-------------------
A writer that uploaded an L0 object stamped with epoch ``e`` must *fence* ``e``
before it commits the object's metadata to the partition log. The guard classifies
``e`` against the partition's `EpochWindow` ``[oldest_accepted, latest_seen]``:

* INSIDE: granted under a SHARED lock, held until the writer commits (or aborts).
  Any number of writers hold it at once.
* ABOVE: the writer takes the EXCLUSIVE lock, which waits until every shared holder
  has released (in-flight writes drain), slides the window up to ``e`` and then
  downgrades to a shared hold for its own write. Draining first is what makes a slide
  a promise: once the window is ``[b, c]``, no write with an epoch below ``b`` can
  still be committed.
* BELOW: refused with `StaleEpoch` (carrying the window and the floor). The writer
  re-reads the cluster epoch and re-uploads.

The classification is repeated after every wait, so a writer that queued for epoch
``N`` while two slides happened is refused, and one that queued to slide to ``N+1``
while another writer already slid there simply joins as a shared holder.

Lock discipline: writer preference. As soon as an exclusive waiter is queued, new
shared acquirers wait behind it, even for epochs inside the current window; otherwise
a steady stream of writers at the current epoch would starve the slide forever. Once
the slide is done they re-classify (the old latest epoch is still inside the new
window, so they are normally admitted). Nothing here waits on anything but the
holders' own progress, so the only way to block a slide is a holder that never
finishes; that is what deadlines are for (below). A task must not fence the same
partition twice while holding a fence: behind a queued slide it would wait for itself
until its timeout.

Deadlines. Every request has an acquisition `timeout`: when it passes, `FenceTimeout`
is raised and nothing is held (a queued exclusive waiter withdraws, which may unblock
shared waiters). Every granted fence has a hold deadline (`hold_ttl_s`, measured on
the injectable `clock`): a writer that never commits cannot block a slide forever,
because an exclusive waiter that finds expired holds in its way reclaims them. A
reclaimed fence is dead: `ensure_held` raises `FenceExpired` and the write must not be
committed. Expired holds are only reclaimed when a slide needs them gone; with no
slide waiting, a late commit is still safe and is allowed.

One event loop serialises everything, so each check-and-update below runs without an
await in the middle; "taking the exclusive lock, sliding and downgrading" for a fence
is one such step once the holders have drained. A holder keeps the lock across awaits
(the commit), which is why holds are counted. Waiters sleep on a broadcast event that
every state change sets and drops (a condition variable whose notify is synchronous, so
`release` and `close` need no await: an HTTP handler or a shutdown path can call them
from anywhere on the loop). The event is made by the first waiter, so a state change
with nobody waiting costs nothing.

Fast path. A fence for an epoch INSIDE the window, with no exclusive holder or waiter
(writer preference) and the guard open, is granted at once: no loop time, no deadline,
no await. That is the common case (every write of the current epoch), and it is the
same decision the waiting loop would take on its first turn. A `FenceToken` is a plain
slots object whose bearer secret (`token`, for the HTTP API) is only drawn when first
read, so an embedded writer never pays for randomness it does not use.

`close()` wakes every waiter with `GuardClosed` and refuses new requests; fences
already held stay held until their holders release them.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import TracebackType

import structlog

from watermark.core.window import Admission, EpochWindow
from watermark.errors import FenceExpired, FenceTimeout, GuardClosed, StaleEpoch
from watermark.service.metrics import FenceResult, WatermarkMetrics

__all__ = ["DEFAULT_HOLD_TTL_S", "FenceToken", "FencingGuard"]

DEFAULT_HOLD_TTL_S = 30.0
"""How long a granted fence may stay uncommitted before a waiting slide may reclaim it."""

_log = structlog.get_logger("watermark.guard")

Bounds = tuple[int | None, int | None]
_INSIDE = Admission.INSIDE


# Not frozen: a frozen dataclass sets every field through object.__setattr__ (~0.5 us
# per fence on the fast path). Treat it as read-only all the same. Equality is identity
# (eq=False): a token is a capability, and the guard keys its holds by the object.
@dataclass(slots=True, eq=False)
class FenceToken:
    """A granted fence: proof that `epoch` was admitted, until released or reclaimed."""

    partition: str
    epoch: int
    window: Bounds
    """The fencing window right after this fence was granted."""
    slid: bool
    """True if this fence slid the window up to `epoch`."""
    deadline: float | None
    """When the hold may be reclaimed, on the guard's clock; None = never."""
    _secret: str | None = field(default=None, init=False, repr=False)

    @property
    def token(self) -> str:
        """Unguessable id (it is a bearer credential in the HTTP API), drawn on first use."""
        secret = self._secret
        if secret is None:
            secret = self._secret = secrets.token_urlsafe(18)
        return secret


class _FenceBlock:
    """``async with guard.fence(...)``: acquire on entry, release on exit.

    A plain class rather than `contextlib.asynccontextmanager` (whose generator
    machinery cost ~1.5 us per fence).
    """

    __slots__ = ("_epoch", "_guard", "_hold_ttl_s", "_timeout", "_token")

    def __init__(
        self, guard: FencingGuard, epoch: int, timeout: float | None, hold_ttl_s: float | None
    ) -> None:
        self._guard = guard
        self._epoch = epoch
        self._timeout = timeout
        self._hold_ttl_s = hold_ttl_s
        self._token: FenceToken | None = None

    async def __aenter__(self) -> FenceToken:
        token = await self._guard.acquire(self._epoch, self._timeout, hold_ttl_s=self._hold_ttl_s)
        self._token = token
        return token

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token = self._token
        if token is not None:
            self._token = None
            self._guard.release(token)


class FencingGuard:
    """Fences epochs against one partition's `EpochWindow` (see the module docstring)."""

    def __init__(
        self,
        window: EpochWindow,
        *,
        metrics: WatermarkMetrics | None = None,
        partition: str = "",
        hold_ttl_s: float | None = DEFAULT_HOLD_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._metrics = metrics
        self._partition = partition
        self._hold_ttl_s = hold_ttl_s
        self._clock = clock
        self._holds: dict[FenceToken, None] = {}
        self._exclusive = False
        self._exclusive_waiters = 0
        self._closed = False
        self._taken_back = 0
        self._changed: asyncio.Event | None = None
        """The broadcast event of the current waiters; None while nobody waits."""
        # The fast path's counter, bound once (`labels()` per call cost ~1.5 us).
        self._count_inside: Callable[[], None] | None = None
        if metrics is not None:
            self._count_inside = metrics.fence_counter(FenceResult.INSIDE).inc

    # -- reading -------------------------------------------------------------------

    @property
    def window(self) -> Bounds:
        """The fencing window ``(oldest_accepted, latest_seen)``."""
        return self._window.bounds

    @property
    def floor(self) -> int | None:
        """The published M(p) the window never admits at or below, if recovered."""
        return self._window.floor

    @property
    def inflight(self) -> int:
        """How many fences are held right now."""
        return len(self._holds)

    @property
    def exclusive_waiters(self) -> int:
        """How many requests are queued for the exclusive lock."""
        return self._exclusive_waiters

    @property
    def taken_back(self) -> int:
        """Fences reclaimed or revoked so far: their writers may have appended entries
        that were never committed here."""
        return self._taken_back

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def is_held(self, token: FenceToken) -> bool:
        """True while `token` is held (not released, committed or reclaimed)."""
        return token in self._holds

    def ensure_held(self, token: FenceToken) -> None:
        """Raise `FenceExpired` unless `token` is still held."""
        if token not in self._holds:
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
        if (
            not self._exclusive
            and not self._exclusive_waiters
            and not self._closed
            and self._window.classify(epoch) is _INSIDE
        ):
            return self._grant(epoch, slid=False, hold_ttl_s=hold_ttl_s)
        return None

    async def _acquire_waiting(
        self,
        epoch: int,
        timeout: float | None,  # noqa: ASYNC109 - see acquire
        hold_ttl_s: float | None,
    ) -> FenceToken:
        """`acquire` when the fast path does not apply: classify, queue, wait, repeat."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        queued_exclusive = False
        try:
            while True:
                self._raise_if_closed()
                admission = self._window.classify(epoch)
                if admission is Admission.BELOW:
                    raise self._stale(epoch)
                if admission is Admission.INSIDE:
                    if queued_exclusive:
                        queued_exclusive = self._withdraw_exclusive()
                    if not self._exclusive and self._exclusive_waiters == 0:
                        return self._grant(epoch, slid=False, hold_ttl_s=hold_ttl_s)
                else:
                    if not queued_exclusive:
                        queued_exclusive = True
                        self._exclusive_waiters += 1
                    self._reclaim_expired()
                    if not self._exclusive and not self._holds:
                        queued_exclusive = self._withdraw_exclusive()
                        self._slide(epoch)
                        return self._grant(epoch, slid=True, hold_ttl_s=hold_ttl_s)
                await self._wait(epoch, timeout, deadline, reclaim=queued_exclusive)
        finally:
            if queued_exclusive:
                self._withdraw_exclusive()

    def fence(
        self,
        epoch: int,
        timeout: float | None = None,
        *,
        hold_ttl_s: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[FenceToken]:
        """``async with guard.fence(epoch, timeout) as token:`` commit inside, released on exit."""
        return _FenceBlock(self, epoch, timeout, hold_ttl_s)

    def release(self, token: FenceToken) -> bool:
        """Give a fence back (after commit or abort); False if it was no longer held."""
        holds = self._holds
        if token not in holds:
            return False
        del holds[token]
        if self._metrics is not None:
            self._metrics.held_fences -= 1
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
        queued = True
        self._raise_if_closed()
        self._exclusive_waiters += 1
        try:
            while True:
                self._raise_if_closed()
                self._reclaim_expired()
                if not self._exclusive and not self._holds:
                    break
                await self._wait(epoch, timeout, deadline, reclaim=True)
            queued = self._withdraw_exclusive()
            self._exclusive = True
        finally:
            if queued:
                self._withdraw_exclusive()
        try:
            admission = self._window.classify(epoch)
            if admission is Admission.BELOW:
                raise self._stale(epoch)
            if admission is Admission.ABOVE:
                self._slide(epoch)
            yield admission
        finally:
            self._exclusive = False
            self._notify()

    def reclaim_expired(self) -> int:
        """Reclaim expired fences if a slide is waiting on them; return how many.

        Blocked exclusive waiters call this themselves when the earliest hold deadline
        passes; call it after moving an injected clock, or from a housekeeping loop.
        """
        return self._reclaim_expired()

    def close(self) -> None:
        """Refuse new requests and wake every waiter with `GuardClosed`; idempotent."""
        if not self._closed:
            self._closed = True
            self._notify()

    async def drain(self, timeout_s: float | None) -> int:
        """Wait (after `close`) until every held fence is released, at most `timeout_s`;
        then revoke the ones left. Return how many were revoked."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self._holds and (deadline is None or loop.time() < deadline):
            changed = self._waiting_on()
            limit = None if deadline is None else deadline - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await changed.wait()
        return self.revoke_all()

    def revoke_all(self) -> int:
        """Take back every held fence (their commits now raise FenceExpired); return how many."""
        revoked = len(self._holds)
        self._taken_back += revoked
        if revoked:
            _log.warning("watermark.fences_revoked", partition=self._partition, count=revoked)
            self._holds.clear()
            if self._metrics is not None:
                self._metrics.held_fences -= revoked
            self._notify()
        return revoked

    # -- internals -----------------------------------------------------------------

    def _grant(self, epoch: int, *, slid: bool, hold_ttl_s: float | None) -> FenceToken:
        ttl = self._hold_ttl_s if hold_ttl_s is None else hold_ttl_s
        token = FenceToken(
            self._partition,
            epoch,
            self._window.bounds,
            slid,
            None if ttl is None else self._clock() + ttl,
        )
        self._holds[token] = None
        metrics = self._metrics
        if metrics is not None:
            metrics.held_fences += 1
            if slid:
                metrics.fence(FenceResult.SLIDE)
            elif self._count_inside is not None:
                self._count_inside()
        return token

    def _slide(self, epoch: int) -> None:
        before = self._window.bounds
        self._window.advance(epoch)
        if self._metrics is not None:
            self._metrics.window_slides.inc()
        _log.debug(
            "watermark.window_slid",
            partition=self._partition,
            epoch=epoch,
            before=list(before),
            after=list(self._window.bounds),
        )

    def _stale(self, epoch: int) -> StaleEpoch:
        if self._metrics is not None:
            self._metrics.fence(FenceResult.STALE)
        _log.info(
            "watermark.fence_stale",
            partition=self._partition,
            epoch=epoch,
            window=list(self._window.bounds),
            floor=self._window.floor,
        )
        return StaleEpoch(epoch, self._window.bounds, self._window.floor)

    def _withdraw_exclusive(self) -> bool:
        """Leave the exclusive queue (waking shared waiters it held back); returns False."""
        self._exclusive_waiters -= 1
        self._notify()
        return False

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise GuardClosed(self._partition)

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

    def _reclaim_expired(self) -> int:
        if self._exclusive_waiters == 0:
            return 0
        now = self._clock()
        expired = [
            token for token in self._holds if token.deadline is not None and token.deadline <= now
        ]
        self._taken_back += len(expired)
        for token in expired:
            del self._holds[token]
            _log.warning(
                "watermark.fence_reclaimed",
                partition=self._partition,
                epoch=token.epoch,
                window=list(self._window.bounds),
            )
        if expired:
            if self._metrics is not None:
                self._metrics.fences_reclaimed.inc(len(expired))
                self._metrics.held_fences -= len(expired)
            self._notify()
        return len(expired)

    def _next_expiry_in(self) -> float | None:
        deadlines = [t.deadline for t in self._holds if t.deadline is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - self._clock())

    async def _wait(
        self, epoch: int, timeout_s: float | None, deadline: float | None, *, reclaim: bool
    ) -> None:
        """Sleep until the state changes, the request deadline passes (FenceTimeout) or,
        for an exclusive waiter, the earliest hold deadline passes."""
        changed = self._waiting_on()
        loop = asyncio.get_running_loop()
        limit = None if deadline is None else deadline - loop.time()
        if limit is not None and limit <= 0:
            raise self._timeout(epoch, timeout_s)
        expiry = self._next_expiry_in() if reclaim else None
        if expiry is not None:
            limit = expiry if limit is None else min(limit, expiry)
        try:
            async with asyncio.timeout(limit):
                await changed.wait()
        except TimeoutError:
            if deadline is not None and loop.time() >= deadline:
                raise self._timeout(epoch, timeout_s) from None

    def _timeout(self, epoch: int, timeout: float | None) -> FenceTimeout:
        if self._metrics is not None:
            self._metrics.fence(FenceResult.TIMEOUT)
        _log.info(
            "watermark.fence_timeout",
            partition=self._partition,
            epoch=epoch,
            timeout_s=timeout,
            window=list(self._window.bounds),
            inflight=len(self._holds),
        )
        return FenceTimeout(epoch, timeout or 0.0, self._window.bounds)
