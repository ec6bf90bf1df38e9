"""`watermark serve --replicated`: replicas share a partition set through etcd leases.

Design notes: docs/internals/publisher.md, `watermark.service.replicas`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import structlog

from l0gc.contract.kv import KV, Compare, Delete, Put
from l0gc.contract.members import (
    ClaimRecord,
    Identity,
    MemberRecord,
    View,
    check_member_id,
    validate_address,
)
from l0gc.errors import ConfigError, L0gcError, LeaseExpired, NoOwner, NotServed
from l0gc.etcd.session import LeaseSession
from l0gc.etcd.store import WatermarkStore
from watermark.core.assignment import Plan, Route, RouteKind, plan, route
from watermark.core.fleet import FleetUrls
from watermark.service.publisher import Publisher
from watermark.service.replica_view import ViewReader

__all__ = [
    "ADOPTION_ALLOWANCE_S",
    "HANDOVER_GRACE_S",
    "ReplicaSet",
    "ReplicaSettings",
    "advertised_url",
    "failover_bound_s",
]

ADOPTION_ALLOWANCE_S = 2.0
"""What `failover_bound_s` allows for claiming and adopting on a loaded machine."""
HANDOVER_GRACE_S = 1.0
"""How long `watermark serve` keeps serving a partition it is to hand over (see the
module docstring): longer than a writer takes to follow a 307, even on a loaded machine."""
_CLAIM_BATCH = 64  # etcd allows 128 operations per transaction by default
_log = structlog.get_logger("watermark.replicas")


def failover_bound_s(lease_ttl_s: float, interval_s: float) -> float:
    """How long a dead replica's partitions stay without an owner, at most: its lease's
    TTL, a round to see the claims gone, a round to claim, and adopting them."""
    return lease_ttl_s + 2 * interval_s + ADOPTION_ALLOWANCE_S


def advertised_url(host: str, port: int, *, tls: bool) -> str:
    """The default `--advertise-url`: the listening address, or this host's name when
    it listens on every address."""
    scheme = "https" if tls else "http"
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - naming the wildcard, not binding it
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """One replica: its id, the URL others redirect to, its partitions and timings."""

    member_id: str
    address: str
    partitions: tuple[str, ...]
    lease_ttl_s: int = 5
    interval_s: float = 0.5
    fast_interval_s: float = 0.05
    route_wait_s: float = 8.0
    """How long a request waits for a partition that is moving (then 503 no_owner)."""
    leave_wait_s: float = 10.0
    """On leaving, how long to wait for the others to claim what was handed over."""
    handover_grace_s: float = 0.0
    """How long a partition assigned elsewhere (or everything, when leaving) is still
    served before it is handed over (`HANDOVER_GRACE_S` for `watermark serve`)."""
    linger_s: float = 0.0
    """After that, how long to keep redirecting (clients that cached this replica as a
    partition's owner learn the new one instead of finding the port closed)."""
    fleet: FleetUrls | None = None
    """The addresses a member may have to count (--fleet-urls); None: this replica's
    scheme, and its port on any host or its host on any port (`FleetUrls.default_for`)."""

    @classmethod
    def for_serve(
        cls,
        member_id: str,
        partitions: tuple[str, ...],
        lease_ttl_s: int,
        interval_s: float,
        drain_timeout_s: float,
        *,
        advertise_url: str | None = None,
        fleet: FleetUrls | None = None,
    ) -> ReplicaSettings:
        """The settings of `watermark serve --replicated`; without `advertise_url` the
        address is set by `ReplicaSet.advertise` once the port is bound.

        A request for a moving partition waits as long as a handover may take (the
        grace, the drain, then a few rounds); leaving waits that and a lease TTL for the
        others, then keeps redirecting for one more lease TTL."""
        if advertise_url is not None:
            try:
                validate_address(advertise_url)
            except ConfigError as exc:
                raise ConfigError(f"--advertise-url: {exc}") from None
            if fleet is not None and not fleet.allows(advertise_url):
                raise ConfigError(
                    f"--advertise-url {advertise_url} is not in --fleet-urls {fleet.spec}: the "
                    "other replicas would ignore this one; add its address to --fleet-urls"
                )
        return cls(
            member_id,
            advertise_url or "http://127.0.0.1:1",
            partitions,
            lease_ttl_s=lease_ttl_s,
            interval_s=interval_s,
            route_wait_s=HANDOVER_GRACE_S + drain_timeout_s + 3.0,
            leave_wait_s=HANDOVER_GRACE_S + drain_timeout_s + lease_ttl_s + 2.0,
            handover_grace_s=HANDOVER_GRACE_S,
            linger_s=float(lease_ttl_s),
            fleet=fleet,
        )

    def __post_init__(self) -> None:
        check_member_id(self.member_id)
        validate_address(self.address)
        if self.lease_ttl_s < 2:
            raise ConfigError(
                f"--member-lease-ttl {self.lease_ttl_s} s is too short: etcd keeps leases at "
                "least 2 s; use 2-60 s (a dead replica's partitions move after about this long)"
            )
        if not 0 < self.interval_s <= self.lease_ttl_s / 2:
            raise ConfigError(
                f"--membership-interval {self.interval_s} s must be > 0 and at most half of "
                f"--member-lease-ttl ({self.lease_ttl_s} s)"
            )


class ReplicaSet:
    """This replica's membership, claims and adoptions; see the module docstring."""

    def __init__(
        self,
        store: WatermarkStore,
        kv: KV,
        publisher: Publisher,
        settings: ReplicaSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._store = store
        self._kv = kv
        self._publisher = publisher
        self._clock = clock
        self._wall_clock = wall_clock
        self._metrics = publisher.metrics
        self._partitions = frozenset(settings.partitions)
        self._record = MemberRecord(settings.member_id, settings.address, self._partitions)
        self.orphan_grace_s = settings.leave_wait_s + settings.linger_s + 2 * settings.lease_ttl_s
        """How long a claim may outlive its member record (a leaving replica's handover)."""
        self._reader = ViewReader(
            kv,
            store.namespace,
            self._partitions,
            settings.fleet or FleetUrls.default_for(settings.address),
            orphan_grace_s=self.orphan_grace_s,
            metrics=self._metrics,
            clock=clock,
        )
        self.members_prefix = self._reader.members_prefix
        self.claims_prefix = self._reader.claims_prefix
        self._member_key = self.members_prefix + settings.member_id
        self._session = LeaseSession(
            kv,
            settings.lease_ttl_s,
            clock=clock,
            margin_s=min(1.0, settings.lease_ttl_s / 4),
            on_lost=self._lost,
        )
        self._announced = False
        self._member_revision = 0
        self._leaving = False
        self.view: View | None = None
        self._view_seq = 0
        self._rounds_started = 0
        self._busy: set[str] = set()
        self._moving_since: dict[str, float] = {}
        """Partitions to hand over, in their grace: since when the plan has said so."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending = False
        self._waiters = 0
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._unowned_since: dict[str, float] = {}
        self._retry_at: dict[str, tuple[float, float]] = {}
        self.settled = False
        """True once a first round has run with this replica announced."""

    @property
    def fleet(self) -> FleetUrls:
        """The addresses a member may have to count (--fleet-urls or the default)."""
        return self._reader.fleet

    @property
    def address(self) -> str:
        """This replica's URL, as the others redirect writers to it."""
        return self._record.address

    def advertise(self, address: str) -> None:
        """Set the URL to announce (before `join`: e.g. once the port is bound);
        ConfigError if it is outside --fleet-urls."""
        fleet = self.settings.fleet
        if fleet is None:
            self._reader.fleet = FleetUrls.default_for(validate_address(address))
        elif not fleet.allows(address):
            raise ConfigError(
                f"this replica's address {address} is not in --fleet-urls {fleet.spec}: the "
                "other replicas would ignore it; give --advertise-url or fix --fleet-urls"
            )
        self._record = MemberRecord(
            self.settings.member_id, validate_address(address), self._partitions
        )

    @property
    def identity(self) -> Identity:
        """This process as claims name it (lease 0 while it holds none)."""
        return Identity(self.settings.member_id, self._session.lease or 0)

    # -- lease and membership ------------------------------------------------------------

    def _lease_valid(self) -> bool:
        until = self._publisher.owned_until
        return self._session.lease is not None and until is not None and self._clock() < until

    async def join(self) -> None:
        """Take a lease and announce this replica (raise what etcd raises)."""
        if self._session.lease is None:
            await self._session.grant()
            self._publisher.owned_until = self._session.until
            self._announced = False
        lease = self._session.lease
        if self._announced or self._leaving or lease is None:
            return
        raw = self._record.encode(self._wall_clock())
        put = Put(self._member_key, raw, lease)
        result = await self._kv.txn([Compare(self._member_key, 0)], [put])
        self._member_revision = result.revision
        if not result.succeeded:
            item = await self._kv.get(self._member_key)
            if item is not None:
                self._member_revision = item.mod_revision
            if item is None or item.lease != lease:
                _log.warning(
                    "watermark.replica_id_in_use",
                    member=self.settings.member_id,
                    detail="another process holds this member id (--owner-id); waiting "
                    "for its lease to expire",
                )
                return
        self._announced = True
        self._metrics.replica_member.set(1)
        _log.info(
            "watermark.replica_joined",
            member=self.settings.member_id,
            address=self.address,
            lease=f"{lease:x}",
            partitions=len(self._partitions),
        )
        self._wake.set()

    def _lost(self, lease: int | None, reason: str) -> None:
        """The lease is gone or lapsed (`LeaseSession.lost`, which forgot it): drop
        everything, revoke the lease in the background."""
        self._announced = False
        self._publisher.owned_until = self._clock()
        self._publisher.lapsed()  # drops every partition now
        self._metrics.ownership_lapses.inc()
        self._metrics.replica_member.set(0)
        _log.warning("watermark.replica_lease_lost", member=self.settings.member_id, reason=reason)
        if lease is not None:
            task = asyncio.create_task(self._session.revoke_lease(lease))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def keep_lease(self) -> None:
        """One keepalive step: refresh the lease (or find it gone or lapsed, and replace
        it), and announce this replica if it is not yet. etcd failures are logged."""
        session = self._session
        try:
            if await session.refresh():  # False: none held, or gone (then `_lost`)
                self._publisher.owned_until = session.until
            if session.lease is not None and not self._lease_valid():
                session.lost("lease not renewed in time")
            await self.join()
        except LeaseExpired:
            session.lost("lease expired in etcd")
        except L0gcError as exc:
            _log.warning("watermark.replica_lease_failed", error=str(exc))
            if session.lease is not None and not self._lease_valid():
                session.lost("lease not renewed in time")

    # -- rounds --------------------------------------------------------------------------

    async def run_round(self) -> Plan | None:
        """Read the view and act on it once; None if etcd could not be read."""
        self._rounds_started += 1
        seq = self._rounds_started
        try:
            view = await self._reader.read(self.view)
        except L0gcError as exc:
            _log.warning("watermark.replica_round_failed", error=str(exc))
            return None
        self.view, self._view_seq = view, seq
        me = self.identity
        hosted = frozenset(self._publisher.partitions)
        decided = plan(
            view, me, partitions=self._partitions, hosted=hosted, busy=frozenset(self._busy)
        )
        self._pending = bool(decided.pending)
        self._observe(view)
        for partition in decided.drop:
            self._publisher.drop(partition, "claim lost")
            _log.warning("watermark.partition_claim_lost", partition=partition)
        due = self._past_grace(decided.hand_over)
        if due:
            self._start_hand_over(due)
        try:
            await self._delete_claims(decided.unclaim)
            if self._reader.foreign and self._lease_valid() and self._announced:
                await self._reader.remove_foreign_claims()
            if self._lease_valid() and self._announced:
                claimed = await self._claim(decided.claim)
                await self._adopt([*decided.adopt, *claimed])
        except L0gcError as exc:
            _log.warning("watermark.replica_round_failed", error=str(exc))
        self.settled = self.settled or self._announced
        await self._notify()
        return decided

    def _observe(self, view: View) -> None:
        """Track since when each partition of ours has had no owner: no claim, a claim
        of a replica that is leaving, or our own claim not adopted yet."""
        now = self._clock()
        me = self.identity
        hosted = set(self._publisher.partitions)
        self._metrics.replicas.set(len(view.members))
        for partition in self._partitions:
            held = view.claims.get(partition)
            owned = held is not None and view.is_live(held) is not None
            if owned and held is not None and held.held_by(me):
                owned = partition in hosted
            if owned:
                self._unowned_since.pop(partition, None)
            else:
                self._unowned_since.setdefault(partition, now)
        since = self._unowned_since.values()
        self._metrics.partitions_unowned.set(len(since))
        self._metrics.longest_unowned.set(round(now - min(since), 3) if since else 0)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _claim(self, partitions: Sequence[str]) -> list[str]:
        """Create the claims of `partitions` on this lease; return the ones now held."""
        now = self._clock()
        wanted = [p for p in partitions if self._retry_at.get(p, (0.0, 0.0))[0] <= now]
        lease, claimed = self._session.lease, []
        if not wanted or lease is None:
            return []
        value = ClaimRecord(self.settings.member_id, lease).encode()
        for start in range(0, len(wanted), _CLAIM_BATCH):
            batch = wanted[start : start + _CLAIM_BATCH]
            keys = [self.claims_prefix + p for p in batch]
            compares = [Compare(key, 0) for key in keys]
            if (await self._kv.txn(compares, [Put(k, value, lease) for k in keys])).succeeded:
                claimed.extend(batch)
                continue
            for partition, key in zip(batch, keys, strict=True):  # lost a race: one by one
                if (await self._kv.txn([Compare(key, 0)], [Put(key, value, lease)])).succeeded:
                    claimed.append(partition)
        return claimed

    async def _adopt(self, partitions: Iterable[str]) -> None:
        for partition in partitions:
            now = self._clock()
            if self._retry_at.get(partition, (0.0, 0.0))[0] > now or not self._lease_valid():
                continue
            try:
                state = await self._publisher.adopt(partition)
            except L0gcError as exc:
                backoff = min(30.0, 2 * self._retry_at.get(partition, (0.0, 0.25))[1])
                self._retry_at[partition] = (now + backoff, backoff)
                _log.error(
                    "watermark.replica_adopt_failed",
                    partition=partition,
                    error=str(exc),
                    retry_in_s=backoff,
                )
                continue
            self._retry_at.pop(partition, None)
            since = self._unowned_since.pop(partition, now)
            waited = max(0.0, self._clock() - since)
            known = "known" if state["log_end_known"] else "unknown"
            self._metrics.adoptions.labels(log_end=known).inc()
            self._metrics.time_to_adopt.observe(waited)
            _log.info(
                "watermark.replica_adopted",
                partition=partition,
                member=self.settings.member_id,
                log_end=known,
                unowned_s=round(waited, 3),
            )

    def _past_grace(self, planned: Sequence[str]) -> list[str]:
        """The planned handovers whose grace is over; a partition the plan no longer
        hands over (the move was undone) is forgotten."""
        now = self._clock()
        self._moving_since = {p: self._moving_since.get(p, now) for p in planned}
        grace = self.settings.handover_grace_s
        return [p for p, since in self._moving_since.items() if now - since >= grace]

    def _start_hand_over(self, partitions: Sequence[str]) -> None:
        self._busy.update(partitions)
        task = asyncio.create_task(self._hand_over(list(partitions)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hand_over(self, partitions: list[str]) -> None:
        try:
            results = await self._publisher.hand_over(partitions)
            for partition, sealed in results.items():
                self._metrics.handovers.labels(outcome="sealed" if sealed else "unsealed").inc()
                _log.info(
                    "watermark.replica_handed_over",
                    partition=partition,
                    member=self.settings.member_id,
                    sealed=sealed,
                )
            with contextlib.suppress(L0gcError):
                await self._delete_claims(partitions)
        finally:
            self._busy.difference_update(partitions)
            self._wake.set()
            await self._notify()

    async def wait_handovers(self) -> None:
        """Return once no handover (or lease revocation) started here is in flight."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _delete_claims(self, partitions: Sequence[str]) -> None:
        """Delete this replica's claims of `partitions` (each only if unchanged)."""
        revisions = self._reader.claim_revisions
        ops = [(self.claims_prefix + p, revisions[p]) for p in partitions if p in revisions]
        for start in range(0, len(ops), _CLAIM_BATCH):
            batch = ops[start : start + _CLAIM_BATCH]
            compares = [Compare(key, rev) for key, rev in batch]
            if not (await self._kv.txn(compares, [Delete(key) for key, _ in batch])).succeeded:
                for key, rev in batch:
                    await self._kv.txn([Compare(key, rev)], [Delete(key)])

    # -- requests ------------------------------------------------------------------------

    def check_served(self, partition: str) -> None:
        """NotServed unless this replica's --partitions list names `partition` (the
        replicas of one fleet share one list; a registration of any other name would
        be a record nobody hosts)."""
        if partition not in self._partitions:
            names = sorted(self._partitions)
            shown = ", ".join(names[:3]) + (
                f", ... ({len(names)} in all)" if len(names) > 3 else ""
            )
            raise NotServed(partition, shown or "none")

    async def locate(self, partition: str) -> Route:
        """Where a request for `partition` goes (see the module docstring); waits while it
        moves, at most `route_wait_s`, then raises NoOwner."""
        arrived = self._rounds_started
        loop = asyncio.get_running_loop()  # a real wait: the loop's clock, not `clock`
        deadline = loop.time() + self.settings.route_wait_s
        reason = "no view of the replicas read yet"
        self._waiters += 1
        self._wake.set()
        try:
            async with self._changed:
                while True:
                    if self._publisher.serving(partition):
                        return Route(RouteKind.SERVE, "hosted here")
                    view = self.view
                    if view is not None and self._view_seq > arrived:
                        found = route(partition, view, self.identity, serving=False)
                        if found.kind is not RouteKind.WAIT:
                            return found
                        reason = found.reason
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise NoOwner(partition, reason, self.settings.route_wait_s)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), remaining)
        finally:
            self._waiters -= 1

    # -- the whole life ------------------------------------------------------------------

    def _in_motion(self) -> bool:
        return bool(
            self._waiters or self._busy or self._moving_since or self._pending or self._leaving
        )

    async def _sleep(self, stop: asyncio.Event | None) -> None:
        interval = self.settings.fast_interval_s if self._in_motion() else self.settings.interval_s
        waits = [asyncio.ensure_future(self._wake.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        self._wake.clear()

    async def run(self, stop: asyncio.Event) -> None:
        """Join, run rounds until `stop`, then leave (hand over, revoke the lease)."""
        keeper = asyncio.create_task(
            self._session.keep_alive(
                every_s=self.settings.lease_ttl_s / 4,
                step=self.keep_lease,
                first=True,
            ),
            name="replica-lease",
        )
        try:
            while not stop.is_set():
                await self.run_round()
                await self._sleep(stop)
            await self.leave()
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            for task in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, L0gcError):
                    await task
            self._metrics.replica_member.set(0)
            await self._session.revoke()

    async def leave(self) -> None:
        """Stop being a member: hand over every partition, wait (bounded) until the
        others have claimed them."""
        self._leaving = True
        handed = set(self._publisher.partitions)
        if self._announced:
            key, revision = self._member_key, self._member_revision
            with contextlib.suppress(L0gcError):
                await self._kv.txn([Compare(key, revision)], [Delete(key)])
        self._announced = False
        self._metrics.replica_member.set(0)
        _log.info(
            "watermark.replica_leaving", member=self.settings.member_id, partitions=len(handed)
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.leave_wait_s
        while loop.time() < deadline:
            await self.run_round()
            view = self.view
            mine = view is not None and any(c.held_by(self.identity) for c in view.claims.values())
            if not self._publisher.partitions and not self._busy and not mine:
                others = view is not None and all(
                    p in view.claims and view.is_live(view.claims[p]) is not None for p in handed
                )
                if others or not (view and view.members):
                    break
            await self._sleep(None)
        linger_until = loop.time() + self.settings.linger_s
        while loop.time() < linger_until:  # keep views fresh for the redirects
            await self.run_round()
            await self._sleep(None)
        _log.info("watermark.replica_left", member=self.settings.member_id)
