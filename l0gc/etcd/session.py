"""`LeaseSession`: one etcd lease, kept alive, with what is certain about it.

Design notes: docs/internals/kernel.md, `l0gc.etcd.session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

from l0gc.contract.kv import KV
from l0gc.errors import ConfigError, EtcdUnavailable, L0gcError, LeaseExpired

__all__ = ["LeaseSession"]

_T = TypeVar("_T")
Step = Callable[[], Awaitable[object]]


@dataclass(eq=False)
class LeaseSession:
    """One etcd lease of `ttl_s` seconds on `kv`; see the module docstring."""

    kv: KV
    ttl_s: int
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    margin_s: float = 0.0
    call_timeout_s: float | None = None
    """The bound of each lease call; None: the TTL."""
    on_lost: Callable[[int | None, str], object] | None = None
    _lease: int | None = field(init=False, default=None)
    _until: float = field(init=False, default=0.0)
    _running: contextlib.AsyncExitStack | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        ttl_s, margin_s, call_timeout_s = self.ttl_s, self.margin_s, self.call_timeout_s
        if ttl_s < 1:
            raise ConfigError(f"lease TTL {ttl_s!r} s must be >= 1 s (etcd keeps at least 2 s)")
        if not 0 <= margin_s < ttl_s:
            raise ConfigError(f"lease margin {margin_s!r} s must be >= 0 and below the TTL")
        self._timeout_s = float(ttl_s) if call_timeout_s is None else call_timeout_s
        if not self._timeout_s > 0:
            raise ConfigError(f"lease call timeout {call_timeout_s!r} s must be > 0")

    # -- what is known -------------------------------------------------------------------

    @property
    def lease(self) -> int | None:
        """The lease held (its etcd id), or None."""
        return self._lease

    @property
    def until(self) -> float:
        """On `clock`: the held lease is certainly alive before this (see the docstring)."""
        return self._until

    def alive(self) -> bool:
        """True while a lease is held and certainly alive."""
        return self._lease is not None and self.clock() < self._until

    def check(self) -> int:
        """The lease, if certainly alive; else LeaseExpired (0 when none is held)."""
        if self._lease is None or not self.alive():
            raise LeaseExpired(self._lease or 0)
        return self._lease

    # -- the calls -----------------------------------------------------------------------

    async def _call(self, what: str, call: Awaitable[_T]) -> _T:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call
        except TimeoutError:
            raise EtcdUnavailable(
                "etcd", f"no answer to the lease {what} within {self._timeout_s:g} s"
            ) from None

    async def grant(self) -> int:
        """The lease held, or a new one granted now."""
        if self._lease is None:
            sent = self.clock()
            self._lease = await self._call("grant", self.kv.lease_grant(self.ttl_s))
            self._until = sent + self.ttl_s - self.margin_s
        return self._lease

    async def refresh(self) -> bool:
        """One keepalive: True when etcd renewed the lease (`until` moves on); False when
        none is held or etcd says it is gone (then it is `lost`). etcd errors raise."""
        lease = self._lease
        if lease is None:
            return False
        sent = self.clock()
        if await self._call("refresh", self.kv.lease_refresh(lease)):
            if self._lease == lease:
                self._until = sent + self.ttl_s - self.margin_s
            return True
        if self._lease == lease:
            self.lost("lease expired in etcd")
        return False

    async def keep(self) -> int:
        """Refresh the lease, or grant a new one when none is held or it is gone."""
        if self._lease is not None and await self.refresh():
            return self._lease
        return await self.grant()

    def forget(self) -> int | None:
        """Stop holding the lease (without revoking it); return it."""
        lease, self._lease = self._lease, None
        return lease

    def lost(self, reason: str) -> int | None:
        """The lease is certainly gone (or given up as lapsed): forget it and report it
        to `on_lost(lease, reason)`; return it."""
        lease = self.forget()
        if self.on_lost is not None:
            self.on_lost(lease, reason)
        return lease

    async def revoke_lease(self, lease: int) -> None:
        """Revoke `lease` (its keys go with it); etcd errors are ignored: it then
        expires on its own."""
        with contextlib.suppress(L0gcError, OSError):
            await self._call("revoke", self.kv.lease_revoke(lease))

    async def revoke(self) -> None:
        """Forget the lease and revoke it (see `revoke_lease`)."""
        lease = self.forget()
        if lease is not None:
            await self.revoke_lease(lease)

    # -- the keeper ----------------------------------------------------------------------

    async def keep_alive(
        self,
        stop: asyncio.Event | None = None,
        *,
        every_s: float | None = None,
        step: Step | None = None,
        first: bool = False,
    ) -> None:
        """Call `step` (default `keep`) every `every_s` s (default TTL/3), and at once
        when `first`, until `stop` is set (or the task is cancelled)."""
        every = self.ttl_s / 3 if every_s is None else every_s
        act = self.keep if step is None else step
        stop = stop or asyncio.Event()
        if first and not stop.is_set():
            await act()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every)
            if not stop.is_set():
                await act()

    @contextlib.asynccontextmanager
    async def running(
        self, step: Step | None = None, *, every_s: float | None = None, first: bool = False
    ) -> AsyncIterator[LeaseSession]:
        """`keep_alive` in the background while the block runs; then let the step in
        flight finish (each of its calls has a deadline) and revoke the lease."""
        stop = asyncio.Event()
        keeper = asyncio.create_task(
            self.keep_alive(stop, every_s=every_s, step=step, first=first), name="lease-keeper"
        )
        try:
            yield self
        finally:
            stop.set()
            try:
                await keeper
            finally:
                await self.revoke()

    async def __aenter__(self) -> LeaseSession:
        """Grant the lease (raise what etcd raises) and keep it alive until the exit."""
        await self.grant()
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self.running())
        self._running = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._running = self._running, None
        if stack is not None:
            await stack.aclose()
