"""Delete throughput on two real S3 servers: `gcd sweep` vs s5cmd vs naive vs full listing.

Run on moto and on SeaweedFS, one after the other (`bench.s3sides.REPORT_SERVERS`). Every run
re-seeds the same keys (all garbage: epochs at or below M, spread round-robin over the
1000 prefixes of the default layout) into the server before each side, and runs the
sides in a rotating order, so no side always goes first or last. Each side is a separate
process, timed from spawn to exit (`keys/s wall`); the sweeper's own round duration
(`keys/s in round`, from `--json`) shows how much of its wall time is Python start-up.
See `bench.s3sides` for the sides.

The bucket is all garbage so that every side does the same job (s5cmd and the naive
script cannot tell garbage from live objects); what skipping ahead saves on a bucket
with live objects is measured by `bench.list_cost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from bench.common import Goal, Report, Scale, Table, garbage_keys, median
from bench.s3sides import REPORT_SERVERS, SIDES, SideRun, s3_bench

NAME = "throughput"
TITLE = "1. Delete throughput on two real S3 servers (moto, SeaweedFS)"
_KEYS = {Scale.TOY: 200, Scale.QUICK: 5_000, Scale.FULL: 20_000}


def _rotations(runs: int) -> list[tuple[str, ...]]:
    """The side order of each run: rotated by one every run."""
    return [tuple(SIDES[(r + i) % len(SIDES)] for i in range(len(SIDES))) for r in range(runs)]


def _row(side: str, results: Sequence[SideRun], gcd: Sequence[SideRun]) -> tuple[object, ...]:
    rate = median([r.keys_per_s for r in results])
    gcd_rate = median([r.keys_per_s for r in gcd])
    # Runs i of both sides ran minutes apart at most: their ratio cancels slow drifts
    # of the machine's load, which the ratio of the medians does not.
    paired = median([g.keys_per_s / r.keys_per_s for g, r in zip(gcd, results, strict=True)])
    rounds = [r.keys / r.round_s for r in results if r.round_s]
    busy = median([r.server_cpu_s / r.wall_s for r in results])
    cpu_us = median([r.client_cpu_s / r.keys * 1e6 for r in results])
    server_us = median([r.server_cpu_s / r.keys * 1e6 for r in results])
    lists = results[0].list_requests
    deletes = results[0].delete_requests
    return (
        side,
        rate,
        median(rounds) if rounds else None,
        median([r.wall_s for r in results]),
        cpu_us,
        server_us,
        f"{busy:.0%}",
        "?" if lists is None else lists,
        "?" if deletes is None else deletes,
        gcd_rate / rate,
        paired,
    )


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Run every side `runs` times on identically seeded buckets, on each server (see the
    module docstring)."""
    count = _KEYS[scale]
    keys = garbage_keys(count)
    report = Report(NAME, TITLE, scale, runs)
    for server in REPORT_SERVERS:
        results: dict[str, list[SideRun]] = {side: [] for side in SIDES}
        with s3_bench("bench-throughput", keys, server) as bench:
            seed_s = bench.reseed()
            for order in _rotations(runs):
                for side in order:
                    results[side].append(bench.run_side(side))
        _tabulate(report, server, count, seed_s, results)
        report.raw.setdefault("runs", {})[server] = {
            side: [asdict(r) for r in rs] for side, rs in results.items()
        }
    report.notes += [
        (
            "keys/s wall: deleted keys / seconds from process spawn to exit (what a user "
            "waits for, including Python start-up and the etcd read for gcd)."
        ),
        (
            "server busy: the server's CPU seconds per wall second of the side's run (moto: "
            "this process, one request at a time under the GIL, so near 100% means moto set "
            "the pace; SeaweedFS: the weed process from /proc, up to 200% on 2 cores)."
        ),
        (
            "moto answers each LIST page by scanning the whole bucket, so LIST pages cost "
            "O(bucket) here, unlike S3; DeleteObjects of 1000 keys costs ~70 ms of moto CPU."
        ),
        "client CPU: user+sys CPU of the side's process (rusage of the reaped child).",
        (
            "gcd sweep x: gcd sweep's keys/s divided by the side's (above 1 = gcd is faster); "
            "'paired' is the median of the per-run ratios (run i of each side), which cancels "
            "drifts in the machine's load; the goal uses the ratio of the medians."
        ),
    ]
    return report


def _tabulate(
    report: Report, server: str, count: int, seed_s: float, results: dict[str, list[SideRun]]
) -> None:
    rows = tuple(_row(side, results[side], results["gcd sweep"]) for side in SIDES)
    report.tables.append(
        Table(
            f"{server}: deleting {count:,} garbage keys over 1000 prefixes "
            f"(seeded in {seed_s:.1f} s)",
            (
                "side",
                "keys/s wall (median)",
                "keys/s in round",
                "wall s",
                "client CPU us/key",
                "server CPU us/key",
                "server busy (server CPU / wall)",
                "LIST reqs",
                "DELETE reqs",
                "gcd sweep x (ratio of medians)",
                "gcd sweep x (median of paired runs)",
            ),
            rows,
        )
    )
    by_side = {row[0]: row for row in rows}
    vs_s5 = float(by_side["s5cmd rm"][-2])  # type: ignore[arg-type]
    vs_naive = float(by_side["naive boto3"][-2])  # type: ignore[arg-type]
    paired_s5 = float(by_side["s5cmd rm"][-1])  # type: ignore[arg-type]
    report.goals.append(
        Goal(
            f"{server}: gcd sweep vs s5cmd rm (keys/s, wall)",
            f"{vs_s5:.2f}x (paired {paired_s5:.2f}x)",
            ">= 1.0x",
            vs_s5 >= 1.0,
        )
    )
    report.goals.append(
        Goal(
            f"{server}: gcd sweep vs naive boto3 (keys/s, wall)",
            f"{vs_naive:.1f}x",
            ">= 20x",
            vs_naive >= 20,
        )
    )
