"""What the undo window costs on a versioned bucket: bytes held, extra requests (issue 38).

On SeaweedFS (real versioning; `weed mini`, loopback) the same garbage (one version per
key, as L0 objects are written once) beside live keys is swept two ways:

- **window 0**: one round frees every garbage version by version id;
- **window 1 h** (two steps): round 1 *hides* each garbage key behind a delete marker
  (no byte freed: every garbage byte is held), a round 30 minutes later finds them
  pending (held, listed again), and a round past the hour *reclaims* every version and
  l0gc's markers by version id; a last round shows a round with nothing pending.

The sweeper's clock is moved instead of waiting (the markers' LastModified is the
server's; the sweeper compares it with its own clock), so a window hour costs seconds.
Requests are counted at the server side (`l0lab.testing.faultproxy`); bytes held and
freed are read from the server (the sum of version sizes), not from the sweeper's
report. Checked on every run: both ways leave no version or marker of a garbage key and
every version of a live key.

The ledger read at start (`gcd.cli.undo`): a sweeper with a window reads the delete
markers l0gc wrote from the shipped journal; only segments of the last window and a
day are read (the rest once, if a round meets an older unknown marker). Measured on
moto (in process, segments back-dated through its backend): the full read against the
bounded one, with most segments older than the bound.

Bytes held per window hour: with `D` bytes deleted per hour, a window of `W` hours holds
`D x W` on average (docs/reliability.md); here every garbage byte of the round is held
for exactly one window, which the table shows as measured.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from bench.common import Goal, Report, Scale, Table, median
from gcd.journal.records import JournalWriter, read_journal_objects
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.service.runtime import LEDGER_MARGIN_S
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from gcd.undo.window import UndoKeeper
from l0lab.testing.faultproxy import FaultProxy
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalS3

NAME = "undo"
TITLE = "24. The undo window on a versioned bucket: bytes held and extra requests (SeaweedFS)"
_SIZES = {  # scale: (prefixes, garbage keys per prefix, live keys per prefix)
    Scale.TOY: (1, 3, 3),
    Scale.QUICK: (4, 250, 250),
    Scale.FULL: (5, 1000, 1000),
}
_BODY = 4096
_SAFE = 1_000
_WINDOW_S = 3600.0
_LAYOUT = KeyLayout.default("level_zero/data")
_buckets = itertools.count()


@dataclass(frozen=True, slots=True)
class Step:
    """One round: its requests, and the garbage bytes held / freed after it."""

    name: str
    round_s: float
    list_requests: int
    delete_requests: int
    held_bytes: int
    freed_bytes: int
    markers_written: int
    versions_reclaimed: int
    pending_keys: int


def _keys(prefixes: int, garbage: int, live: int) -> tuple[list[str], list[str]]:
    dead = [_LAYOUT.format(p * 37, e, "g") for p in range(prefixes) for e in range(1, garbage + 1)]
    alive = [
        _LAYOUT.format(p * 37, _SAFE + 1 + i, "live") for p in range(prefixes) for i in range(live)
    ]
    return dead, alive


def _entries(client: Any, bucket: str) -> dict[tuple[str, str], tuple[int, bool]]:
    """(key, version id) -> (size, is a delete marker) of every version and marker."""
    found: dict[tuple[str, str], tuple[int, bool]] = {}
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for item in page.get("Versions", []):
            found[(item["Key"], item["VersionId"])] = (int(item.get("Size", 0)), False)
        for item in page.get("DeleteMarkers", []):
            found[(item["Key"], item["VersionId"])] = (0, True)
    return found


def _held(entries: dict[tuple[str, str], tuple[int, bool]], dead: set[str]) -> int:
    return sum(size for (key, _), (size, _) in entries.items() if key in dead)


def _seed(server: LocalSeaweedFS, dead: list[str], alive: list[str]) -> str:
    client = server.client()
    bucket = f"bench-undo-{next(_buckets)}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    server.seed(bucket, dead + alive, body=b"u" * _BODY)
    return bucket


async def _rounds(
    server: LocalSeaweedFS,
    bucket: str,
    dead: set[str],
    window_s: float,
    offsets: list[tuple[str, float]],
) -> list[Step]:
    """One sweeper process, a round at each clock offset (seconds after now)."""
    client = server.client()
    steps: list[Step] = []
    async with FaultProxy(server.endpoint_url) as proxy:
        settings = S3Settings(bucket, proxy.endpoint_url, "us-east-1")
        async with S3ObjectStore.open(settings) as store:
            offset = [0.0]
            config = RoundConfig(layout=_LAYOUT, grace_s=0.0, undo_window_s=window_s)
            retrier = Retrier(Backoff(base_s=0.05, cap_s=1.0), rng=random.Random(0))
            keeper = UndoKeeper(window_s, clock=lambda: time.time() + offset[0])
            sweeper = Sweeper(
                store,
                config,
                retrier=retrier,
                undo=keeper,
                clock=lambda: time.time() + offset[0] + 60,
            )
            before = _held(_entries(client, bucket), dead)
            for name, at in offsets:
                offset[0] = at
                lists, deletes = proxy.requests["list"], proxy.requests["delete"]
                started = time.perf_counter()
                result = await run_round(sweeper, SafetyGate(), None, override=_SAFE)
                elapsed = time.perf_counter() - started
                held = _held(_entries(client, bucket), dead)
                summary = result.summary
                undo = summary.undo or {}
                steps.append(
                    Step(
                        name,
                        elapsed,
                        proxy.requests["list"] - lists,
                        proxy.requests["delete"] - deletes,
                        held,
                        before - held,
                        summary.markers_written,
                        summary.versions_reclaimed,
                        int(undo.get("pending_keys", 0)),
                    )
                )
                before = held
    return steps


def _one(server: LocalSeaweedFS, dead: list[str], alive: list[str]) -> dict[str, list[Step]]:
    garbage = set(dead)
    found: dict[str, list[Step]] = {}
    plans = {
        "window 0": (0.0, [("round", 0.0)]),
        "window 1h": (
            _WINDOW_S,
            [
                ("1: hide", 0.0),
                ("2: +30 min, pending", _WINDOW_S / 2),
                ("3: +1 h, reclaim", _WINDOW_S + 60),
                ("4: after, nothing pending", _WINDOW_S + 120),
            ],
        ),
    }
    for side, (window, offsets) in plans.items():
        bucket = _seed(server, dead, alive)
        live_before = {e for e in _entries(server.client(), bucket) if e[0] not in garbage}
        found[side] = asyncio.run(_rounds(server, bucket, garbage, window, offsets))
        after = _entries(server.client(), bucket)
        assert not {e for e in after if e[0] in garbage}, f"{side}: garbage left"
        assert set(after) == live_before, f"{side}: a live version was touched"
    return found


_SEGMENTS = {Scale.TOY: (4, 1), Scale.QUICK: (100, 4), Scale.FULL: (400, 8)}
"""scale: (shipped segments, of which recent)."""


def _segment(directory: Path) -> bytes:
    """One journal segment: 20 hiding requests of 100 keys, each with its markers."""
    writer = JournalWriter(
        directory, "bench", namespace="/l0gc/bench", bucket="b", root=_LAYOUT.root, fsync=False
    )
    basis = DeleteBasis(_SAFE, _SAFE + 2, 1234, (("orders/0", _SAFE),), round_id="r1")
    for request in range(20):
        keys = tuple(_LAYOUT.format(request, e, "g" * 36) for e in range(1, 101))
        attempt = BatchAttempt(
            basis,
            keys,
            tuple(range(1, 101)),
            1,
            request,
            request,
            (),
            tuple(("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbr",) for _ in keys),
        )
        writer.before(attempt)
        writer.after(
            BatchOutcome(
                attempt,
                keys,
                markers=tuple((key, f"m{request}-{index}") for index, key in enumerate(keys)),
            )
        )
    writer.close()
    return next(directory.glob("journal-*.jsonl")).read_bytes()


def _ledger_reads(scale: Scale, runs: int) -> tuple[Table, list[dict[str, float]]]:
    count, recent = _SEGMENTS[scale]
    with tempfile.TemporaryDirectory() as scratch, LocalS3() as s3:
        body = _segment(Path(scratch))
        bucket = f"bench-ledger-{next(_buckets)}"
        old = datetime.now(UTC) - timedelta(days=3)
        s3.seed(
            bucket,
            {f"audit/journal-s{i}-000001.jsonl": body for i in range(count - recent)},
            last_modified=old,
        )
        s3.seed(bucket, {f"audit/journal-r{i}-000001.jsonl": body for i in range(recent)})
        since = time.time() - _WINDOW_S - LEDGER_MARGIN_S

        async def read(bound: float | None) -> tuple[float, int]:
            settings = S3Settings(bucket, s3.endpoint_url, "us-east-1")
            async with S3ObjectStore.open(settings) as store:
                started = time.perf_counter()
                found = await read_journal_objects(
                    store, "audit", max_bytes=1 << 30, newer_than=bound
                )
                return time.perf_counter() - started, len(found.records)

        raw: list[dict[str, float]] = []
        for _ in range(runs):
            full, full_records = asyncio.run(read(None))
            bounded, bounded_records = asyncio.run(read(since))
            raw.append(
                {
                    "full_s": full,
                    "bounded_s": bounded,
                    "full_records": full_records,
                    "bounded_records": bounded_records,
                }
            )
    table = Table(
        f"The ledger read at start: {count} shipped segments of {len(body) // 1000:,} kB "
        f"(2,000 markers each), {recent} of them recent",
        ("read", "s (median)", "records", "segments fetched"),
        (
            (
                "every shipped segment (before)",
                median([r["full_s"] for r in raw]),
                int(raw[0]["full_records"]),
                count,
            ),
            (
                "last window + 1 day only",
                median([r["bounded_s"] for r in raw]),
                int(raw[0]["bounded_records"]),
                recent,
            ),
        ),
    )
    return table, raw


def run(scale: Scale = Scale.FULL, runs: int = 3) -> Report:
    """Both ways `runs` times on SeaweedFS, on a fresh bucket each time."""
    prefixes, garbage, live = _SIZES[scale]
    dead, alive = _keys(prefixes, garbage, live)
    report = Report(NAME, TITLE, scale, runs)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # SeaweedFS takes any
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with LocalSeaweedFS() as server:
        results = [_one(server, dead, alive) for _ in range(runs)]
    report.raw["runs"] = [
        {side: [asdict(s) for s in steps] for side, steps in r.items()} for r in results
    ]
    rows = []
    for side in ("window 0", "window 1h"):
        for index, step in enumerate(results[0][side]):
            wall = median([r[side][index].round_s for r in results])
            rows.append(
                (
                    side,
                    step.name,
                    wall,
                    step.list_requests,
                    step.delete_requests,
                    step.markers_written,
                    step.versions_reclaimed,
                    step.pending_keys,
                    round(step.held_bytes / 1e6, 3),
                    round(step.freed_bytes / 1e6, 3),
                )
            )
    report.tables.append(
        Table(
            f"{len(dead):,} garbage keys (one {_BODY:,} B version each) and {len(alive):,} live "
            f"keys over {prefixes} prefixes",
            (
                "side",
                "round",
                "round s (median)",
                "LIST reqs",
                "DELETE reqs",
                "markers written",
                "versions reclaimed",
                "pending keys",
                "MB held after",
                "MB freed",
            ),
            tuple(rows),
        )
    )
    zero, two = results[0]["window 0"], results[0]["window 1h"]
    base = zero[0].list_requests + zero[0].delete_requests
    extra_lists = two[0].list_requests + two[2].list_requests - zero[0].list_requests
    extra_deletes = sum(s.delete_requests for s in two) - zero[0].delete_requests
    pending_lists = two[1].list_requests - two[3].list_requests
    entries = sum(s.markers_written + s.versions_reclaimed for s in two)
    held = two[0].held_bytes
    report.tables.append(
        Table(
            "The two-step reclaim against one step, and what one window hour holds",
            ("measure", "value"),
            (
                ("extra LIST requests (hide round + reclaim round vs one round)", extra_lists),
                ("extra DELETE requests (hide + reclaim vs reclaim)", extra_deletes),
                (
                    "DeleteObjects entries (hide + reclaim vs reclaim)",
                    f"{entries:,} vs {len(dead):,}",
                ),
                ("extra LIST requests of each round while keys are pending", pending_lists),
                ("MB held for the window hour", round(held / 1e6, 3)),
                (
                    "MB-hours held per MB deleted (window 1 h)",
                    round(held / max(1, zero[0].freed_bytes), 3),
                ),
                ("requests, window 0 round", base),
            ),
        )
    )
    report.goals.append(
        Goal(
            "the window frees every garbage byte, one window late",
            f"{two[-1].freed_bytes:,} B",
            f"= window 0's {zero[0].freed_bytes:,} B, 0 B freed before the hour",
            two[2].freed_bytes == zero[0].freed_bytes
            and two[0].freed_bytes == 0
            and two[1].freed_bytes == 0,
        )
    )
    report.goals.append(
        Goal(
            "extra DELETE requests of the two-step reclaim",
            f"{extra_deletes}",
            "<= one per 1,000 hidden keys, rounded up (the markers' DeleteObjects)",
            extra_deletes <= -(-len(dead) // 1000) * max(1, prefixes),
        )
    )
    ledger, ledger_raw = _ledger_reads(scale, runs)
    report.tables.append(ledger)
    report.raw["ledger_reads"] = ledger_raw
    full_s = median([r["full_s"] for r in ledger_raw])
    bounded_s = median([r["bounded_s"] for r in ledger_raw])
    report.goals.append(
        Goal(
            "ledger read at start, bounded / full",
            f"{bounded_s / full_s:.2f}x",
            "well below 1 when most segments are old",
            bounded_s < full_s,
        )
    )
    report.notes.append(
        "Requests are counted by the proxy (what the store bills); held and freed bytes "
        "are the server's sum of garbage version sizes. The sweeper's clock is moved by "
        "the window instead of waiting; the 30-minute round shows what every round "
        "inside the window costs while keys are pending (they are listed again)."
    )
    return report
