"""Publisher high availability: failover after kill -9, and a rolling restart of 3.

Three `watermark serve --replicated` processes (`l0lab.testing.local_replicas.LocalReplicas`) on
one local etcd share the partitions; a writer per partition fences and commits through
them with the owner-lookup retry loop of docs/integration.md (`OwnerClient`: cached
owner, 307 followed, 503 / connection errors retried at another replica after 0.1 s).
No S3: the writes only fence and commit, so what is measured is the publishers.

1. Failover: kill -9 a replica (seeded choice), measure the time until every partition
   is hosted again by exactly one live replica (each replica's ``GET /v1/partitions``,
   polled every 20 ms) and the longest write stall it caused (for each partition, the
   gap between the last acknowledged commit before the kill and the first after it);
   restart the killed replica, wait until it has its share back, repeat.
2. Rolling restart, as the chart's `RollingUpdate` does it (maxSurge 1): start a
   replacement, wait until ready, SIGTERM the old replica, for each of the 3; the
   longest write stall over the whole rollout and the most attempts any fence request
   needed (2 = one retry).

The replicas run with the defaults of `watermark serve` (member lease TTL 5 s,
membership interval 0.5 s) at every size.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.common import Goal, Report, Scale, Table
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_replicas import LocalReplicas, OwnerClient, ReplicaWriter
from l0lab.testing.local_servers import LocalEtcd
from watermark.service.clock import EpochClock
from watermark.service.replicas import ADOPTION_ALLOWANCE_S, failover_bound_s

NAME = "failover"
TITLE = "8. Publisher replicas: failover after kill -9, and a rolling restart of 3"
NAMESPACE = "/l0gc/bench-failover"
WRITE_EVERY_S = 0.1


@dataclass(frozen=True, slots=True)
class _Size:
    partitions: int
    kills: int
    lease_ttl_s: int
    interval_s: float


_SIZES = {
    Scale.TOY: _Size(partitions=6, kills=1, lease_ttl_s=5, interval_s=0.5),
    Scale.QUICK: _Size(partitions=12, kills=5, lease_ttl_s=5, interval_s=0.5),
    Scale.FULL: _Size(partitions=24, kills=20, lease_ttl_s=5, interval_s=0.5),
}


class _Bench:
    def __init__(self, replicas: LocalReplicas, session: aiohttp.ClientSession) -> None:
        self.replicas = replicas
        self.session = session
        self.writers: list[ReplicaWriter] = []

    async def hosted_once(self) -> bool:
        hosts = await self.replicas.hosted(self.session, self.replicas.tokens["writer"])
        return all(len(names) == 1 for names in hosts.values())

    async def until(self, check: object, timeout_s: float, what: str) -> float:
        """Poll `check` every 20 ms; the seconds it took (RuntimeError after timeout_s)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            result = check() if callable(check) else check
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return time.monotonic() - started
            await asyncio.sleep(0.02)
        raise RuntimeError(f"{what}: not within {timeout_s} s\n{self.replicas.logs()[-3000:]}")

    async def settled(self, name: str) -> None:
        """Every partition hosted by exactly the live replica rendezvous hashing gives it
        (replica `name` just restarted: its new owner id may give it any share, even none)."""

        async def ready() -> bool:
            hosts = await self.replicas.hosted(self.session, self.replicas.tokens["writer"])
            expected = self.replicas.assigned()
            return all(hosts.get(p) == [owner] for p, owner in expected.items())

        await self.until(ready, 60, f"{name} back and every partition at its assigned replica")

    def stall(self, moment: float) -> float:
        return max(w.stall_around(moment) for w in self.writers)


async def _kill_cycle(bench: _Bench, rng: random.Random) -> tuple[float, float]:
    hosts = await bench.replicas.hosted(bench.session, bench.replicas.tokens["writer"])
    owners = sorted({names[0] for names in hosts.values() if names})
    victim = rng.choice(owners)  # one that owns something
    killed_at = time.monotonic()
    bench.replicas.kill(victim)
    failover = await bench.until(bench.hosted_once, 120, "owned again after kill -9")
    await bench.until(lambda: _commits_after(bench, killed_at), 60, "writes after the kill")
    stall = bench.stall(killed_at)
    await asyncio.to_thread(bench.replicas.start, victim)
    await bench.settled(victim)
    return failover, stall


def _commits_after(bench: _Bench, moment: float) -> bool:
    return all(any(t > moment for t in w.commit_times) for w in bench.writers)


