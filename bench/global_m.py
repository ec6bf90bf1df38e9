"""Global M per sweeper round: a full read of every partition record vs following the
namespace with an etcd watch (`watermark.etcd.follow.GcFollower`).

A real etcd (`LocalEtcd`) holds `count` realistic partition records (owned, with a
tracker snapshot; `bench.watermark_path._record`). Each round, 1% of the partitions
publish a higher M(p) (one transaction per 100 records, as publishers batch them),
then the sweeper reads M:

- full: `WatermarkStore.read_gc_view` + `compute_safe_epoch`, as `gcd sweep` and the
  daemon before this change do every round;
- followed: `GcFollower.read()` after its one full read: one etcd progress round trip
  plus the changed records, applied to the index.

Both must give the same M every round (checked). Measured: seconds per round (median)
and the bytes each reads from etcd per round (the values and keys it receives). Then a
cold start at 1M records (FULL scale): one full read of the namespace, its time and the
peak memory Python allocated for it (tracemalloc, in a separate read).
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

from bench.common import Goal, Report, Scale, Table, median
from bench.watermark_path import _etcd, _record, _seed_records
from watermark.core.kv import Put
from watermark.core.safe_epoch import compute_safe_epoch
from watermark.etcd.client import EtcdKV
from watermark.etcd.follow import GcFollower
from watermark.etcd.store import WatermarkStore

NAME = "global_m"
TITLE = "11. Global M per round: full read vs an etcd watch"
NAMESPACE = "/l0gc/bench-global-m"
_SIZES = {  # scale: (records for the per-round figures, records for the cold start)
    Scale.TOY: (2_000, 5_000),
    Scale.QUICK: (100_000, 200_000),
    Scale.FULL: (100_000, 1_000_000),
}
_PUBLISH_SHARE = 0.01
_TXN = 100


def _names(count: int) -> list[str]:
    return [f"topic-{index // 64:05d}/{index % 64}" for index in range(count)]


async def _publish_some(kv: Any, names: list[str], round_no: int) -> int:
    """1% of the partitions publish M(p) + round_no; return the bytes written."""
    step = max(1, int(1 / _PUBLISH_SHARE))
    chosen = names[round_no % step :: step]
    written = 0
    for start in range(0, len(chosen), _TXN):
        puts = []
        for name in chosen[start : start + _TXN]:
            raw = _record(name, 2000 + round_no)
            written += len(raw)
            puts.append(Put(f"{NAMESPACE}/partitions/{name}", raw))
        await kv.txn([], puts)
    return written


async def _rounds(kv: Any, count: int, rounds: int) -> dict[str, Any]:
    names = _names(count)
    await _seed_records(kv, NAMESPACE, count, epoch=5000)
    store = WatermarkStore(kv, NAMESPACE)
    follower = GcFollower(store, verify_every=10**9)
    await follower.read()  # the one full read
    full_s, followed_s, full_bytes, changed_bytes = [], [], [], []
    for round_no in range(1, rounds + 1):
        changed_bytes.append(await _publish_some(kv, names, round_no))
        started = time.perf_counter()
        _, followed = await follower.read()
        followed_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        view = await store.read_gc_view()
        full = compute_safe_epoch(view)
        full_s.append(time.perf_counter() - started)
        full_bytes.append(sum(len(k) + len(v) for k, v in view.partitions.items()))
        if (followed.safe_epoch, followed.blocked_reason) != (full.safe_epoch, full.blocked_reason):
            raise RuntimeError(f"round {round_no}: followed {followed} != full {full}")
    await follower.close()
    return {"full_s": full_s, "followed_s": followed_s, "full_bytes": full_bytes,
            "changed_bytes": changed_bytes, "changes": follower.changes_applied}  # fmt: skip


async def _cold_start(count: int) -> dict[str, float]:
    async with _etcd() as (_, kv):
        seed_started = time.perf_counter()
        await _seed_records(kv, NAMESPACE, count, epoch=5000)
        seed_s = time.perf_counter() - seed_started
        store = WatermarkStore(kv, NAMESPACE)
        started = time.perf_counter()
        safe = compute_safe_epoch(await store.read_gc_view())
        read_s = time.perf_counter() - started
        tracemalloc.start()
        compute_safe_epoch(await store.read_gc_view())
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert safe.defined, safe
    return {"seed_s": seed_s, "read_s": read_s, "peak_mib": peak / 2**20}


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Per-round figures over `max(runs, 5)` rounds, then one cold start."""
    count, cold_count = _SIZES[scale]
    rounds = max(runs, 5)

    async def measure() -> dict[str, Any]:
        async with _etcd() as (_, kv):
            assert isinstance(kv, EtcdKV)
            return await _rounds(kv, count, rounds)

    figures = asyncio.run(measure())
    cold = asyncio.run(_cold_start(cold_count))
    full_s, followed_s = median(figures["full_s"]), median(figures["followed_s"])
    full_b, changed_b = median(figures["full_bytes"]), median(figures["changed_bytes"])
    report = Report(NAME, TITLE, scale, rounds)
    report.tables.append(Table(
        f"{count:,} partition records on a real etcd, {_PUBLISH_SHARE:.0%} publishing per "
        f"round ({rounds} rounds; the same M from both every round)",
        ("read", "ms per round (median)", "MiB read per round", "x full (time)",
         "share of the full read's bytes"),
        (
            ("full read + compute_safe_epoch", full_s * 1e3, full_b / 2**20, 1.0, "100%"),
            ("GcFollower (watch)", followed_s * 1e3, changed_b / 2**20, full_s / followed_s,
             f"{changed_b / full_b:.2%}"),
        ),
    ))  # fmt: skip
    report.tables.append(Table(
        f"Cold start: one full read of {cold_count:,} partition records",
        ("records", "seeding s", "read + M s", "peak Python MiB (tracemalloc)"),
        ((cold_count, cold["seed_s"], cold["read_s"], cold["peak_mib"]),),
    ))  # fmt: skip
    report.goals += [
        Goal(f"followed round at {count:,} records, 1% publishing", f"{followed_s * 1e3:.1f} ms",
             "<= 50 ms", followed_s <= 0.050),
        Goal("bytes of a followed round vs the full read", f"{changed_b / full_b:.2%}", "<= 1%",
             changed_b <= 0.01 * full_b),
        Goal(f"cold start at {cold_count:,} records", f"{cold['read_s']:.1f} s", "<= 15 s",
             cold["read_s"] <= 15),
    ]  # fmt: skip
    report.notes += [
        ("MiB read: keys and values received from etcd (the followed read receives only the "
         "changed records; its progress round trip carries none)."),
        ("A daemon checks the followed view against a full read every --verify-m-every "
         "rounds (default 30): that round costs a full read."),
    ]
    report.raw = {"rounds": figures, "cold_start": cold}
    return report
