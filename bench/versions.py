"""What versioned buckets cost: LIST and DELETE requests per reclaimed byte (issue 28).

On SeaweedFS (real versioning; `weed mini`, loopback), three sides sweep the same
garbage: a plain (unversioned) bucket; a versioned bucket with `--versions reclaim`
(the default: every version and delete marker of an eligible key, by version id); and
the versioned bucket with `--versions markers-only` (the behaviour before issue 28: one
delete marker per current key). Each garbage key has 3 versions on the versioned bucket
(every other one deleted once already: a delete marker on top), each live key 2.
Requests are counted at the server side (`l0lab.testing.faultproxy` in front of it);
reclaimed bytes are read from the server (the sum of version sizes before minus after),
not from the sweeper's report, because a delete marker frees nothing. Every side is
checked: reclaim leaves no version or marker of a garbage key and every version of a
live key; the plain side leaves exactly the live keys.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from bench.common import Goal, Report, Scale, Table, median
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.rules.versions import VersionMode
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0lab.testing.faultproxy import FaultProxy
from l0lab.testing.local_seaweedfs import LocalSeaweedFS

NAME = "versions"
TITLE = "18. Versioned buckets: LIST and DELETE requests per reclaimed byte (SeaweedFS)"
_SIZES = {  # scale: (prefixes, garbage keys per prefix, live keys per prefix)
    Scale.TOY: (1, 2, 2),
    Scale.QUICK: (4, 25, 50),
    Scale.FULL: (5, 100, 200),
}
_BODY = 4096
_SAFE = 1_000
_SIDES = ("plain bucket", "versioned, --versions reclaim", "versioned, --versions markers-only")
_LAYOUT = KeyLayout.default("level_zero/data")
_buckets = itertools.count()


@dataclass(frozen=True, slots=True)
class VersionRun:
    """One side's round."""

    round_s: float
    list_requests: int
    delete_requests: int
    reclaimed_bytes: int
    removed_entries: int
    """Versions and delete markers gone (objects on the plain bucket)."""


def _keys(prefixes: int, garbage: int, live: int) -> tuple[list[str], list[str]]:
    dead = [_LAYOUT.format(p * 37, e, "g") for p in range(prefixes) for e in range(1, garbage + 1)]
    alive = [
        _LAYOUT.format(p * 37, _SAFE + 1 + i, "live") for p in range(prefixes) for i in range(live)
    ]
    return dead, alive


def _entries(client: Any, bucket: str) -> dict[tuple[str, str], int]:
    """(key, version id) -> size of every version and delete marker (size 0)."""
    found: dict[tuple[str, str], int] = {}
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for item in page.get("Versions", []):
            found[(item["Key"], item["VersionId"])] = int(item.get("Size", 0))
        for item in page.get("DeleteMarkers", []):
            found[(item["Key"], item["VersionId"])] = 0
    return found


def _seed(server: LocalSeaweedFS, side: str, dead: list[str], alive: list[str]) -> str:
    client = server.client()
    bucket = f"bench-versions-{next(_buckets)}"
    client.create_bucket(Bucket=bucket)
    versioned = side != _SIDES[0]
    if versioned:
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    body = b"v" * _BODY
    for _ in range(3 if versioned else 1):
        server.seed(bucket, dead, body=body)
    for _ in range(2 if versioned else 1):
        server.seed(bucket, alive, body=body)
    if versioned:
        marked = dead[::2]
        for start in range(0, len(marked), 1000):
            objects = [{"Key": key} for key in marked[start : start + 1000]]
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    return bucket


async def _sweep(endpoint: str, bucket: str, side: str) -> tuple[VersionRun, float]:
    mode = VersionMode.MARKERS_ONLY if side.endswith("markers-only") else VersionMode.RECLAIM
    async with FaultProxy(endpoint) as proxy:
        settings = S3Settings(bucket, proxy.endpoint_url, "us-east-1")
        async with S3ObjectStore.open(settings) as store:
            config = RoundConfig(layout=_LAYOUT, grace_s=0.0, versions=mode)
            retrier = Retrier(Backoff(base_s=0.05, cap_s=1.0), rng=random.Random(0))
            sweeper = Sweeper(store, config, retrier=retrier, clock=lambda: time.time() + 60)
            started = time.perf_counter()
            await run_round(sweeper, SafetyGate(), None, override=_SAFE)
            elapsed = time.perf_counter() - started
        return VersionRun(elapsed, proxy.requests["list"], proxy.requests["delete"], 0, 0), elapsed


