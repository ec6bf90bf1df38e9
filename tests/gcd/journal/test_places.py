"""The journal read from both places (issue 55): the local segments and the shipped ones
merged, each segment once, the chain unbroken across them, a copy that differs named."""

from __future__ import annotations

from pathlib import Path

from gcd.journal.check import FindingKind, check_records, find_key
from gcd.journal.places import merge_reads, read_journal_places, unread_shipped
from gcd.journal.records import JournalWriter, read_journal, read_journal_objects, ship_segments
from l0lab.testing.memory import MemoryObjectStore
from tests.gcd.journal.test_records import key
from tests.gcd.journal.test_retention import LAYOUT as ROOT_LAYOUT
from tests.gcd.journal.test_retention import NS, PREFIX, Clock, batch

MAX = 1 << 30


def writer(directory: Path, clock: Clock, max_bytes: int = 1024) -> JournalWriter:
    """By default segments of about one request each (rotation at 1 KiB)."""
    return JournalWriter(
        directory,
        "s-1",
        namespace=NS,
        bucket="b",
        root=ROOT_LAYOUT.root,
        max_bytes=max_bytes,
        fsync=False,
        clock=clock,
    )


def damage(read: object) -> list[str]:
    report = check_records(read)  # type: ignore[arg-type]
    bad = (FindingKind.DAMAGE, FindingKind.VIOLATION)
    return [f"{f.source}: {f.message}" for f in report.findings if f.kind in bad]


async def test_shipped_and_deleted_segments_and_the_open_one_make_one_chain(
    tmp_path: Path,
) -> None:
    """Two segments shipped and deleted locally (the chart's way), a third still here:
    each place alone holds part of the journal; merged, every record is there once, the
    chain is unbroken from record 1, and a key deleted in the first segment is found."""
    clock = Clock()
    objects = MemoryObjectStore()
    journal = writer(tmp_path, clock)
    for number in (1, 2, 3):
        batch(journal, number)
    shipped_segments = list(journal.closed_segments)
    assert len(shipped_segments) >= 2
    assert await ship_segments(journal, objects, PREFIX, keep_local=False) == len(shipped_segments)
    batch(journal, 4)  # into the segment still open here
    local = read_journal([tmp_path])
    shipped = await read_journal_objects(objects, PREFIX, max_bytes=MAX)
    assert local.records
    assert shipped.records
    assert "give --journal-prefix" in str(unread_shipped(local))
    merged = merge_reads(local, shipped)
    seqs = [record.doc["seq"] for record in merged.records]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) == len(local.records) + len(shipped.records)
    assert damage(merged) == []
    first = key(3, f"k1-0000-{'x' * 24}")
    assert find_key(merged, first)
    assert not find_key(local, first)
    assert await read_journal_places(str(tmp_path), objects, PREFIX, max_bytes=MAX) == merged
    journal.close()


async def test_a_segment_in_both_places_is_read_once(tmp_path: Path) -> None:
    """Kept locally after shipping (`--journal-keep-local`): the same segment in both
    places is read once, so no record repeats (a repeat would read as a broken chain)."""
    objects = MemoryObjectStore()
    journal = writer(tmp_path, Clock())
    batch(journal, 1)
    batch(journal, 2)
    journal.close()
    assert await ship_segments(journal, objects, PREFIX, keep_local=True) >= 2
    local = read_journal([tmp_path])
    merged = merge_reads(local, await read_journal_objects(objects, PREFIX, max_bytes=MAX))
    assert [r.line for r in merged.records] == [r.line for r in local.records]
    assert damage(merged) == []
    assert unread_shipped(local) is None


async def test_a_local_copy_altered_after_shipping_is_named_with_both_places(
    tmp_path: Path,
) -> None:
    """A segment never changes once shipped: a local copy that differs from the shipped
    one is damage naming both (so `gcd restore` distrusts the sweeper), and the shipped
    copy is the one read."""
    objects = MemoryObjectStore()
    journal = writer(tmp_path, Clock(), max_bytes=1 << 20)
    batch(journal, 1)
    journal.close()
    assert await ship_segments(journal, objects, PREFIX, keep_local=True) == 1
    (segment,) = tmp_path.glob("journal-*.jsonl")
    segment.write_bytes(segment.read_bytes().replace(b"k1-0000", b"k9-0000"))
    shipped = await read_journal_objects(objects, PREFIX, max_bytes=MAX)
    merged = merge_reads(read_journal([tmp_path]), shipped)
    assert [r.line for r in merged.records] == [r.line for r in shipped.records]
    found = damage(merged)
    assert any(f"differs from the local copy {segment}" in line for line in found), found
