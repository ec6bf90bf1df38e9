"""Global M per sweeper round: a full read of every partition record vs following the
namespace with an etcd watch (`l0gc.etcd.follow.GcFollower`).

A real etcd (`LocalEtcd`) holds `count` realistic partition records (owned, with a
tracker snapshot; `bench.watermark_path._record`). Each round, 1% of the partitions
publish a higher M(p) (one transaction per 100 records, as publishers batch them),
then the sweeper reads M:

- full: `WatermarkStore.read_gc_view` + `compute_safe_epoch`, as `gcd sweep` and the
  daemon before this change do every round;
- followed: `GcFollower.read()` after its one full read: one etcd progress round trip
  plus the changed records, applied to the index.

Both must give the same M every round (checked). Measured: seconds per round (median)
and the bytes each reads from etcd per round: the keys and values it receives (for the
follower, those of the watch events it got, counted where it receives them, not what
the publishers wrote). The follower verifies as the daemon does (`--verify-m-every`,
default 30: every 30th read is also a full read), so its figure is the amortised cost
``(29 incremental + 1 verified) / 30``, each part measured. Then a cold start at 1M
records (FULL scale), in a child process of its own so its memory is its own: one full
read of the namespace, its time, the process's peak RSS (VmHWM) and, in a second child,
the peak memory Python allocated for the read (tracemalloc); for a daemon's first read
(`GcFollower`, page by page into its index: the goal) and for `read_gc_view` +
`compute_safe_epoch`, which holds every record (`gcd sweep`, once per run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import tracemalloc
from typing import Any

from bench.common import (
    PYTHON,
    Goal,
    Report,
    Scale,
    Table,
    child_env,
    median,
    proc_status_kib,
    run_child,
)
from bench.watermark_path import _etcd, _record, _seed_records
from l0gc.contract.kv import Change, Put, RangeResult
from l0gc.contract.safe_epoch import compute_safe_epoch
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.follow import DEFAULT_VERIFY_EVERY, FULL_CHECK_EVERY, GcFollower, read_once
from l0gc.etcd.store import WatermarkStore

NAME = "global_m"
TITLE = "13. Global M per round: full read vs an etcd watch"
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


class _CountedWatch:
    """A watch that counts the bytes (keys and values) of the events it delivers."""

    def __init__(self, inner: Any, counter: list[int]) -> None:
        self._inner, self._counter = inner, counter

    async def sync(self) -> tuple[list[Change], int]:
        changes, revision = await self._inner.sync()
        self._counter[0] += sum(len(c.key) + len(c.value or b"") for c in changes)
        return changes, revision

    @property
    def answered(self) -> int:
        return int(self._inner.answered)

    async def close(self) -> None:
        await self._inner.close()


class _CountingKV:
    """An EtcdKV whose watches count what they receive (everything else passes through)."""

    def __init__(self, inner: EtcdKV) -> None:
        self._inner = inner
        self.received = [0]
        self.checked = [0]
        """Bytes of the reads a check makes (keys, revisions, the small keys' values)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def count(self, prefix: str, *, revision: int) -> int:
        self.checked[0] += 8  # one integer
        return await self._inner.count(prefix, revision=revision)

    async def changed_keys(self, prefix: str, *, revision: int, after: int) -> dict[str, int]:
        found = await self._inner.changed_keys(prefix, revision=revision, after=after)
        self.checked[0] += sum(len(key) + 8 for key in found)  # a key and its revision
        return found

    async def range_prefix(self, prefix: str, *, revision: int = 0) -> RangeResult:
        result = await self._inner.range_prefix(prefix, revision=revision)
        self.checked[0] += sum(len(item.key) + len(item.value) for item in result.items)
        return result

    async def watch_prefix(self, prefix: str, start_revision: int) -> _CountedWatch:
        return _CountedWatch(await self._inner.watch_prefix(prefix, start_revision), self.received)


async def _rounds(kv: Any, count: int, rounds: int) -> dict[str, Any]:
    names = _names(count)
    await _seed_records(kv, NAMESPACE, count, epoch=5000)
    store = WatermarkStore(kv, NAMESPACE)
    counting = _CountingKV(kv)
    counted = WatermarkStore(counting, NAMESPACE)
    follower = GcFollower(counted, verify_every=DEFAULT_VERIFY_EVERY)
    checking = _CountingKV(kv)
    # every read checked: the check's cost (the daemon's every 30th read covers 30 rounds
    # of changes, so its keys-only answer is ~30x one round's: per round, the same)
    verifier = GcFollower(WatermarkStore(checking, NAMESPACE), verify_every=1)
    await follower.read()  # the one full read
    await verifier.read()
    full_s, followed_s, verified_s, full_bytes, changed_bytes, written = [], [], [], [], [], []
    check_bytes = []
    kinds = []
    for round_no in range(1, rounds + 1):
        written.append(await _publish_some(kv, names, round_no))
        before = counting.received[0]
        started = time.perf_counter()
        _, followed = await follower.read()
        followed_s.append(time.perf_counter() - started)
        changed_bytes.append(counting.received[0] - before)
        kinds.append(follower.last_kind)
        started = time.perf_counter()
        before = checking.checked[0]
        _, verified = await verifier.read()
        verified_s.append(time.perf_counter() - started)
        check_bytes.append(checking.checked[0] - before)
        checked = verifier.last_kind in ("checked", "verified")
        if not checked or verified.safe_epoch != followed.safe_epoch:
            raise RuntimeError(f"round {round_no}: verified read {verifier.last_kind} {verified}")
        started = time.perf_counter()
        view = await store.read_gc_view()
        full = compute_safe_epoch(view)
        full_s.append(time.perf_counter() - started)
        full_bytes.append(sum(len(k) + len(v) for k, v in view.partitions.items()))
        if (followed.safe_epoch, followed.blocked_reason) != (full.safe_epoch, full.blocked_reason):
            raise RuntimeError(f"round {round_no}: followed {followed} != full {full}")
    await follower.close()
    await verifier.close()
    return {
        "full_s": full_s,
        "followed_s": followed_s,
        "verified_s": verified_s,
        "full_bytes": full_bytes,
        "changed_bytes": changed_bytes,
        "written_bytes": written,
        "kinds": kinds,
        "changes": follower.changes_applied,
        "check_bytes": check_bytes,
    }


def _vm_hwm_mib() -> float:
    """This process's peak resident set size (VmHWM), MiB."""
    kib = proc_status_kib("VmHWM")
    if kib is None:
        raise RuntimeError("no VmHWM in /proc/self/status")
    return kib / 1024


async def _read_once(endpoint: str, path: str, traced: bool) -> dict[str, float]:
    """In a child: one full read of the namespace at `endpoint` (+ M), timed. `path`
    "follower" is a daemon's cold start (`GcFollower`'s first read: page by page into
    its index); "sweep" is `gcd sweep`'s read (`read_once`: the same, without a watch);
    "view" is `read_gc_view` + `compute_safe_epoch` (`gcd status`, records held whole)."""
    kv = EtcdKV([endpoint], timeout_s=60.0)
    follower = None
    try:
        await kv.connect()
        store = WatermarkStore(kv, NAMESPACE)
        before = _vm_hwm_mib()
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        if path == "follower":
            follower = GcFollower(store)
            _, safe = await follower.read()
        elif path == "sweep":
            _, safe = await read_once(store)
        else:
            safe = compute_safe_epoch(await store.read_gc_view())
        read_s = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] if traced else 0
        tracemalloc.stop()
        assert safe.defined, safe
    finally:
        if follower is not None:
            await follower.close()
        await kv.close()
    return {
        "read_s": read_s,
        "hwm_mib": _vm_hwm_mib(),
        "hwm_before_mib": before,
        "traced_mib": peak / 2**20,
    }


