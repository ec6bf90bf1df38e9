"""The deletion journal stays bounded (issue 36 item 7): local segments deleted once
their shipped copy is verified, shipped segments and etcd anchors pruned by age, and
`gcd journal verify` still checking an unbroken chain from each pruned marker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import structlog

from gcd.cli.main import main
from gcd.journal.anchor import AnchorKeeper
from gcd.journal.check import FindingKind, check_anchors, check_records
from gcd.journal.records import JournalWriter, read_journal, read_journal_objects, ship_segments
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis
from gcd.observe.metrics import SweeperMetrics
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key, pruned_marker_name
from l0gc.contract.kv import Put
from l0gc.etcd.memory import MemoryKV
from l0lab.testing.local_servers import LocalS3
from l0lab.testing.memory import MemoryObjectStore
from tests.gcd.journal.test_records import LAYOUT, key

NS = "/l0gc/t"
PREFIX = "l0gc-audit/journal"
T0 = 1_800_000_000.0
HOUR = 3600.0


class Clock:
    """Simulated time for the writer, the keeper and the bucket's LastModified."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def batch(journal: JournalWriter, number: int, keys: int = 40) -> None:
    """One DeleteObjects request of `keys` keys under M = 5, every key deleted."""
    names = [key(3, f"k{number}-{i:04d}-{'x' * 24}") for i in range(keys)]
    epochs = tuple(LAYOUT.parse(k).epoch for k in names)  # type: ignore[union-attr]
    tried = BatchAttempt(
        DeleteBasis(5, 8, 40, (("orders/3", 5),)), tuple(names), epochs, 0, 1, number
    )
    journal.before(tried)
    journal.after(BatchOutcome(tried, deleted=tuple(names)))


def local_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir())


def findings(read: object, *, where: str | None = None) -> list[str]:
    """DAMAGE and VIOLATION findings of a read (and of its audit anchors, `where`)."""
    report = check_records(read)  # type: ignore[arg-type]
    if where is not None:
        check_anchors(
            read,
            read.audit_anchors,
            report,
            where=where,  # type: ignore[attr-defined]
            require_all=True,
        )
    bad = (FindingKind.DAMAGE, FindingKind.VIOLATION)
    return [f"{f.kind.value} {f.source}: {f.message}" for f in report.findings if f.kind in bad]


async def test_a_day_of_journal_stays_in_a_bounded_volume(tmp_path: Path) -> None:
    """24 h of a busy sweeper (a 40-key request every 20 s, 16 KiB segments, ~1,700 of
    them) with an audit prefix, local deletion and a 6 h retention: the journal
    directory never holds more than one open segment and the marker; the audit prefix
    holds at most the retention plus one pruning interval; each verify (the directory
    mid-run, the prefix at the end) finds an intact chain from the pruned marker, and
    removing the marker makes the cut show."""
    clock = Clock()
    directory = tmp_path / "journal"
    max_bytes = 16 * 1024
    metrics = SweeperMetrics()
    journal = JournalWriter(
        directory,
        "s-1",
        namespace=NS,
        bucket="b",
        root=LAYOUT.root,
        metrics=metrics,
        max_bytes=max_bytes,
        max_age_s=HOUR,
        fsync=False,
        clock=clock,
    )
    store = MemoryObjectStore(clock=clock)
    kv = MemoryKV()
    gone = JournalAnchor("s-gone", 7, "ab" * 32, "journal-s-gone-000001.jsonl", T0 - 3 * HOUR)
    await kv.txn([], [Put(anchor_key(NS, "s-gone"), gone.encode())])
    keeper = AnchorKeeper(
        journal,
        kv=kv,
        namespace=NS,
        objects=store,
        prefix=PREFIX,
        keep_local=False,
        retention_s=6 * HOUR,
        clock=clock,
    )
    largest_local = 0
    requests = int(24 * HOUR / 20)
    for number in range(1, requests + 1):
        clock.now = T0 + 20 * number
        batch(journal, number)
        await keeper.step()
        largest_local = max(largest_local, local_bytes(directory))
        if number == requests // 2:  # mid-run: the directory alone verifies
            local = read_journal([directory])
            assert "s-1" in local.pruned
            assert len(local.files) == 1
            assert findings(local) == []
    journal.close()
    await keeper.close()
    written = int(metrics.journal_bytes._value.get())
    assert written > 25 * 1024 * 1024  # a day of journal: ~27 MiB
    # Locally: the open segment (under max_bytes plus one record) and the marker.
    assert largest_local < max_bytes + 8 * 1024, largest_local
    assert [p.name for p in directory.iterdir()] == [pruned_marker_name("s-1")]
    # The audit prefix: 6 h retention, pruned at most an hour late.
    segments = [
        info for k, info in store.objects.items() if k.rsplit("/", 1)[-1].startswith("journal-")
    ]
    ages = [clock.now - info.last_modified_s for info in segments]
    assert max(ages) <= 7 * HOUR + 20, max(ages) / HOUR
    assert len(keeper.pruned) == 24  # once an hour
    assert sum(report.segments_deleted for report in keeper.pruned) > 1000
    shipped = sum(info.size for info in segments)
    assert shipped < written / 3
    read = await read_journal_objects(store, PREFIX, max_bytes=1 << 20)
    assert "s-1" in read.pruned
    assert findings(read, where="the audit prefix") == []
    # The etcd anchor of the sweeper gone since before the day went (27 h > 6 h), in the
    # pass after it aged out; ours stays.
    stored = {item.key for item in (await kv.range_prefix(f"{NS}/journal/")).items}
    assert stored == {anchor_key(NS, "s-1")}
    assert [r.anchors_deleted for r in keeper.pruned[:5]] == [0, 0, 0, 1, 0]
    # Without its marker, the pruned head of the chain is damage: the check can fail.
    del store.objects[f"{PREFIX}/{pruned_marker_name('s-1')}"]
    cut = await read_journal_objects(store, PREFIX, max_bytes=1 << 20)
    assert any("are missing" in line for line in findings(cut)), findings(cut)[:3]
    print(
        f"\na day of journal: {written / 2**20:.1f} MiB written, largest local directory "
        f"{largest_local / 1024:.1f} KiB, {len(segments)} segments "
        f"({shipped / 2**20:.1f} MiB) left in the audit prefix"
    )


