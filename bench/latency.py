"""Latency tolerance: delete throughput when every request takes 20 ms longer.

Two set-ups, each measured with no added delay and with 20 ms per request:

A. The real thing: `gcd sweep` (and `s5cmd rm` and obstore beside it) through
   `l0lab.testing.faultproxy`
   (in a process of its own) in front of each real S3 server (moto, then SeaweedFS),
   on identically re-seeded buckets. The nominal bound is concurrency x batch /
   latency = 8 x 1000 / 20 ms = 400,000 keys/s, which neither server can approach on
   2 cores (moto serves one request at a time; SeaweedFS spends ~0.25 ms of CPU per
   deleted key). So the *real* bound is min(nominal bound, what the same client
   achieves through the same proxy with no delay), i.e. latency can only cost what
   pipelining fails to hide. The figure compared is keys/s within the round (`--json`
   duration_s), so Python start-up, which no delay changes, is left out; against the
   peers, which have no round summary, wall keys/s are compared (start-up in).
B. The sweeper alone: one in-process round over `bench.synthetic.SyntheticStore`
   (no server at all) whose every LIST and DeleteObjects request sleeps 20 ms. Here
   the bounds are the pipeline's own: deletes 8 x 1000 / 20 ms = 400k keys/s, listing
   4 listers x 1000 keys / 20 ms = 200k keys/s, and the sweeper's own speed with no
   delay (measured in the same runs; its CPU bound, keys per CPU second, is shown too).
   The real bound is the smallest of the three.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from dataclasses import asdict

import structlog

from bench.common import Goal, Report, Scale, Table, garbage_keys, median
from bench.s3sides import REPORT_SERVERS, ProxyChild, SideRun, s3_bench
from bench.synthetic import BucketShape, SyntheticStore
from gcd.sweep.sweeper import RoundConfig, Sweeper

NAME = "latency"
TITLE = "2. Latency tolerance: 20 ms added to every request"
DELAY_S = 0.020
CONCURRENCY = 8
BATCH = 1000
LISTERS = 4
PAGE = 1000
_SIZES = {  # scale: (keys on each S3 server, keys in the synthetic store)
    Scale.TOY: (200, 10_000),
    Scale.QUICK: (5_000, 100_000),
    Scale.FULL: (20_000, 400_000),
}
_SIDES = ("gcd sweep", "s5cmd rm", "obstore")


def _round_rate(run: SideRun) -> float:
    return run.keys / run.round_s if run.round_s else run.keys_per_s


def _server_part(server: str, count: int, runs: int, report: Report) -> None:
    keys = garbage_keys(count)
    results: dict[tuple[str, float], list[SideRun]] = {}
    label = {"moto": "moto", "seaweedfs": "SeaweedFS"}[server]
    with s3_bench("bench-latency", keys, server) as bench:
        proxies = {
            0.0: ProxyChild(bench.s3.endpoint_url, 0.0),
            DELAY_S: ProxyChild(bench.s3.endpoint_url, DELAY_S),
        }
        try:
            for index in range(runs):
                delays = (0.0, DELAY_S) if index % 2 == 0 else (DELAY_S, 0.0)
                for delay in delays:
                    for side in _SIDES:
                        proxy = proxies[delay]
                        results.setdefault((side, delay), []).append(
                            bench.run_side(side, proxy.endpoint_url, CONCURRENCY)
                        )
        finally:
            for proxy in proxies.values():
                proxy.close()
    nominal = CONCURRENCY * BATCH / DELAY_S
    rows = []
    for side in _SIDES:
        base = median([_round_rate(r) for r in results[(side, 0.0)]])
        slow = median([_round_rate(r) for r in results[(side, DELAY_S)]])
        base_wall = median([r.keys_per_s for r in results[(side, 0.0)]])
        slow_wall = median([r.keys_per_s for r in results[(side, DELAY_S)]])
        real = min(nominal, base)
        # The server's own capacity: the job's keys per CPU second it spent serving it.
        capacity = median([r.keys / r.server_cpu_s for r in results[(side, 0.0)]])
        rows.append(
            (
                side,
                base,
                slow,
                slow / nominal,
                real,
                slow / real,
                capacity,
                slow / capacity,
                base_wall,
                slow_wall,
            )
        )
        if side == "gcd sweep":
            report.goals.append(
                Goal(
                    f"{label} via proxy: gcd sweep keys/s at +20 ms vs the real bound "
                    "(its own no-delay rate through the proxy)",
                    f"{slow / real:.0%} ({slow:,.0f} of {real:,.0f} keys/s)",
                    ">= 80%",
                    slow / real >= 0.8,
                )
            )
            report.goals.append(
                Goal(
                    f"{label} via proxy: vs the nominal bound 8 x 1000 / 20 ms",
                    f"{slow / nominal:.1%}",
                    f">= 80% (unreachable on {label})",
                    slow / nominal >= 0.8,
                )
            )
    walls = {row[0]: row[9] for row in rows}  # wall keys/s at +20 ms, start-up included
    for peer, goal in (("s5cmd rm", 1.5), ("obstore", 1.0)):
        ratio = walls["gcd sweep"] / walls[peer]
        report.goals.append(
            Goal(
                f"{label} via proxy, +20 ms: gcd sweep vs {peer} (wall keys/s, start-up in)",
                f"{ratio:.2f}x ({walls['gcd sweep']:,.0f} vs {walls[peer]:,.0f} keys/s)",
                f">= {goal}x",
                ratio >= goal,
            )
        )
    report.tables.append(
        Table(
            f"A. {count:,} garbage keys on {label} through the fault proxy (s5cmd and "
            "obstore have no round summary: their keys/s are wall, start-up included)",
            (
                "side",
                "keys/s, no delay",
                "keys/s, +20 ms",
                "of nominal 400k",
                "real bound (own no-delay rate)",
                "of real bound",
                "server capacity (keys / server CPU s)",
                "of server capacity",
                "wall keys/s, no delay",
                "wall keys/s, +20 ms",
            ),
            tuple(rows),
        )
    )
    report.raw[server] = {
        f"{side}@{delay}": [asdict(r) for r in rs] for (side, delay), rs in results.items()
    }


async def _synthetic_round(count: int, delay_s: float) -> tuple[float, float]:
    """(keys/s, CPU seconds) of one in-process round over a delayed synthetic store."""
    shape = BucketShape.spread(1000, count // 1000, 0)
    store = SyntheticStore(shape, delay_s=delay_s)
    config = RoundConfig(
        concurrency=CONCURRENCY, batch_size=BATCH, list_concurrency=LISTERS, page_size=PAGE
    )
    sweeper = Sweeper(store, config)
    started, cpu = time.perf_counter(), time.process_time()
    result = await sweeper.sweep(shape.safe_epoch, None)
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    assert result.summary.deleted == shape.total_garbage == store.deleted, result.summary
    return shape.total_garbage / elapsed, used


def _synthetic_part(count: int, runs: int, report: Report) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    base, slow, cpu = [], [], []
    for _ in range(runs):
        rate, used = asyncio.run(_synthetic_round(count, 0.0))
        base.append(rate)
        cpu.append(used)
        slow.append(asyncio.run(_synthetic_round(count, DELAY_S))[0])
    cpu_bound = count / median(cpu)
    delete_bound = CONCURRENCY * BATCH / DELAY_S
    list_bound = LISTERS * PAGE / DELAY_S
    # On a shared machine the no-delay wall rate is below the CPU bound (the process is
    # not always scheduled); that rate, measured in the same runs, is what latency can cost.
    real = min(median(base), delete_bound, list_bound)
    achieved = median(slow)
    report.tables.append(
        Table(
            f"B. Sweeper alone: {count:,} garbage keys in a synthetic store, every request "
            "+20 ms (in-process, no server)",
            ("figure", "keys/s"),
            (
                ("achieved, no delay (wall)", median(base)),
                ("CPU bound: keys / CPU seconds of the no-delay round", cpu_bound),
                ("delete bound: 8 x 1000 / 20 ms", delete_bound),
                ("list bound: 4 listers x 1000 / 20 ms", list_bound),
                ("achieved, +20 ms", achieved),
                ("real bound: min(no-delay rate, delete bound, list bound)", real),
                ("achieved / real bound", f"{achieved / real:.0%}"),
                ("achieved / CPU bound (for reference)", f"{achieved / cpu_bound:.0%}"),
            ),
        )
    )
    report.goals.append(
        Goal(
            "sweeper alone: keys/s at +20 ms vs min(no-delay rate, list, delete bound)",
            f"{achieved / real:.0%}",
            ">= 80%",
            achieved / real >= 0.8,
        )
    )
    report.raw["synthetic"] = {"base": base, "slow": slow, "cpu_s": cpu}


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Run both set-ups (see the module docstring)."""
    server_keys, synthetic_keys = _SIZES[scale]
    report = Report(NAME, TITLE, scale, runs)
    for server in REPORT_SERVERS:
        _server_part(server, server_keys, runs, report)
    # Part A's moto server ran in this process and its state outlives it (over a million
    # objects: FakeKeys, ACLs, buffers). A full garbage collection over them takes ~0.5 s
    # and lands in some part-B rounds and not others, which made part B bimodal (see
    # bench/RESULTS.md, 2B). Part B measures the sweeper alone: exclude them while it runs.
    gc.collect()
    gc.freeze()
    try:
        _synthetic_part(synthetic_keys, runs, report)
    finally:
        gc.unfreeze()
    report.notes += [
        (
            "The delay is added by the proxy (or the synthetic store) with asyncio.sleep, so "
            "concurrent requests are delayed concurrently, as a distant region would."
        ),
        (
            "The synthetic store has 1000 prefixes; the sweeper's 4 listers each page through "
            "its share of listing prefixes, one LIST ahead, which is the list bound. The 4 "
            "listers share 10 equal listing prefixes (3 waves of 40 pages), so the listing "
            "ceiling at +20 ms is 400k keys / (3 x 40 x 20 ms) = 167k keys/s, not 200k."
        ),
        (
            "Part B runs with part A's leftover objects frozen out of garbage collection "
            "(gc.freeze), as in a process that never ran moto."
        ),
    ]
    return report
