"""gcd on Google Cloud Storage (the GCS emulator): requests per deleted object for the
sweeper (JSON batch deletes of 100) vs a naive one-by-one delete, and skip-ahead
(`startOffset`) vs a full listing at 100 live : 1 garbage.

The emulator runs on loopback (`l0lab.testing.local_gcs`); objects are created before
every side (batches of copies; the emulator stamps its own `updated`, so the sweeper runs
with grace 0). Sides:

- gcd: `Sweeper` over `gcd.storage.gcs.client.GcsObjectStore` in this process, M given;
- gcd, full listing: the same with `skip_ahead=False`;
- naive: list every object, then objects.delete one at a time (what a script does).

Every side must leave exactly the live objects (checked). Measured: HTTP requests per
deleted object (LIST + DELETE/batch), LIST requests, keys deleted per second of wall.
The emulator ignores `startOffset` and `maxResults` (pinned in tests/gcd/storage/
test_gcs.py): every listing answer holds the whole prefix and the client drops what it
did not ask for, so its LIST *counts* are GCS's, its LIST *times* are not.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse

import aiohttp
import structlog

from bench.common import Goal, Report, Scale, Table, median
from gcd.rules.layout import KeyLayout
from gcd.storage.gcs.client import GcsObjectStore
from gcd.storage.gcs.settings import GcsSettings
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.testing.local_gcs import LocalGcs

NAME = "gcs"
TITLE = "16. Google Cloud Storage (emulator): gcd vs naive deletes, skip-ahead vs full listing"
_SIZES = {  # scale: (all-garbage objects, (prefixes, garbage per prefix) at 100:1)
    Scale.TOY: (100, (2, 2)),
    Scale.QUICK: (1_000, (2, 20)),
    Scale.FULL: (3_000, (3, 40)),  # 4,000 live per prefix: several LIST pages each
}
_LAYOUT = KeyLayout.default("level_zero/data")
_BUCKETS = ("l0gc-bench-garbage", "l0gc-bench-mixed")

Run = tuple[float, int, int, int]
"""wall s, LIST requests, delete requests (batches or single deletes), objects deleted."""


async def _gcd(settings: GcsSettings, safe: int, *, skip: bool) -> Run:
    config = RoundConfig(
        layout=_LAYOUT, grace_s=0.0, skip_ahead=skip, concurrency=4, list_concurrency=2
    )
    async with GcsObjectStore.open(settings) as store:
        started = time.perf_counter()
        result = await Sweeper(store, config).sweep(safe, None)
        wall = time.perf_counter() - started
        return wall, store.list_requests, store.batch_requests, result.summary.deleted


async def _naive(settings: GcsSettings) -> Run:
    """List, then DELETE each object alone, 4 at a time (a script with a small pool)."""
    base = f"{settings.api_root}/storage/v1/b/{settings.bucket}/o"
    started = time.perf_counter()
    lists = 0
    names: list[str] = []
    async with aiohttp.ClientSession() as http:
        token = ""
        while True:
            params = {"prefix": "level_zero/data/", **({"pageToken": token} if token else {})}
            async with http.get(base, params=params) as answer:
                doc = await answer.json()
            lists += 1
            names.extend(item["name"] for item in doc.get("items", ()))
            token = doc.get("nextPageToken", "")
            if not token:
                break
        gate = asyncio.Semaphore(4)

        async def delete(name: str) -> None:
            async with gate, http.delete(f"{base}/{urllib.parse.quote(name, safe='')}") as ans:
                assert ans.status in (200, 204, 404), ans.status  # the emulator: 200

        await asyncio.gather(*(delete(name) for name in names))
    return time.perf_counter() - started, lists, len(names), len(names)


async def _measure(
    server: LocalGcs, count: int, shape: tuple[int, int], runs: int
) -> dict[str, list[Run]]:
    garbage = [_LAYOUT.format(i % 1000, 1 + i // 1000, f"g{i}") for i in range(count)]
    prefixes, per = shape
    dead = [_LAYOUT.format(p * 9, e, "g") for p in range(prefixes) for e in range(1, per + 1)]
    live = [
        _LAYOUT.format(p * 9, 1000 + i, "live") for p in range(prefixes) for i in range(100 * per)
    ]
    out: dict[str, list[Run]] = {"gcd": [], "naive": [], "skip": [], "full": []}
    settings = [GcsSettings(name, server.endpoint_url, anonymous=True) for name in _BUCKETS]
    for name in _BUCKETS:
        server.create_bucket(name)
    server.seed(_BUCKETS[1], live)
    for _ in range(runs):
        for side in ("gcd", "naive"):
            server.seed(_BUCKETS[0], garbage)
            run = await (
                _gcd(settings[0], count + 1, skip=True) if side == "gcd" else _naive(settings[0])
            )
            assert not server.keys(_BUCKETS[0]), side
            out[side].append(run)
        for side in ("skip", "full"):
            server.seed(_BUCKETS[1], dead)
            run = await _gcd(settings[1], per, skip=side == "skip")
            assert server.keys(_BUCKETS[1]) == set(live), side
            out[side].append(run)
    return out


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Each side `runs` times (see the module docstring)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    count, shape = _SIZES[scale]
    with LocalGcs() as server:
        out = asyncio.run(_measure(server, count, shape, runs))
    report = Report(NAME, TITLE, scale, runs)

    def row(side: str, label: str) -> tuple[object, ...]:
        walls = [r[0] for r in out[side]]
        _, lists, deletes, deleted = out[side][0]
        per_object = (lists + deletes) / deleted
        return (
            label,
            deleted,
            lists,
            deletes,
            round(per_object, 3),
            median(walls),
            deleted / median(walls),
        )

    header = (
        "side",
        "deleted",
        "LIST requests",
        "delete requests",
        "requests per deleted",
        "wall s (median)",
        "keys/s",
    )
    gcd, naive = row("gcd", "gcd (Sweeper, JSON batch of 100)"), row("naive", "naive DELETE loop")
    report.tables.append(
        Table(f"{count:,} garbage objects over 1000 prefixes", header, (gcd, naive))
    )
    skip, full = row("skip", "gcd, skip-ahead (startOffset)"), row("full", "gcd, full listing")
    prefixes, per = shape
    report.tables.append(
        Table(
            f"{prefixes * per} garbage and {prefixes * per * 100:,} live objects ({prefixes} "
            "prefixes, 100 live : 1 garbage)",
            header,
            (skip, full),
        )
    )
    fewer = float(naive[4]) / float(gcd[4])  # type: ignore[arg-type]
    report.goals.append(
        Goal("requests per deleted object, naive / gcd", f"{fewer:.0f}x", ">= 20x", fewer >= 20)
    )
    report.goals.append(
        Goal(
            "LIST at 100:1, skip-ahead vs full listing",
            f"{skip[2]} vs {full[2]}",
            "fewer",
            int(skip[2]) < int(full[2]),
        )
    )  # type: ignore[call-overload]
    report.notes.append(
        "The emulator is a single-threaded Python server on the same 2 "
        "cores: request counts are GCS's, keys/s are not."
    )
    report.raw = {"runs": out}
    return report