async def _rolling_restart(bench: _Bench, generation: int) -> tuple[float, int, float]:
    started = time.monotonic()
    first = [len(w.attempts) for w in bench.writers]
    for old in sorted(p.name for p in bench.replicas.live()):
        new = f"{old.rstrip('0123456789')}{generation}"
        await asyncio.to_thread(bench.replicas.start, new)
        code = await asyncio.to_thread(bench.replicas.terminate, old)
        if code != 0:
            raise RuntimeError(f"{old} exited {code} on SIGTERM")
    await bench.until(bench.hosted_once, 60, "owned once after the rollout")
    ended = time.monotonic()
    await bench.until(lambda: _commits_after(bench, ended), 60, "writes after the rollout")
    stall = max(_longest_gap(w.commit_times, started, ended) for w in bench.writers)
    attempts = max(
        max(w.attempts[n:], default=1) for w, n in zip(bench.writers, first, strict=True)
    )
    return stall, attempts, ended - started


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest gap between consecutive commits that overlaps [start, end]."""
    before = max((t for t in times if t <= start), default=start)
    inside = [before, *(t for t in times if start < t <= end)]
    after = min((t for t in times if t > end), default=end)
    inside.append(after)
    return max(b - a for a, b in itertools.pairwise(inside))


async def _run(scale: Scale, runs: int) -> Report:
    size = _SIZES[scale]
    report = Report(NAME, TITLE, scale, runs)
    rng = random.Random(19)
    partitions = [f"orders/{n}" for n in range(size.partitions)]
    with tempfile.TemporaryDirectory(prefix="l0gc-bench-failover-") as tmp, LocalEtcd() as etcd:
        replicas = LocalReplicas(
            [etcd.endpoint],
            NAMESPACE,
            partitions,
            Path(tmp),
            lease_ttl_s=size.lease_ttl_s,
            interval_s=size.interval_s,
            drain_timeout_s=2.0,
        )
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=NAMESPACE))
        store = WatermarkStore(kv, NAMESPACE)
        stop = asyncio.Event()
        try:
            await asyncio.gather(*(asyncio.to_thread(replicas.start, n) for n in "abc"))
            async with aiohttp.ClientSession() as session:
                bench = _Bench(replicas, session)
                clock = EpochClock(store, refresh_interval_s=0.5)
                for partition in partitions:
                    record = await store.get_partition(partition)
                    assert record is not None
                    client = OwnerClient(session, replicas.urls, replicas.tokens["writer"], rng=rng)
                    bench.writers.append(
                        ReplicaWriter(partition, client, clock, record.created_epoch, rng=rng)
                    )
                tasks = [asyncio.create_task(w.run(stop, WRITE_EVERY_S)) for w in bench.writers]
                await bench.until(lambda: _commits_after(bench, 0.0), 60, "first writes")
                kills = [await _kill_cycle(bench, rng) for _ in range(size.kills)]
                restarts = [await _rolling_restart(bench, g + 2) for g in range(runs)]
                stop.set()
                await asyncio.gather(*tasks)
        finally:
            stop.set()
            await asyncio.to_thread(replicas.stop_all)
            await kv.close()
    _report(report, size, kills, restarts)
    return report


def _report(
    report: Report,
    size: _Size,
    kills: list[tuple[float, float]],
    restarts: list[tuple[float, int, float]],
) -> None:
    bound = failover_bound_s(size.lease_ttl_s, size.interval_s)
    failovers = [k[0] for k in kills]
    stalls = [k[1] for k in kills]
    report.tables.append(
        Table(
            f"Failover after kill -9 ({len(kills)} kills, 3 replicas, {size.partitions} "
            f"partitions, lease TTL {size.lease_ttl_s} s, interval {size.interval_s:g} s)",
            ("measure", "median s", "max s", "bound s"),
            (
                (
                    "every partition owned again",
                    statistics.median(failovers),
                    max(failovers),
                    bound,
                ),
                (
                    "longest write stall of a partition",
                    statistics.median(stalls),
                    max(stalls),
                    bound,
                ),
            ),
        )
    )
    report.tables.append(
        Table(
            f"Rolling restart of 3 replicas, surge style ({len(restarts)} rollouts)",
            ("rollout", "longest write stall s", "most attempts of a fence", "rollout s"),
            tuple((i + 1, *r) for i, r in enumerate(restarts)),
        )
    )
    worst_attempts = max(r[1] for r in restarts)
    target = f"<= {bound:g} s (TTL + 2 x interval + {ADOPTION_ALLOWANCE_S:g} s)"
    report.goals += [
        Goal(
            "failover: every partition owned again",
            f"max {max(failovers):.2f} s",
            target,
            max(failovers) <= bound,
        ),
        Goal(
            "rolling restart: retries a writer sees",
            f"{worst_attempts - 1} retry at most",
            "<= 1",
            worst_attempts <= 2,
        ),
    ]
    report.notes += [
        (
            "Failover is the time from the SIGKILL to the moment every partition is hosted "
            "by exactly one live replica: the victim's claims last until its etcd lease "
            "expires (TTL, plus up to etcd's 0.5 s expiry check), a survivor sees them gone "
            "at its next round and adopts."
        ),
        (
            "A write stall is the gap between two acknowledged commits of one partition; "
            "writers write every 0.1 s, so 0.1-0.2 s is no stall at all."
        ),
    ]
    report.raw = {"kills": kills, "restarts": restarts}


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Run the failover benchmark (see the module docstring)."""
    return asyncio.run(_run(scale, runs))
