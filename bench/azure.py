"""gcd on Azure Blob Storage (Azurite): the sweeper vs a naive one-by-one delete, and
skip-ahead (the delimiter walk) vs a full listing at 100 live : 1 garbage.

Azurite runs on loopback (`l0lab.testing.local_azurite`); blobs are uploaded before every side
(Azurite stamps its own LastModified, so the sweeper runs with grace 0). Sides:

- gcd: `Sweeper` over `gcd.storage.azure.client.AzureBlobStore` in this process (List Blobs pages,
  Blob Batch deletes of 256), M given;
- gcd, full listing: the same with `skip_ahead=False`;
- naive: list every blob, then `delete_blob` one at a time (what a script does).

Every side must leave exactly the live blobs (checked). Measured: keys deleted per
second of the side's wall time, and List Blobs requests.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from bench.common import Goal, Report, Scale, Table, median
from gcd.rules.layout import KeyLayout
from gcd.storage.azure.client import AzureBlobStore
from gcd.storage.azure.settings import AzureSettings
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.testing.local_azurite import LocalAzurite

NAME = "azure"
TITLE = "15. Azure Blob Storage (Azurite): gcd vs naive deletes, skip-ahead vs full listing"
_SIZES = {  # scale: (all-garbage blobs, (prefixes, garbage per prefix) at 100:1)
    Scale.TOY: (100, (2, 2)),
    Scale.QUICK: (1_000, (2, 20)),
    Scale.FULL: (3_000, (3, 40)),  # 4,000 live per prefix: several List Blobs pages each
}
_LAYOUT = KeyLayout.default("level_zero/data")
_CONTAINERS = ("l0gc-bench-garbage", "l0gc-bench-mixed")
"""One container for the all-garbage sides, one for the 100:1 sides."""


async def _seed(client: ContainerClient, names: list[str]) -> None:
    gate = asyncio.Semaphore(16)

    async def one(name: str) -> None:
        async with gate:
            await client.upload_blob(name, b"x", overwrite=True)

    await asyncio.gather(*(one(n) for n in names))


async def _names(client: ContainerClient) -> set[str]:
    return {b.name async for b in client.list_blobs()}


async def _gcd(settings: AzureSettings, safe: int, *, skip: bool) -> tuple[float, int, int]:
    config = RoundConfig(layout=_LAYOUT, grace_s=0.0, skip_ahead=skip)
    async with AzureBlobStore.open(settings) as store:
        started = time.perf_counter()
        result = await Sweeper(store, config).sweep(safe, None)
        return time.perf_counter() - started, store.list_requests, result.summary.deleted


async def _naive(client: ContainerClient) -> tuple[float, int, int]:
    started = time.perf_counter()
    pages = 0
    names: list[str] = []
    async for page in client.list_blobs(name_starts_with="level_zero/data/").by_page():
        pages += 1
        names.extend([b.name async for b in page])
    for name in names:
        await client.delete_blob(name)
    return time.perf_counter() - started, pages, len(names)


async def _measure(
    azurite: LocalAzurite, conn: Path, count: int, shape: tuple[int, int], runs: int
) -> dict[str, Any]:
    garbage = [_LAYOUT.format(i % 1000, 1 + i // 1000, f"g{i}") for i in range(count)]
    prefixes, per = shape
    dead = [_LAYOUT.format(p * 9, e, "g") for p in range(prefixes) for e in range(1, per + 1)]
    live = [
        _LAYOUT.format(p * 9, 1000 + i, "live") for p in range(prefixes) for i in range(100 * per)
    ]
    out: dict[str, list[tuple[float, int, int]]] = {"gcd": [], "naive": [], "skip": [], "full": []}
    settings = [AzureSettings(azurite.account_url, name, str(conn)) for name in _CONTAINERS]
    async with BlobServiceClient.from_connection_string(azurite.connection_string) as svc:
        client, mixed = (svc.get_container_client(name) for name in _CONTAINERS)
        for container in (client, mixed):
            await container.create_container()
        await _seed(mixed, live)
        for _ in range(runs):
            for side in ("gcd", "naive"):
                await _seed(client, garbage)
                run = await (
                    _gcd(settings[0], count + 1, skip=True) if side == "gcd" else _naive(client)
                )
                assert not await _names(client)
                out[side].append(run)
            for side in ("skip", "full"):
                await _seed(mixed, dead)
                run = await _gcd(settings[1], per, skip=side == "skip")
                assert await _names(mixed) == set(live), side
                out[side].append(run)
    return out


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Each side `runs` times (see the module docstring)."""
    logging.getLogger("azure").setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    count, shape = _SIZES[scale]
    with LocalAzurite() as azurite, tempfile.TemporaryDirectory() as tmp:
        conn = azurite.write_connection_string(Path(tmp) / "conn")
        out = asyncio.run(_measure(azurite, conn, count, shape, runs))
    report = Report(NAME, TITLE, scale, runs)

    def row(side: str, label: str) -> tuple[object, ...]:
        walls = [w for w, _, _ in out[side]]
        deleted = out[side][0][2]
        return (label, deleted, median(walls), deleted / median(walls), out[side][0][1])

    gcd, naive = row("gcd", "gcd (Sweeper, Blob Batch)"), row("naive", "naive delete_blob loop")
    report.tables.append(
        Table(
            f"{count:,} garbage blobs over 1000 prefixes",
            ("side", "deleted", "wall s (median)", "keys/s", "List Blobs requests"),
            (gcd, naive),
        )
    )
    skip, full = row("skip", "gcd, skip-ahead (walk)"), row("full", "gcd, full listing")
    prefixes, per = shape
    report.tables.append(
        Table(
            f"{prefixes * per} garbage and {prefixes * per * 100:,} live blobs ({prefixes} "
            "prefixes, 100 live : 1 garbage)",
            ("side", "deleted", "wall s (median)", "keys/s", "List Blobs requests"),
            (skip, full),
        )
    )
    ratio = float(gcd[3]) / float(naive[3])  # type: ignore[arg-type]
    report.goals.append(
        Goal("gcd vs naive on Azurite (keys/s)", f"{ratio:.1f}x", "> 1x", ratio > 1)
    )
    report.goals.append(
        Goal(
            "List Blobs at 100:1, skip-ahead vs full listing",
            f"{skip[4]} vs {full[4]}",
            "fewer",
            int(skip[4]) < int(full[4]),
        )
    )  # type: ignore[call-overload]
    report.notes.append(
        "Azurite is a Node.js emulator on the same 2 cores: keys/s say how "
        "the sides compare, not what Azure Storage sustains."
    )
    report.raw = {"runs": out}
    return report
