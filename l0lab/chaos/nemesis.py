"""The nemesis: faults on a seeded schedule, one at a time, each healed and recovered from.

`Nemesis.run` repeats until its deadline: draw the next fault kind from the enabled
ones (`random.Random(seed)` decides kinds, targets and durations, so a seed replays the
same schedule; which member leads etcd or holds the ticker's lease is read from the
running system), inject it, keep it for a few seconds, heal it (restart what was
killed, thaw what was frozen, clear the proxy, end the stall), then wait until the
monitor sees recovery (`Monitor.wait_recovery`: M advances, every partition commits,
every sweeper completes an unblocked round) or the recovery bound passes, and pause a
little before the next. Every fault becomes a `FaultRecord` for the checker.

Kills are SIGKILL, clean stops SIGTERM and freezes SIGSTOP/SIGCONT, always of the
harness's own children by PID. A restarted publisher adopts its partitions with the
writers' log ends (`Cluster.restart_publisher`); a restarted replica of a replicated set
gets its share back through the leases, and while a replica is dead, frozen or stopping
the others adopt its partitions without being told the log ends. A *failover* moves one
partition to the other publisher the way a controller would (writes paused, reconciler
caught up, adopt with the log end, writes resumed) but never tells the old owner, which
keeps running: its publishes must be refused from then on. The moved partition's
reconciler resumes only at the heal (a consumer moving with its partition), so until
then only the new owner's refusal to advance M(p) protects the entries written meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import time
import urllib.request
from collections.abc import Awaitable, Callable

import structlog

from l0lab.chaos.checker import FaultRecord
from l0lab.chaos.cluster import EMBEDDED, Cluster
from l0lab.chaos.config import ChaosConfig, FaultKind
from l0lab.chaos.intruders import duplicate_start, forged_member
from l0lab.chaos.monitor import Monitor
from l0lab.chaos.reconciler import Reconcilers
from l0lab.testing.faultproxy import FaultConfig
from l0lab.testing.local_servers import LocalEtcd

__all__ = ["Nemesis", "etcd_leader", "ticker_leader"]

_log = structlog.get_logger("gcd.chaos")
Heal = Callable[[], Awaitable[None]]
_MIN_LEFT_S = 8.0
"""A fault is started only when at least this much of the faulty phase is left."""


class Nemesis:
    """See the module docstring."""

    def __init__(
        self, config: ChaosConfig, cluster: Cluster, reconcilers: Reconcilers, monitor: Monitor
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.reconcilers = reconcilers
        self.monitor = monitor
        self.rng = random.Random(config.seed)
        self.kinds = sorted(config.faults, key=lambda kind: kind.value)
        self._bag: list[FaultKind] = []
        self.faults: list[FaultRecord] = []
        self.current: FaultRecord | None = None
        self._heal: Heal | None = None
        self._m_at_heal: int | None = None

    async def run(self, deadline: float, stop: asyncio.Event) -> None:
        """Inject faults until `deadline` (wall clock), `stop`, or the first loss."""
        if not self.kinds:
            while not self._over(stop) and time.time() < deadline:
                await self._pause(min(1.0, deadline - time.time()), stop)
            return
        while not self._over(stop):
            low, high = self.config.gap_s
            await self._pause(self.rng.uniform(low, high), stop)
            if self._over(stop) or deadline - time.time() < _MIN_LEFT_S:
                return
            kind = self.next_kind()
            duration = self.rng.uniform(*self.config.fault_s)
            if kind in {FaultKind.RECONCILER_STALL, FaultKind.FAILOVER}:
                duration += 4.0  # long enough for M to pass the epochs written meanwhile
            await self._one(kind, duration, stop)
        while not self._over(stop) and time.time() < deadline:  # the quiet tail
            await self._pause(min(1.0, deadline - time.time()), stop)

    def next_kind(self) -> FaultKind:
        """The next fault kind: every enabled kind once, in a seeded order, then again.

        A draw with replacement (the old `rng.choice`) could leave an enabled kind out of
        a whole run: with five kinds and six faults, one run in four never injected a
        given kind (issue 25: `--faults ...,etcd-freeze` injected no etcd-freeze).
        """
        if not self._bag:
            self._bag = list(self.kinds)
            self.rng.shuffle(self._bag)
        return self._bag.pop()

    def not_injected(self) -> list[str]:
        """The enabled kinds the run never injected (too short for all of them)."""
        done = {record.kind for record in self.faults if not record.note.startswith("not injected")}
        return sorted(kind.value for kind in self.kinds if kind.value not in done)

    def _over(self, stop: asyncio.Event) -> bool:
        lost = self.monitor.first_loss is not None
        return stop.is_set() or (self.config.stop_at_first_loss and lost)

    async def _pause(self, seconds: float, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)

    async def _one(self, kind: FaultKind, duration: float, stop: asyncio.Event) -> None:
        record = FaultRecord(kind.value, "-", time.time())
        self.current = record
        self.faults.append(record)
        try:
            target, heal = await self._inject(kind)
        except Exception as exc:  # noqa: BLE001 - a fault not injected is noted, the run goes on
            record.note = f"not injected: {exc!r}"
            record.healed_at = record.recovered_at = time.time()
            self.current = None
            _log.warning("chaos.fault_failed", kind=kind.value, error=repr(exc))
            return
        record.target = target
        self._heal = heal
        _log.info("chaos.fault", kind=kind.value, target=target, seconds=round(duration, 1))
        await self._pause(duration, stop)
        await self.heal_current()
        assert record.healed_at is not None
        recovered, m_advanced, missing = await self.monitor.wait_recovery(
            record.healed_at, self._m_at_heal, self.config.recovery_bound_s, stop
        )
        record.recovered_at, record.m_advanced_at, record.note = recovered, m_advanced, missing
        record.cut_short = recovered is None and self._over(stop)
        self.current = None

    async def heal_current(self) -> None:
        """Heal the fault in progress (also called when the run stops early)."""
        heal, self._heal = self._heal, None
        if heal is None:
            return
        try:
            await heal()
        finally:
            if self.current is not None:
                self.current.healed_at = time.time()
            self._m_at_heal = self.monitor.m_now()

    async def heal_all(self) -> None:
        """End the fault in progress and bring back anything not running normally."""
        await self.heal_current()
        cluster = self.cluster
        cluster.proxy.reconfigure(FaultConfig())
        for partition in self.reconcilers.feeds:
            self.reconcilers.stall(partition, False)
        for member in cluster.etcd.members:
            if member.pid is not None:
                member.signal(signal.SIGCONT)
            else:
                await asyncio.to_thread(member.start)
        for name, pub in cluster.publishers.items():
            if pub.child.frozen:
                pub.child.thaw()
            if not pub.child.alive:
                await cluster.restart_publisher(name)
        for name, writer in cluster.writers.items():
            if writer.child.frozen:
                writer.child.thaw()
            if not writer.child.alive:
                await cluster.start_writer(name, seed_bump=len(self.faults))
        for sweeper in cluster.sweepers:
            if sweeper.child.frozen:
                sweeper.child.thaw()
            if not sweeper.child.alive:
                await cluster.start_sweeper(sweeper)

    # -- the faults -----------------------------------------------------------------------

    async def _inject(self, kind: FaultKind) -> tuple[str, Heal]:
        cluster, rng = self.cluster, self.rng
        if kind in {FaultKind.ETCD_KILL, FaultKind.ETCD_LEADER_KILL, FaultKind.ETCD_FREEZE}:
            return await self._etcd(kind)
        if kind in {FaultKind.PUBLISHER_KILL, FaultKind.TICKER_LEADER_KILL}:
            name = rng.choice(sorted(cluster.publishers))
            if kind is FaultKind.TICKER_LEADER_KILL:
                name = await ticker_leader(cluster) or name
            cluster.publishers[name].child.kill()
            return name, lambda: cluster.restart_publisher(name)
        if kind is FaultKind.PUBLISHER_TERM:
            name = rng.choice(sorted(cluster.publishers))
            await asyncio.to_thread(cluster.publishers[name].child.stop, 20.0)
            return name, lambda: cluster.restart_publisher(name)
        if kind is FaultKind.PUBLISHER_FREEZE:
            child = cluster.publishers[rng.choice(sorted(cluster.publishers))].child
            return self._freeze(child.name, child.freeze, child.thaw)
        if kind is FaultKind.FAILOVER:
            return await self._failover()
        if kind is FaultKind.PUBLISHER_DUP_START:
            return await duplicate_start(cluster, rng)
        if kind is FaultKind.FORGED_MEMBER:
            return await forged_member(cluster, rng)
        if kind in {FaultKind.SWEEPER_KILL, FaultKind.SWEEPER_FREEZE}:
            sweeper = rng.choice(cluster.sweepers)
            if kind is FaultKind.SWEEPER_FREEZE:
                return self._freeze(sweeper.child.name, sweeper.child.freeze, sweeper.child.thaw)
            sweeper.child.kill()
            return sweeper.child.name, lambda: cluster.start_sweeper(sweeper)
        if kind in {FaultKind.WRITER_KILL, FaultKind.WRITER_FREEZE}:
            name = rng.choice(sorted(cluster.writers))
            child = cluster.writers[name].child
            if kind is FaultKind.WRITER_FREEZE:
                return self._freeze(child.name, child.freeze, child.thaw)
            child.kill()
            return child.name, lambda: cluster.start_writer(name, seed_bump=len(self.faults))
        if kind is FaultKind.RECONCILER_STALL:
            partition = rng.choice(sorted(self.reconcilers.feeds))
            self.reconcilers.stall(partition, True)
            return f"reconciler {partition}", self._unstall(partition)
        return self._s3(kind)

    def _freeze(
        self, name: str, freeze: Callable[[], None], thaw: Callable[[], None]
    ) -> tuple[str, Heal]:
        freeze()

        async def heal() -> None:
            thaw()

        return name, heal

    def _unstall(self, partition: str) -> Heal:
        async def heal() -> None:
            self.reconcilers.stall(partition, False)

        return heal

    def _s3(self, kind: FaultKind) -> tuple[str, Heal]:
        rng, proxy = self.rng, self.cluster.proxy
        seed = rng.getrandbits(32)
        if kind is FaultKind.S3_STORM:
            share = round(rng.uniform(0.3, 0.7), 2)
            codes = ("SlowDown", "InternalError", "ServiceUnavailable")
            proxy.reconfigure(FaultConfig(share=share, seed=seed, codes=codes))
            target = f"s3 {share:.0%} errors"
        elif kind is FaultKind.S3_LATENCY:
            delay = round(rng.uniform(0.1, 0.4), 2)
            proxy.reconfigure(FaultConfig(delay_s=delay, seed=seed))
            target = f"s3 +{delay * 1000:.0f} ms"
        else:
            share = round(rng.uniform(0.2, 0.5), 2)
            proxy.reconfigure(FaultConfig(drop_share=share, seed=seed))
            target = f"s3 {share:.0%} dropped"

        async def heal() -> None:
            proxy.reconfigure(FaultConfig())

        return target, heal

    async def _etcd(self, kind: FaultKind) -> tuple[str, Heal]:
        members = [m for m in self.cluster.etcd.members if m.process is not None]
        member: LocalEtcd = self.rng.choice(members)
        leader = kind is FaultKind.ETCD_LEADER_KILL or (
            kind is FaultKind.ETCD_FREEZE and self.rng.random() < 0.5
        )
        if leader:
            found = await asyncio.to_thread(etcd_leader, self.cluster)
            member = found or member
        name = f"etcd {member.name}"
        if kind is FaultKind.ETCD_FREEZE:
            return self._freeze(
                name, lambda: member.signal(signal.SIGSTOP), lambda: member.signal(signal.SIGCONT)
            )
        await asyncio.to_thread(member.stop, kill=True)

        async def heal() -> None:
            await asyncio.to_thread(member.start)

        return name, heal

    async def _failover(self) -> tuple[str, Heal]:
        cluster = self.cluster
        movable = sorted(p for p, owner in cluster.routes.items() if owner != EMBEDDED)
        partition = self.rng.choice(movable)
        old = cluster.routes[partition]
        new = next(name for name in sorted(cluster.publishers) if name != old)
        ends = await cluster.writer_pause("http", [partition])
        try:
            await self.reconcilers.catch_up([partition])  # a graceful hand-over: nothing left
            if await cluster.adopt(new, partition, ends[partition]):
                cluster.routes[partition] = new
            # The partition's consumer moves with its leadership and takes a while to
            # resume: until the heal its entries on the new owner stay unreconciled.
            self.reconcilers.stall(partition, True)
        finally:
            await cluster.writer_resume("http", [partition])
        return f"{partition} {old}->{new}", self._unstall(partition)


async def ticker_leader(cluster: Cluster) -> str | None:
    """The publisher whose ticker holds the lease (by its owner id in etcd)."""
    assert cluster.kv is not None
    assert cluster.store is not None
    item = await cluster.kv.get(cluster.store.leader_key)
    if item is None:
        return None
    holder = item.value.decode(errors="replace")
    return next(
        (
            name
            for name, pub in cluster.publishers.items()
            if pub.owner_id == holder and pub.child.alive
        ),
        None,
    )


def etcd_leader(cluster: Cluster) -> LocalEtcd | None:
    """The member leading the raft group, asked over etcd's JSON gateway."""
    statuses: dict[str, LocalEtcd] = {}
    leader = None
    for member in cluster.etcd.members:
        if member.process is None:
            continue
        request = urllib.request.Request(
            f"http://{member.endpoint}/v3/maintenance/status", data=b"{}", method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=1) as response:  # noqa: S310
                doc = json.loads(response.read())
        except (OSError, ValueError):
            continue
        statuses[str(doc["header"]["member_id"])] = member
        leader = str(doc.get("leader"))
    return statuses.get(leader) if leader else None