async def test_etcd_anchors_of_sweepers_long_gone_are_pruned(tmp_path: Path) -> None:
    """Anchors whose last record is older than the retention go, the others stay; an
    unreadable anchor is never deleted (verify reports it)."""
    clock = Clock()
    kv = MemoryKV()
    old = JournalAnchor("s-old", 3, "cd" * 32, "journal-s-old-000001.jsonl", T0 - 40 * 86400)
    new = JournalAnchor("s-new", 9, "ef" * 32, "journal-s-new-000002.jsonl", T0 - 86400)
    await kv.txn(
        [],
        [
            Put(anchor_key(NS, "s-old"), old.encode()),
            Put(anchor_key(NS, "s-new"), new.encode()),
            Put(anchor_key(NS, "s-bad"), b"garbage"),
        ],
    )
    journal = JournalWriter(
        tmp_path, "s-1", namespace=NS, bucket="b", root=LAYOUT.root, fsync=False, clock=clock
    )
    keeper = AnchorKeeper(
        journal,
        kv=kv,
        namespace=NS,
        objects=MemoryObjectStore(clock=clock),
        prefix=PREFIX,
        retention_s=30 * 86400,
        clock=clock,
    )
    await keeper.step()
    stored = {item.key for item in (await kv.range_prefix(f"{NS}/journal/")).items}
    assert stored == {anchor_key(NS, "s-new"), anchor_key(NS, "s-bad")}
    assert keeper.pruned[0].anchors_deleted == 1


class Corrupting(MemoryObjectStore):
    """A bucket that stores one byte less than it was given."""

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        return await super().put_object(key, body[:-1], if_absent=if_absent)


async def test_a_segment_whose_copy_differs_is_kept_locally(tmp_path: Path) -> None:
    """The uploaded copy is read back: a copy that differs leaves the local segment (and
    no marker), counted as a journal error; an identical one is deleted locally."""
    clock = Clock()
    metrics = SweeperMetrics()
    journal = JournalWriter(
        tmp_path,
        "s-1",
        namespace=NS,
        bucket="b",
        root=LAYOUT.root,
        metrics=metrics,
        fsync=False,
        clock=clock,
    )
    batch(journal, 1)
    journal.close()
    (segment,) = journal.closed_segments
    assert await ship_segments(journal, Corrupting(), PREFIX, keep_local=False) == 0
    assert segment.exists()
    assert not (tmp_path / pruned_marker_name("s-1")).exists()
    assert metrics.journal_errors._value.get() == 1
    assert await ship_segments(journal, MemoryObjectStore(), PREFIX, keep_local=False) == 1
    assert not segment.exists()
    assert journal.closed_segments == []
    marker = JournalAnchor.decode((tmp_path / pruned_marker_name("s-1")).read_bytes(), "m")
    assert marker.seq == 3  # header, before, after


@pytest.mark.integration
def test_gcd_journal_prune_removes_a_gone_sweepers_segments_from_the_bucket(
    s3_server: LocalS3,
    bucket: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gcd journal prune` against a real S3 server: every segment of a sweeper older than
    the retention goes, with its audit anchor; a segment younger stays."""

    async def ship() -> None:
        settings = S3Settings(bucket=bucket, endpoint_url=s3_server.endpoint_url)
        async with S3ObjectStore.open(settings) as objects:
            journal = JournalWriter(
                tmp_path, "s-old", namespace=None, bucket=bucket, root=LAYOUT.root, fsync=False
            )
            keeper = AnchorKeeper(
                journal, kv=None, namespace=None, objects=objects, prefix=PREFIX, keep_local=False
            )
            batch(journal, 1)
            journal.close()
            await keeper.close()

    asyncio.run(ship())
    capsys.readouterr()  # the shipping's log lines
    before = {k for k in s3_server.keys(bucket) if k.startswith(PREFIX)}
    assert {k.rsplit("/", 1)[-1] for k in before} == {
        "journal-s-old-000001.jsonl",
        "journal-s-old-000001.jsonl.idx",
        "anchor-s-old.json",
    }
    common = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--journal-prefix",
        PREFIX,
    ]
    assert main(["journal", "prune", *common, "--journal-retention", "30d", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["segments_kept"] == 1
    assert {k for k in s3_server.keys(bucket) if k.startswith(PREFIX)} == before
    assert main(["journal", "prune", *common, "--journal-retention", "1ms"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("journal prune: 1 segments deleted, 0 kept, 1 sweepers gone"), out
    assert not {k for k in s3_server.keys(bucket) if k.startswith(PREFIX)}
    assert main(["journal", "prune", *common]) == 2
    assert "needs --bucket B, --journal-prefix P and --journal-retention" in (
        capsys.readouterr().err
    )
    structlog.reset_defaults()
