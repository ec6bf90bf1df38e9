"""Skip-ahead vs a full listing on the real S3 servers: 100 live objects per garbage one.

The LIST counts of section 3 come from a synthetic store; this one runs the real `gcd
sweep` processes against moto and SeaweedFS (`bench.s3sides`) on a bucket whose every
prefix holds a little garbage (epochs at or below M) and 100 times as many live objects
above it, and measures what skipping ahead saves in wall time, LIST requests and server
CPU. Both sides must delete exactly the garbage and keep every live object (checked).
"""

from __future__ import annotations

from dataclasses import asdict

from bench.common import Goal, Report, Scale, Table, median
from bench.s3sides import REPORT_SERVERS, SideRun, s3_bench
from gcd.rules.layout import KeyLayout

NAME = "skip_ahead"
TITLE = "14. Skip-ahead vs full listing on moto and SeaweedFS, 100 live : 1 garbage"
_SIZES = {  # scale: (prefixes, garbage per prefix); live = 100 x garbage
    Scale.TOY: (4, 2),
    Scale.QUICK: (5, 10),
    Scale.FULL: (5, 40),  # 4,000 live per prefix: several LIST pages each, as in S3 buckets
}
_SIDES = ("gcd sweep", "gcd sweep, full listing")


def _keys(prefixes: int, garbage: int) -> tuple[list[str], list[str]]:
    layout = KeyLayout.default("level_zero/data")
    dead = [
        layout.format(p * 7, e, f"g{e}") for p in range(prefixes) for e in range(1, garbage + 1)
    ]
    first_live = prefixes * garbage + 10  # above M (= garbage count + 1, see S3Bench)
    live = [
        layout.format(p * 7, first_live + i, "live")
        for p in range(prefixes)
        for i in range(100 * garbage)
    ]
    return dead, live


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Both sides `runs` times on each server, alternating."""
    prefixes, garbage = _SIZES[scale]
    dead, live = _keys(prefixes, garbage)
    report = Report(NAME, TITLE, scale, runs)
    rows = []
    for server in REPORT_SERVERS:
        results: dict[str, list[SideRun]] = {side: [] for side in _SIDES}
        with s3_bench("bench-skip", dead, server, live) as bench:
            bench.reseed()
            for r in range(runs):
                for side in _SIDES if r % 2 == 0 else _SIDES[::-1]:
                    results[side].append(bench.run_side(side))
        skip = results["gcd sweep"]
        for side in _SIDES:
            done = results[side]
            rows.append(
                (
                    server,
                    side,
                    median([x.round_s or 0.0 for x in done]),
                    median([x.wall_s for x in done]),
                    done[0].list_requests,
                    median([x.server_cpu_s for x in done]),
                    median([x.client_cpu_s for x in done]),
                    median(
                        [
                            (x.round_s or 0.0) / (s.round_s or 1.0)
                            for x, s in zip(done, skip, strict=True)
                        ]
                    ),
                )
            )
        report.raw.setdefault("runs", {})[server] = {
            side: [asdict(x) for x in rs] for side, rs in results.items()
        }
    report.tables.append(
        Table(
            f"{len(dead):,} garbage and {len(live):,} live keys over {prefixes} prefixes",
            (
                "server",
                "side",
                "round s (median)",
                "wall s",
                "LIST reqs",
                "server CPU s",
                "client CPU s",
                "full / skip (round, paired)",
            ),
            tuple(rows),
        )
    )
    for server in REPORT_SERVERS:
        _, full_row = (r for r in rows if r[0] == server)
        ratio = float(full_row[-1])
        report.goals.append(
            Goal(
                f"{server}: full listing round / skip-ahead round",
                f"{ratio:.2f}x",
                "> 1 (skipping saves time)",
                ratio > 1.0,
            )
        )
    report.notes.append(
        "round s: the sweeper's own round (from --json); wall s adds Python start-up and "
        "the etcd read. Every side deletes exactly the garbage (checked)."
    )
    return report
