"""`gcd explain` on a big journal: 10,000 keys in one call against 1M journal records
(issue 39).

A journal of `records` records (half before, half after records of requests of two
keys each, so `records` keys deleted) is written by the real `JournalWriter` (no fsync)
into 64 MiB segments, each closed with its index. Then one `explain_keys` call explains
`keys` keys, half of them deleted somewhere in the journal and half never written,
against an empty bucket of a real S3 server (moto, loopback): the store lookup, the
index reads and the line reads are all in the time. M comes from `--safe-epoch` (no
etcd: one etcd read is not what is measured). Every deleted key must come back
``deleted`` and every other ``absent``. The same call with the indexes removed (every
segment read in full, what explain would do without them) is the baseline, run once.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import Goal, Report, Scale, Table, median
from gcd.explainer.answer import explain_keys
from gcd.journal.records import JournalWriter
from gcd.journal.search import LocalSegments
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis
from gcd.rules.explain import GcFacts
from gcd.rules.layout import KeyLayout
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0lab.testing.local_servers import LocalS3

NAME = "explain"
TITLE = "23. gcd explain: 10,000 keys against a journal of 1M records (issue 39)"
_SIZES = {Scale.TOY: (2_000, 100), Scale.QUICK: (100_000, 2_000), Scale.FULL: (1_000_000, 10_000)}
_LAYOUT = KeyLayout.default("level_zero/data")
_PER_REQUEST = 2


def _write_journal(directory: Path, records: int) -> list[str]:
    """`records` records of two-key requests; the keys deleted, in order."""
    # 20 records a second: segments close by size (64 MiB), as a busy sweeper's do
    clock = iter(1_700_000_000 + t / 20 for t in range(100_000_000))
    journal = JournalWriter(
        directory,
        "bench-1",
        namespace="/l0gc/bench",
        bucket="b",
        root=_LAYOUT.root,
        fsync=False,
        clock=lambda: next(clock),
    )
    deleted: list[str] = []
    epoch = 1
    for request in range(records // 2):
        if request % 500 == 0:
            epoch += 1  # a round: M and the epochs deleted rise
        keys = tuple(
            _LAYOUT.format(request % 1000, epoch, f"seg-{request}-{i}") for i in range(_PER_REQUEST)
        )
        tried = BatchAttempt(
            DeleteBasis(epoch, epoch + 5, 1000 + epoch, (("p/0", epoch),)),
            keys,
            (epoch,) * len(keys),
            0,
            request,
            request + 1,
        )
        journal.before(tried)
        journal.after(BatchOutcome(tried, deleted=keys))
        deleted.extend(keys)
    journal.close()
    return deleted


async def _explain(
    s3: LocalS3, bucket: str, directory: Path, keys: list[str]
) -> tuple[float, dict[str, int], int]:
    facts = GcFacts(time.time(), 600.0, 10**6, 10**6 + 1)
    settings = S3Settings(bucket=bucket, endpoint_url=s3.endpoint_url, region="us-east-1")
    async with S3ObjectStore.open(settings) as objects:
        started = time.perf_counter()
        report = await explain_keys(
            keys, _LAYOUT, facts, objects=objects, journal=LocalSegments([directory])
        )
        took = time.perf_counter() - started
    verdicts: dict[str, int] = {}
    for answer in report.explanations:
        verdicts[answer.verdict.value] = verdicts.get(answer.verdict.value, 0) + 1
    lines = report.journal["lines_read"] if report.journal else 0
    return took, verdicts, lines


def run(scale: Scale, runs: int) -> Report:
    """Write the journal once, explain `keys` keys `runs` times, then once without index."""
    records, count = _SIZES[scale]
    report = Report(NAME, TITLE, scale, runs)
    work = Path(tempfile.mkdtemp(prefix="l0gc-explain-bench-"))
    s3 = LocalS3().start()
    try:
        started = time.perf_counter()
        deleted = _write_journal(work, records)
        written_s = time.perf_counter() - started
        size = sum(p.stat().st_size for p in work.glob("journal-*.jsonl"))
        index_size = sum(p.stat().st_size for p in work.glob("*.idx"))
        segments = len(list(work.glob("journal-*.jsonl")))
        rng = random.Random(39)
        keys = rng.sample(deleted, count // 2) + [
            _LAYOUT.format(rng.randrange(1000), rng.randrange(2, 2000), f"never-{i}")
            for i in range(count - count // 2)
        ]
        rng.shuffle(keys)
        s3.create_bucket("explain-bench")
        times: list[float] = []
        verdicts: dict[str, int] = {}
        lines = 0
        for _ in range(runs):
            took, verdicts, lines = asyncio.run(_explain(s3, "explain-bench", work, keys))
            times.append(took)
        assert verdicts == {"deleted": count // 2, "absent": count - count // 2}, verdicts
        for index in work.glob("*.idx"):
            index.unlink()
        full_s, full_verdicts, full_lines = asyncio.run(_explain(s3, "explain-bench", work, keys))
        assert full_verdicts == verdicts, full_verdicts
    finally:
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = median(times)
    report.tables.append(
        Table(
            f"{count:,} keys, journal of {records:,} records ({size / 2**20:,.0f} MiB in "
            f"{segments} segments; indexes {index_size / 2**20:,.1f} MiB; written in "
            f"{written_s:.0f} s)",
            ("side", "median wall (s)", "runs", "journal lines read"),
            (
                ("with the segment indexes", round(best, 2), runs, lines),
                ("without (every segment read in full)", round(full_s, 2), 1, full_lines),
            ),
        )
    )
    report.goals.append(
        Goal(f"{count:,} keys against {records:,} records", f"{best:.2f} s", "< 10 s", best < 10.0)
    )
    report.raw = {
        "times_s": times,
        "full_read_s": full_s,
        "journal_bytes": size,
        "index_bytes": index_size,
        "segments": segments,
        "verdicts": verdicts,
    }
    return report
