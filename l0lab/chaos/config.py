"""What a chaos run is made of: sizes, timings, the fault kinds, and the broken builds.

The defaults are tuned so that a 60 s run on a loaded 2-core machine injects a fault
every ten seconds or so, each one healed and followed by recovery before the next, and
so that every deliberately broken build (`BROKEN_BUILDS`) fails within such a run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from l0gc.errors import ConfigError

__all__ = [
    "BROKEN_BUILDS",
    "FAULT_GROUPS",
    "ChaosConfig",
    "FaultKind",
    "parse_faults",
]


class FaultKind(enum.Enum):
    """What the nemesis can do (one at a time, each healed before the next)."""

    ETCD_KILL = "etcd-kill"
    """kill -9 a random etcd member, restart it."""
    ETCD_LEADER_KILL = "etcd-leader-kill"
    """kill -9 the etcd member that leads the raft group, restart it."""
    ETCD_FREEZE = "etcd-freeze"
    """SIGSTOP an etcd member (the leader half the time), SIGCONT it."""
    PUBLISHER_KILL = "publisher-kill"
    """kill -9 a `watermark serve`; the restart adopts with the writers' log ends."""
    PUBLISHER_TERM = "publisher-term"
    """SIGTERM a `watermark serve` (a rolling restart: it seals and hands its partitions
    over before it exits), start it again."""
    PUBLISHER_FREEZE = "publisher-freeze"
    """SIGSTOP a `watermark serve`, SIGCONT it."""
    TICKER_LEADER_KILL = "ticker-leader-kill"
    """kill -9 the publisher holding the epoch ticker's lease, mid-lease; restart it."""
    FAILOVER = "failover"
    """Move a partition to the other publisher; the old owner is never told (a stale
    owner that keeps running, whose publishes must be refused); the partition's
    reconciler resumes only at the heal. Not with replicated publishers, whose leases
    move partitions (the kills, SIGTERMs and freezes do it there)."""
    SWEEPER_KILL = "sweeper-kill"
    """kill -9 a `gcd daemon`, restart it (blocked until its old shard lease expires)."""
    SWEEPER_FREEZE = "sweeper-freeze"
    """SIGSTOP a `gcd daemon`, SIGCONT it."""
    WRITER_KILL = "writer-kill"
    """kill -9 a writer process (HTTP writers, or the embedded publisher and its writers)."""
    WRITER_FREEZE = "writer-freeze"
    """SIGSTOP a writer process, SIGCONT it."""
    S3_STORM = "s3-storm"
    """The S3 proxy answers a share of requests 503 SlowDown / 500 InternalError."""
    S3_LATENCY = "s3-latency"
    """The S3 proxy delays every request."""
    S3_DROP = "s3-drop"
    """The S3 proxy resets a share of connections without an answer."""
    RECONCILER_STALL = "reconciler-stall"
    """One partition's reconciler lifts nothing (it pins M until it catches up)."""
    PUBLISHER_DUP_START = "publisher-dup-start"
    """Start a second `watermark serve` with a running publisher's partitions and port (in
    use): it must exit 2 and change no partition record (`l0lab.chaos.intruders`)."""
    FORGED_MEMBER = "forged-member"
    """Announce a replica member outside the fleet (127.0.0.2) with claims on two
    partitions: no writer may be redirected to it. Only with replicated publishers."""


FAULT_GROUPS: Final[dict[str, frozenset[FaultKind]]] = {
    "all": frozenset(FaultKind),
    "etcd": frozenset({FaultKind.ETCD_KILL, FaultKind.ETCD_LEADER_KILL, FaultKind.ETCD_FREEZE}),
    "publisher": frozenset(
        {
            FaultKind.PUBLISHER_KILL,
            FaultKind.PUBLISHER_TERM,
            FaultKind.PUBLISHER_FREEZE,
            FaultKind.TICKER_LEADER_KILL,
            FaultKind.FAILOVER,
            FaultKind.PUBLISHER_DUP_START,
            FaultKind.FORGED_MEMBER,
        }
    ),
    "sweeper": frozenset({FaultKind.SWEEPER_KILL, FaultKind.SWEEPER_FREEZE}),
    "writer": frozenset({FaultKind.WRITER_KILL, FaultKind.WRITER_FREEZE}),
    "s3": frozenset({FaultKind.S3_STORM, FaultKind.S3_LATENCY, FaultKind.S3_DROP}),
    "none": frozenset(),
}

BROKEN_BUILDS: Final[dict[str, str]] = {
    "no-drain-slide": "the publishers' fence slides its window without waiting for the "
    "writes in flight at the old epochs (l0lab.sim.variants.NoDrainGuard)",
    "owner-blind-publisher": "the publishers' publishes ignore owner fencing, so a stale "
    "owner overwrites M(p) (l0lab.sim.variants.OwnerBlindStore)",
}
"""Deliberately broken `watermark serve` builds that `gcd chaos` must catch."""