def _one(server: LocalSeaweedFS, side: str, dead: list[str], alive: list[str]) -> VersionRun:
    bucket = _seed(server, side, dead, alive)
    client = server.client()
    before = _entries(client, bucket)
    counted, _ = asyncio.run(_sweep(server.endpoint_url, bucket, side))
    after = _entries(client, bucket)
    garbage, live = set(dead), set(alive)
    kept_live = {entry for entry in before if entry[0] in live}
    if side == _SIDES[2]:
        assert set(before) <= set(after), "markers-only removed a version"
    else:
        assert not {entry for entry in after if entry[0] in garbage}, f"{side}: garbage left"
        assert kept_live == set(after), f"{side}: a live version was deleted"
    reclaimed = sum(before.values()) - sum(after.get(entry, 0) for entry in before)
    removed = len(set(before) - set(after))
    return VersionRun(
        counted.round_s, counted.list_requests, counted.delete_requests, reclaimed, removed
    )


def run(scale: Scale = Scale.FULL, runs: int = 3) -> Report:
    """Each side `runs` times on SeaweedFS, on a fresh bucket each time."""
    prefixes, garbage, live = _SIZES[scale]
    dead, alive = _keys(prefixes, garbage, live)
    report = Report(NAME, TITLE, scale, runs)
    results: dict[str, list[VersionRun]] = {side: [] for side in _SIDES}
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # SeaweedFS takes any
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with LocalSeaweedFS() as server:
        for r in range(runs):
            for side in _SIDES if r % 2 == 0 else _SIDES[::-1]:
                results[side].append(_one(server, side, dead, alive))
    rows = []
    per_mb: dict[str, float | str] = {}
    for side in _SIDES:
        done = results[side]
        first = done[0]
        mb = first.reclaimed_bytes / 1e6
        requests = first.list_requests + first.delete_requests
        per_mb[side] = requests / mb if mb else "no byte reclaimed"
        rows.append(
            (
                side,
                median([x.round_s for x in done]),
                first.list_requests,
                first.delete_requests,
                first.removed_entries,
                round(mb, 3),
                per_mb[side],
            )
        )
    report.raw["runs"] = {side: [asdict(x) for x in rs] for side, rs in results.items()}
    report.tables.append(
        Table(
            f"{len(dead):,} garbage keys and {len(alive):,} live keys over {prefixes} prefixes, "
            f"{_BODY:,} B bodies",
            (
                "side",
                "round s (median)",
                "LIST reqs",
                "DELETE reqs",
                "entries removed",
                "MB reclaimed",
                "requests per MB reclaimed",
            ),
            tuple(rows),
        )
    )
    plain, reclaim = float(per_mb[_SIDES[0]]), float(per_mb[_SIDES[1]])
    freed = [results[side][0].reclaimed_bytes for side in _SIDES]
    report.goals.append(
        Goal(
            "versioned reclaim frees every garbage version",
            f"{freed[1]:,} B",
            f"3 x the plain bucket's {freed[0]:,} B",
            freed[1] == 3 * freed[0],
        )
    )
    report.goals.append(
        Goal(
            "requests per reclaimed MB, versioned reclaim / plain",
            f"{reclaim / plain:.2f}x",
            "<= 1 (versions are listed and deleted in the same pages)",
            reclaim <= plain,
        )
    )
    report.notes.append(
        "markers-only reclaims 0 bytes: its requests buy nothing but delete markers. "
        "Requests are counted by the proxy (what the store bills); reclaimed bytes are "
        "the server's sum of version sizes before minus after."
    )
    return report
