"""The epoch ticker: advances the cluster epoch every interval, one leader at a time.

Design notes: docs/internals/publisher.md, `watermark.service.ticker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from l0gc.contract.kv import KV, Compare, Put
from l0gc.errors import (
    ConfigError,
    EpochConflict,
    EtcdUnavailable,
    LeaseExpired,
    WatermarkUnavailable,
)
from l0gc.etcd.session import LeaseSession
from l0gc.etcd.store import WatermarkStore
from l0gc.events import Emitter, Hooks
from watermark.events import (
    TickerAdvanceConflict,
    TickerAdvanced,
    TickerElected,
    TickerLeadershipLost,
    TickerStarted,
    TickerTickFailed,
)
from watermark.service.eventlog import EVENT_LOG

__all__ = ["EpochTicker"]

_TICKER_EVENTS = (
    TickerStarted,
    TickerElected,
    TickerLeadershipLost,
    TickerAdvanced,
    TickerAdvanceConflict,
    TickerTickFailed,
)


class EpochTicker:
    """Leader-elected cluster epoch clock; see the module docstring."""

    def __init__(
        self,
        store: WatermarkStore,
        kv: KV,
        interval_s: float,
        owner_id: str,
        lease_ttl_s: int,
        *,
        now: Callable[[], float] = time.monotonic,
        hook: Hooks = EVENT_LOG,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"epoch tick interval {interval_s!r} must be > 0 s")
        if lease_ttl_s < 2:
            raise ConfigError(f"ticker lease TTL {lease_ttl_s!r} must be >= 2 s")
        if not owner_id:
            raise ConfigError("ticker owner id must not be empty; use host name + process id")
        self._store = store
        self._kv = kv
        self._interval_s = interval_s
        self._owner_id = owner_id
        self._lease_ttl_s = lease_ttl_s
        self._now = now
        self._session = LeaseSession(
            kv, lease_ttl_s, clock=now, on_lost=lambda _id, _why: self._step_down("lease expired")
        )
        self._leader_revision: int | None = None  # mod_revision of our leader key
        self._emit = Emitter(hook, _TICKER_EVENTS)

    @property
    def is_leader(self) -> bool:
        """True while this ticker holds the leader key (as last seen) and its lease is
        certainly alive: a leader cut off from etcd stops saying so when its lease ends,
        not when a tick next succeeds."""
        return self._leader_revision is not None and self._session.alive()

    @property
    def lease_id(self) -> int | None:
        """The etcd lease this ticker holds, if any."""
        return self._session.lease

    def _step_down(self, reason: str) -> None:
        if self._leader_revision is not None:
            self._emit(TickerLeadershipLost(self._owner_id, reason))
        self._leader_revision = None

    async def _campaign(self, lease: int) -> bool:
        if self._leader_revision is not None:
            return True
        key = self._store.leader_key
        claim = Put(key, self._owner_id.encode(), lease=lease)
        result = await self._kv.txn([Compare(key, 0)], [claim])
        if result.succeeded:
            self._leader_revision = result.revision
        else:
            # An earlier claim whose answer was lost (etcd went away mid-call) may have
            # landed: the key is then ours, on our lease, and must be adopted, or nobody
            # would lead for as long as we keep refreshing that lease.
            item = await self._kv.get(key)
            if item is None or item.lease != lease or item.value != claim.value:
                return False
            self._leader_revision = item.mod_revision
        self._emit(TickerElected(self._owner_id, self._store.namespace))
        return True

    async def _advance(self) -> bool:
        assert self._leader_revision is not None
        key = self._store.leader_key
        try:
            epoch = await self._store.advance_cluster_epoch(
                guard=[Compare(key, self._leader_revision)]
            )
        except EpochConflict as exc:
            item = await self._kv.get(key)
            if item is None or item.mod_revision != self._leader_revision:
                self._step_down("leader key changed")
            else:  # someone else (e.g. the admin CLI) advanced the epoch meanwhile
                self._emit(TickerAdvanceConflict(self._owner_id, str(exc)))
            return False
        self._emit(TickerAdvanced(self._owner_id, epoch))
        return True

    async def tick_once(self, *, advance: bool = True) -> bool:
        """Keep the lease, campaign, and (if leader and `advance`) advance the epoch.

        Returns True when this call advanced the cluster epoch. etcd failures are logged
        and end the tick; the next tick starts over.
        """
        try:
            lease = await self._session.keep()
            if not await self._campaign(lease) or not advance:
                return False
            return await self._advance()
        except LeaseExpired:
            self._session.forget()
            self._step_down("lease expired")
        except (EtcdUnavailable, WatermarkUnavailable) as exc:
            self._emit(TickerTickFailed(self._owner_id, str(exc)))
            if self._leader_revision is not None and not self._session.alive():
                self._step_down("lease expired while etcd was unreachable")
        return False

    async def resign(self) -> None:
        """Give up leadership now: revoke the lease (which deletes the leader key)."""
        lease = self._session.forget()
        self._step_down("resigned")
        if lease is not None:
            await self._session.revoke_lease(lease)

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, then resign."""
        wake_every = min(self._interval_s, self._lease_ttl_s / 3)
        self._emit(TickerStarted(self._owner_id, self._interval_s))
        next_advance = self._now()
        try:
            while not stop.is_set():
                due = self._now() >= next_advance
                await self.tick_once(advance=due)
                if due:
                    next_advance = self._now() + self._interval_s
                wait = min(wake_every, max(0.0, next_advance - self._now()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)
        finally:
            await self.resign()