def parse_faults(text: str, *, replicated: bool = False) -> frozenset[FaultKind]:
    """`--faults`: comma-separated kinds and groups (all, etcd, publisher, sweeper, ...);
    with `replicated` publishers a group leaves out `failover` (see FaultKind.FAILOVER),
    without them `forged-member`."""
    chosen: set[FaultKind] = set()
    by_value = {kind.value: kind for kind in FaultKind}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part in FAULT_GROUPS:
            chosen |= FAULT_GROUPS[part] - (
                {FaultKind.FAILOVER} if replicated else {FaultKind.FORGED_MEMBER}
            )
        elif part in by_value:
            chosen.add(by_value[part])
        else:
            names = ", ".join([*FAULT_GROUPS, *by_value])
            raise ConfigError(f"--faults: unknown fault {part!r}; choose from {names}")
    return frozenset(chosen)


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """One chaos run."""

    duration_s: float = 60.0
    seed: int = 0
    faults: frozenset[FaultKind] = field(default_factory=lambda: parse_faults("all"))
    broken_build: str | None = None
    run_dir: Path | None = None
    keep_run_dir: bool = False
    stop_at_first_loss: bool = True
    """End the faulty phase at the first live object lost (the checker still runs)."""
    partitions_per_publisher: int = 3
    publisher_replicas: int = 0
    """0: two `watermark serve` publishers on disjoint partitions, moved by the harness
    (a controller); N >= 2: one `serve --replicated` set of N replicas sharing those
    partitions through etcd leases, and writers that follow 307s to the owner."""
    embedded_partitions: int = 2
    write_rate: float = 16.0
    """Objects per second over all partitions."""
    epoch_interval_s: float = 1.0
    reconcile_lag_s: float = 1.5
    grace_s: float = 1.0
    shard_ttl_s: int = 3
    ticker_lease_ttl_s: int = 3
    member_lease_ttl_s: int = 3
    """Replicated publishers: a dead replica's partitions move after this long."""
    hold_ttl_s: float = 5.0
    slow_commit_share: float = 0.08
    """Share of writes that hold their fence 1-2.5 s before committing (a slow log append)."""
    recovery_bound_s: float = 30.0
    """Every fault must be followed by recovery (M advances, every partition commits a
    write, every sweeper runs an unblocked round) within this long after it is healed."""
    fault_s: tuple[float, float] = (2.0, 5.0)
    gap_s: tuple[float, float] = (2.0, 4.0)

    def __post_init__(self) -> None:
        checks = (
            (self.duration_s >= 10, f"--duration {self.duration_s!r} must be at least 10 s"),
            (
                self.broken_build is None or self.broken_build in BROKEN_BUILDS,
                f"--broken-build {self.broken_build!r}: choose from {', '.join(BROKEN_BUILDS)}",
            ),
            (
                self.partitions_per_publisher >= 1 and self.embedded_partitions >= 1,
                "each publisher needs at least one partition",
            ),
            (self.write_rate > 0, "--write-rate must be > 0"),
            (
                self.publisher_replicas == 0 or 2 <= self.publisher_replicas <= 5,
                (
                    f"--publisher-replicas {self.publisher_replicas}: 0 (two publishers on "
                    "disjoint partitions) or 2-5 replicas"
                ),
            ),
            (
                not (self.replicated and FaultKind.FAILOVER in self.faults),
                (
                    "--faults failover moves partitions the way a controller does, which a "
                    "replicated set does by itself: drop it, or run without --publisher-replicas"
                ),
            ),
            (
                self.replicated or FaultKind.FORGED_MEMBER not in self.faults,
                "--faults forged-member needs replicated publishers (--publisher-replicas N)",
            ),
        )
        for ok, problem in checks:
            if not ok:
                raise ConfigError(problem)

    @property
    def replicated(self) -> bool:
        """Whether the publishers are one replicated set."""
        return self.publisher_replicas > 0

    @property
    def publisher_names(self) -> tuple[str, ...]:
        """The `watermark serve` processes (two, or the replicas)."""
        count = self.publisher_replicas or 2
        return tuple(f"serve-{chr(ord('a') + n)}" for n in range(count))

    def serve_partitions(self, index: int) -> list[str]:
        """The partitions of the first (index 0) or second half of the served ones; without
        replicas, publisher `index` owns them at the start."""
        per = self.partitions_per_publisher
        return [f"orders/{index * per + n}" for n in range(per)]

    @property
    def embedded_names(self) -> list[str]:
        """The partitions of the embedded publisher (in the embedded writer process)."""
        first = 2 * self.partitions_per_publisher
        return [f"orders/{first + n}" for n in range(self.embedded_partitions)]

    @property
    def all_partitions(self) -> list[str]:
        """Every partition of the run."""
        return [*self.serve_partitions(0), *self.serve_partitions(1), *self.embedded_names]
