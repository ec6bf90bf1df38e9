"""The journal segment index and the search `gcd explain` makes with it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gcd.journal.index import IndexBuilder, decode_index, index_name
from gcd.journal.records import JournalWriter
from gcd.journal.search import LocalSegments, search_journal
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis
from gcd.rules.layout import KeyLayout
from l0gc.errors import InvalidRecord

LAYOUT = KeyLayout.default("l0/data")
_requests = iter(range(1, 1_000_000))


def key(epoch: int, name: str = "x") -> str:
    """A layout key."""
    return LAYOUT.format(7, epoch, name)


def writer(directory: Path, **options: object) -> JournalWriter:
    """A writer with a fixed clock and no fsync."""
    clock = iter(float(t) for t in range(1000, 100000))
    return JournalWriter(
        directory,
        "s-1",
        namespace="/ns",
        bucket="b",
        root="l0/data",
        clock=lambda: next(clock),
        fsync=False,
        **options,
    )  # type: ignore[arg-type]


def batch(journal: JournalWriter, keys: list[str], deleted: bool = True) -> None:
    """One request: its before record and an after record (deleted, or AccessDenied)."""
    epochs = tuple(LAYOUT.parse(k).epoch for k in keys)  # type: ignore[union-attr]
    tried = BatchAttempt(DeleteBasis(9, 10, 40), tuple(keys), epochs, 0, 1, next(_requests))
    journal.before(tried)
    if deleted:
        journal.after(BatchOutcome(tried, deleted=tuple(keys)))
    else:
        journal.after(BatchOutcome(tried, failed=tuple((k, "AccessDenied") for k in keys)))


def test_a_closed_segment_has_an_index_of_its_ranges_and_lines(tmp_path: Path) -> None:
    """Epoch and key range of every key named; each key points at its before and after."""
    journal = writer(tmp_path)
    batch(journal, [key(3, "a"), key(5, "b")])
    batch(journal, [key(4, "c")])
    journal.close()
    (segment,) = journal.closed_segments
    index = decode_index(segment.with_name(index_name(segment.name)).read_bytes(), "t")
    assert (index.segment, index.size) == (segment.name, segment.stat().st_size)
    assert (index.min_epoch, index.max_epoch) == (3, 5)
    assert (index.first_key, index.last_key) == (key(3, "a"), key(5, "b"))
    lines = segment.read_bytes()
    for name in (key(3, "a"), key(4, "c")):
        offsets = index.offsets(name)
        assert len(offsets) == 2  # before and after
        assert all(name.encode() in lines[o : lines.index(b"\n", o)] for o in offsets)
    assert index.offsets(key(6, "none")) == []
    assert not index.may_hold(key(6, "b"), 6)
    assert not index.may_hold(key(3, "0"), 3)  # below the first key
    assert index.may_hold(key(4, "zz"), 4)


def test_an_index_that_does_not_fit_is_refused() -> None:
    """Offsets past 4 GiB give no index; a truncated index does not decode."""
    builder = IndexBuilder()
    builder.add(1 << 32, ["k"], [1])
    assert builder.encode("s", 10) is None
    builder = IndexBuilder()
    builder.add(0, ["k"], [1])
    raw = builder.encode("s", 10)
    assert raw is not None
    with pytest.raises(InvalidRecord, match="entries"):
        decode_index(raw[:-1], "t")


def test_search_reads_only_lines_naming_the_keys_and_unindexed_segments_whole(
    tmp_path: Path,
) -> None:
    """Two closed segments and one being written: the indexed ones are read by line, the
    open one in full; a key is found with its outcome wherever it is."""
    journal = writer(tmp_path, max_bytes=1024)
    for epoch in range(1, 30):
        batch(journal, [key(epoch, f"k{epoch}")], deleted=epoch != 7)
    assert len(journal.closed_segments) >= 2
    stale = journal.closed_segments[0]
    with stale.open("ab") as file:
        file.write(b"\n")  # its index no longer matches: read in full
    wanted = {key(e, f"k{e}"): e for e in (2, 7, 28)} | {key(5, "never"): 5}
    hits = asyncio.run(search_journal(LocalSegments([tmp_path]), wanted))
    assert hits.deletions[key(2, "k2")][0].outcome == "deleted"
    assert hits.deletions[key(7, "k7")][0].outcome == "failed (AccessDenied)"
    assert hits.deletions[key(28, "k28")][0].outcome == "deleted"
    assert key(5, "never") not in hits.deletions
    assert stale.name in hits.unindexed
    assert journal.current_segment is not None
    assert journal.current_segment.name in hits.unindexed
    indexed = hits.segments - len(hits.unindexed)
    assert indexed == hits.indexed >= 1
    assert len(hits.searched[key(5, "never")]) < hits.segments  # ranges ruled some out
    journal.close()
