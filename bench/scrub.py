"""`gcd scrub`: requests per referenced key, and what a run costs (issue 54).

A namespace on a real etcd whose partitions hold references (each partition one entry
naming `keys` keys, one key in ten shared with the next partition: a batch object that
two partitions' entries name), the referenced objects in a real S3 bucket (moto,
loopback) with garbage beside them: `garbage` keys at or below M. The real `Scrubber`
runs against both, unpaced (`--max-requests-per-second` high) to count and time it, the
referenced keys all present (the healthy case) and then with 1 % of them deleted behind
l0gc's back (each missing key is then searched in the journal, which is empty here).
Requests are the scrubber's own counts (`head_requests`, `list_requests`), the same the
`l0gc_scrub_*` metrics export. At the default pace (50 requests/s) a run takes at least
requests / 50 seconds; that figure is computed, not waited for.
"""

from __future__ import annotations

import asyncio
import time

from bench.common import Goal, Report, Scale, Table, median
from gcd.rules.layout import KeyLayout
from gcd.scrub.run import Scrubber, ScrubSettings
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.namespace import Publication
from l0gc.contract.references import References
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3

NAME = "scrub"
TITLE = "39. gcd scrub: requests per referenced key, and a run's cost (issue 54)"
_SIZES = {  # scale: (partitions, keys per partition, garbage keys)
    Scale.TOY: (5, 10, 100),
    Scale.QUICK: (50, 40, 2_000),
    Scale.FULL: (200, 50, 10_000),
}
_LAYOUT = KeyLayout.default("level_zero/data")
_NAMESPACE = "/l0gc/bench-scrub"
_BUCKET = "scrub-bench"
_EPOCH = 10
"""The cluster epoch; M(p) is 8 everywhere, the referenced keys are stamped 9 (above M,
as references of a healthy namespace are) and the garbage 5."""
_DEFAULT_PACE = ScrubSettings().max_requests_per_second


def _references(partitions: int, per_partition: int) -> dict[str, tuple[str, ...]]:
    """Per partition, the keys of its one entry: its own, and one in ten of them shared
    with the next partition (which names them too)."""

    def shared(p: int, k: int) -> str:
        return _LAYOUT.format(p % 1000, _EPOCH - 1, f"shared-{p}-{k}")

    named: dict[str, tuple[str, ...]] = {}
    for p in range(partitions):
        own = [
            shared(p, k) if k % 10 == 0 else _LAYOUT.format(p % 1000, _EPOCH - 1, f"p{p}-k{k}")
            for k in range(per_partition)
        ]
        previous = [shared((p - 1) % partitions, k) for k in range(0, per_partition, 10)]
        named[f"orders/{p}"] = tuple(dict.fromkeys((*own, *previous)))
    return named


async def _namespace(etcd: LocalEtcd, named: dict[str, tuple[str, ...]]) -> None:
    kv = EtcdKV([etcd.endpoint])
    try:
        store = WatermarkStore(kv, _NAMESPACE)
        await store.init_cluster_epoch(1)
        for name in named:
            await store.register_partition(name)
        for _ in range(_EPOCH - 1):
            await store.advance_cluster_epoch()
        for name, keys in named.items():
            owned = await store.acquire_ownership(name, "bench")
            refs = References(((1, keys),))
            await store.publish_one(
                Publication(name, "bench", owned.owner_epoch, 8, references=refs)
            )
    finally:
        await kv.close()


async def _scrub(etcd: LocalEtcd, s3: LocalS3) -> tuple[float, float, dict[str, int]]:
    """One unpaced scrub: (wall s, CPU s of the scrubber's thread, counts; moto's server
    runs in other threads of this process)."""
    kv = EtcdKV([etcd.endpoint])
    settings = S3Settings(bucket=_BUCKET, endpoint_url=s3.endpoint_url, region="us-east-1")
    try:
        async with S3ObjectStore.open(settings) as objects:
            scrubber = Scrubber(
                WatermarkStore(kv, _NAMESPACE),
                objects,
                _LAYOUT,
                store_name=f"s3://{_BUCKET}/{_LAYOUT.root}",
                settings=ScrubSettings(max_requests_per_second=100_000.0, stranded_after_s=0.0),
            )
            cpu, started = time.thread_time(), time.perf_counter()
            report = await scrubber.run()
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
    finally:
        await kv.close()
    counts = {
        "referenced": report.referenced,
        "present": report.present,
        "missing": len(report.missing),
        "unknown": len(report.unknown),
        "head": report.head_requests,
        "list": report.list_requests,
        "listed": 0 if report.listing is None else report.listing.listed,
    }
    return wall, cpu, counts


def run(scale: Scale, runs: int) -> Report:
    """Seed once; scrub `runs` times healthy, then `runs` times with 1 % deleted."""
    partitions, per_partition, garbage = _SIZES[scale]
    report = Report(NAME, TITLE, scale, runs)
    named = _references(partitions, per_partition)
    distinct = sorted({key for keys in named.values() for key in keys})
    references = sum(len(keys) for keys in named.values())
    rows = []
    raw: dict[str, object] = {}
    with LocalEtcd() as etcd, LocalS3() as s3:
        asyncio.run(_namespace(etcd, named))
        s3.seed(_BUCKET, distinct)
        s3.seed(_BUCKET, [_LAYOUT.format(g % 1000, 5, f"garbage-{g}") for g in range(garbage)])
        for side in ("healthy", "1 % deleted behind l0gc's back"):
            if side != "healthy":
                backend = s3._backend()  # the bench deletes behind l0gc's back
                for key in distinct[::100]:
                    backend.delete_object(_BUCKET, key)
            walls: list[float] = []
            cpus: list[float] = []
            counts: dict[str, int] = {}
            for _ in range(runs):
                wall, cpu, counts = asyncio.run(_scrub(etcd, s3))
                walls.append(wall)
                cpus.append(cpu)
            requests = counts["head"] + counts["list"]
            rows.append(
                (
                    side,
                    counts["referenced"],
                    counts["missing"],
                    counts["head"],
                    round(counts["head"] / counts["referenced"], 3),
                    round(counts["head"] / references, 3),
                    counts["list"],
                    counts["listed"],
                    round(median(walls), 2),
                    round(median(cpus) / requests * 1e6),
                    round(requests / _DEFAULT_PACE),
                )
            )
            raw[side] = {"walls_s": walls, "cpus_s": cpus, "counts": counts}
    report.tables.append(
        Table(
            f"{partitions:,} partitions, {references:,} references to {len(distinct):,} distinct "
            f"keys (one in ten named by two partitions), {garbage:,} garbage keys beside them; "
            f"moto, etcd, loopback; unpaced",
            (
                "run",
                "distinct keys",
                "missing",
                "HEAD requests",
                "HEADs per distinct key",
                "HEADs per reference",
                "LIST requests",
                "keys listed",
                "wall s (median)",
                "scrubber CPU us/request",
                f"s at the default {_DEFAULT_PACE:g} req/s",
            ),
            tuple(rows),
        )
    )
    healthy = rows[0]
    report.goals.append(
        Goal(
            "one HEAD per referenced key (healthy)",
            f"{healthy[4]} per distinct key",
            "1",
            healthy[4] == 1.0,
        )
    )
    report.raw = raw
    return report