def _child_read(endpoint: str, path: str, traced: bool) -> dict[str, float]:
    argv = [PYTHON, "-m", "bench.global_m", "--cold-read", endpoint, "--path", path]
    result = run_child(argv + (["--traced"] if traced else []), env=child_env(), timeout_s=600)
    if result.returncode != 0:
        raise RuntimeError(f"cold-start child exited {result.returncode}: {result.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


_COLD_PATHS = ("follower", "sweep", "view")


async def _cold_start(count: int) -> dict[str, Any]:
    async with _etcd() as (server, kv):
        seed_started = time.perf_counter()
        await _seed_records(kv, NAMESPACE, count, epoch=5000)
        seed_s = time.perf_counter() - seed_started
        figures: dict[str, Any] = {"seed_s": seed_s}
        for path in _COLD_PATHS:
            plain = await asyncio.to_thread(_child_read, server.endpoint, path, False)
            traced = await asyncio.to_thread(_child_read, server.endpoint, path, True)
            figures[path] = {
                "read_s": plain["read_s"],
                "rss_hwm_mib": plain["hwm_mib"],
                "rss_before_mib": plain["hwm_before_mib"],
                "peak_mib": traced["traced_mib"],
            }
    return figures


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
    full_s, incremental_s = median(figures["full_s"]), median(figures["followed_s"])
    checked_s = median(figures["verified_s"])
    every, full_every = DEFAULT_VERIFY_EVERY, FULL_CHECK_EVERY
    # per followed round, amortised as the daemon pays: a check every `every` reads, of
    # which one in `full_every` reads the namespace in full
    followed_s = ((every - 1) * incremental_s + checked_s + full_s / full_every) / every
    full_b, incremental_b = median(figures["full_bytes"]), median(figures["changed_bytes"])
    check_b = median(figures["check_bytes"])  # one round's changes, keys only
    verify_b = check_b + full_b / (every * full_every)  # the checks' bytes per round
    changed_b = incremental_b + verify_b
    report = Report(NAME, TITLE, scale, rounds)
    report.tables.append(
        Table(
            f"{count:,} partition records on a real etcd, {_PUBLISH_SHARE:.0%} publishing per "
            f"round ({rounds} rounds; the same M from both every round)",
            (
                "read",
                "ms per round (median)",
                "MiB received per round",
                "x full (time)",
                "share of the full read's bytes",
            ),
            (
                ("full read + compute_safe_epoch", full_s * 1e3, full_b / 2**20, 1.0, "100%"),
                (
                    "GcFollower, incremental read",
                    incremental_s * 1e3,
                    incremental_b / 2**20,
                    full_s / incremental_s,
                    f"{incremental_b / full_b:.2%}",
                ),
                (
                    "GcFollower, check (keys and revisions; per round of changes)",
                    checked_s * 1e3,
                    check_b / 2**20,
                    full_s / checked_s,
                    f"{check_b / full_b:.2%}",
                ),
                (
                    (
                        f"GcFollower, amortised (a check every {every} reads,"
                        f" 1 in {full_every} in full)"
                    ),
                    followed_s * 1e3,
                    changed_b / 2**20,
                    full_s / followed_s,
                    f"{changed_b / full_b:.2%}",
                ),
            ),
        )
    )
    labels = {
        "follower": "daemon: GcFollower's first read (page by page into its index)",
        "sweep": "gcd sweep: read_once (the same, no watch)",
        "view": "gcd status: read_gc_view + compute_safe_epoch (records held whole)",
    }
    report.tables.append(
        Table(
            f"Cold start: one full read of {cold_count:,} partition records (seeded in "
            f"{cold['seed_s']:.1f} s; each path in a child process of its own)",
            (
                "path",
                "read + M s",
                "peak RSS MiB (VmHWM)",
                "RSS MiB before the read",
                "peak Python MiB (tracemalloc, other child)",
            ),
            tuple(
                (
                    labels[path],
                    cold[path]["read_s"],
                    cold[path]["rss_hwm_mib"],
                    cold[path]["rss_before_mib"],
                    cold[path]["peak_mib"],
                )
                for path in _COLD_PATHS
            ),
        )
    )
    daemon = cold["follower"]
    report.goals += [
        Goal(
            f"followed round at {count:,} records, 1% publishing, amortised with the verification",
            f"{followed_s * 1e3:.1f} ms",
            "<= 50 ms",
            followed_s <= 0.050,
        ),
        Goal(
            "bytes the checks of the index read per followed round (amortised) vs the full read",
            f"{verify_b / full_b:.2%}",
            "<= 1%",
            verify_b <= 0.01 * full_b,
        ),
        Goal(
            f"daemon cold start at {cold_count:,} records",
            f"{daemon['read_s']:.1f} s",
            "<= 15 s",
            daemon["read_s"] <= 15,
        ),
        Goal(
            f"daemon cold start peak RSS at {cold_count:,} records",
            f"{daemon['rss_hwm_mib']:.0f} MiB",
            "<= 500 MiB",
            daemon["rss_hwm_mib"] <= 500,
        ),
    ]
    report.notes += [
        (
            "MiB received: keys and values received from etcd; for the follower, those of the "
            "watch events it received (publishers wrote "
            f"{median(figures['written_bytes']) / 2**20:.3f} MiB of values per round)."
        ),
        (
            "A daemon checks the followed view every --verify-m-every rounds (default 30): by "
            "keys and mod revisions (a count of the records, the keys changed since the last "
            f"check, the small keys), and every {FULL_CHECK_EVERY}th check against a full "
            "read; the amortised row is the cost per round it pays, the changes included."
        ),
    ]
    report.raw = {"rounds": figures, "cold_start": cold}
    return report


def _main() -> int:
    """`--cold-read ENDPOINT [--traced]`: the cold-start child (see `_read_once`)."""
    parser = argparse.ArgumentParser(description="bench.global_m cold-start child")
    parser.add_argument("--cold-read", required=True, metavar="ENDPOINT")
    parser.add_argument("--path", choices=_COLD_PATHS, default="follower")
    parser.add_argument("--traced", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(_read_once(args.cold_read, args.path, args.traced))
    sys.stdout.write(json.dumps(figures) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
