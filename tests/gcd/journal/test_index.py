"""The journal segment index and the search `gcd explain` makes with it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gcd.journal.check import FindingKind, check_records
from gcd.journal.index import INDEX_VERSION, KeyHashes, decode_index, index_name
from gcd.journal.records import JournalWriter, read_journal
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
    """Epoch and key range of every key named; each key leads to its before and after
    lines (a request's range may lead to more lines, never to fewer)."""
    journal = writer(tmp_path)
    batch(journal, [key(3, "a"), key(5, "b")])
    batch(journal, [key(4, "c")])
    journal.close()
    (segment,) = journal.closed_segments
    raw = segment.with_name(index_name(segment.name)).read_bytes()
    assert raw.startswith(b'{"v":%d,' % INDEX_VERSION)
    index = decode_index(raw, "t")
    assert (index.segment, index.size) == (segment.name, segment.stat().st_size)
    assert (index.min_epoch, index.max_epoch) == (3, 5)
    assert (index.first_key, index.last_key) == (key(3, "a"), key(5, "b"))
    lines = segment.read_bytes()
    for name, epoch in ((key(3, "a"), 3), (key(4, "c"), 4), (key(5, "b"), 5)):
        offsets = index.offsets(name, epoch)
        naming = [o for o in offsets if name.encode() in lines[o : lines.index(b"\n", o)]]
        assert len(naming) == 2  # before and after
        assert all(o == 0 or lines[o - 1 : o] == b"\n" for o in offsets)
    assert len(index.offsets(key(4, "c"), 4)) == 4  # in the first request's range too
    assert len(index.offsets(key(4, "c"))) == 4
    assert index.offsets(key(3, "a"), 6) == []  # not the epoch of any request's keys
    assert index.offsets(key(6, "none")) == []
    assert not index.may_hold(key(6, "b"), 6)
    assert not index.may_hold(key(3, "0"), 3)  # below the first key
    assert index.may_hold(key(4, "zz"), 4)


def test_every_key_of_a_1000_key_request_is_found_and_no_other(tmp_path: Path) -> None:
    """Through a version 2 index, explain's search finds every key of a 1,000-key
    request with its outcome (one of them failed), reads only that request's two lines
    for them, and reports none of the keys around and between them."""
    journal = writer(tmp_path)
    batch(journal, [key(1, f"before-{i}") for i in range(10)])
    keys = [key(2, f"n{i:04d}-é") for i in range(0, 2000, 2)]  # the odd ones: never sent
    tried = BatchAttempt(DeleteBasis(9, 10, 40), tuple(keys), (2,) * 1000, 0, 1, 5000)
    journal.before(tried)
    journal.after(BatchOutcome(tried, deleted=tuple(keys[1:]), failed=((keys[0], "SlowDown"),)))
    batch(journal, [key(3, f"after-{i}") for i in range(10)])
    journal.close()
    between = [key(2, f"n{i:04d}-é") for i in range(1, 2000, 2)]
    outside = [key(2, "a"), key(2, "z"), key(1, "n0002-é"), key(9, "n0002-é")]
    wanted = dict.fromkeys(keys + between + outside, 2) | {key(1, "n0002-é"): 1}
    hits = asyncio.run(search_journal(LocalSegments([tmp_path]), wanted))
    assert hits.indexed == 1
    assert not hits.unindexed
    assert not hits.damaged
    assert sorted(hits.deletions) == sorted(keys)
    assert hits.deletions[keys[0]][0].outcome == "failed (SlowDown)"
    assert {hits.deletions[k][0].outcome for k in keys[1:]} == {"deleted"}
    assert hits.lines_read == 2


def test_a_request_split_by_a_rotation_is_found_in_both_segments(tmp_path: Path) -> None:
    """A before record closing one segment and its after opening the next (and requests
    in flight together): each segment's index leads to the line it holds."""
    journal = writer(tmp_path, max_bytes=1024)
    first = [key(4, f"r1-{i:02d}") for i in range(30)]  # > 1024 bytes: rotates after it
    tried = BatchAttempt(DeleteBasis(9, 10, 40), tuple(first), (4,) * 30, 0, 1, 7001)
    journal.before(tried)
    journal.after(BatchOutcome(tried, deleted=tuple(first)))
    second, third = [key(5, "r2")], [key(6, "r3")]
    two = BatchAttempt(DeleteBasis(9, 10, 40), tuple(second), (5,), 0, 2, 7002)
    three = BatchAttempt(DeleteBasis(9, 10, 40), tuple(third), (6,), 0, 3, 7003)
    journal.before(two)
    journal.before(three)
    journal.after(BatchOutcome(three, failed=((third[0], "AccessDenied"),)))
    journal.after(BatchOutcome(two, deleted=tuple(second)))
    journal.close()
    assert len(journal.closed_segments) >= 2
    wanted = {first[0]: 4, first[-1]: 4, second[0]: 5, third[0]: 6}
    hits = asyncio.run(search_journal(LocalSegments([tmp_path]), wanted))
    assert not hits.unindexed
    assert hits.deletions[first[0]][0].outcome == "deleted"
    assert hits.deletions[first[-1]][0].outcome == "deleted"
    assert hits.deletions[second[0]][0].outcome == "deleted"
    assert hits.deletions[third[0]][0].outcome == "failed (AccessDenied)"


def test_a_version_1_index_written_by_an_earlier_l0gc_still_finds_keys(tmp_path: Path) -> None:
    """The segment and index in data/index_v1 (written at b52ad44, before issue 56) decode,
    lead to exactly the lines naming a key, and explain finds every key through them;
    the records this version writes are the same bytes."""
    source = Path(__file__).parent / "data" / "index_v1"
    for path in source.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    segment = tmp_path / "journal-s-1-000001.jsonl"
    index = decode_index(segment.with_name(index_name(segment.name)).read_bytes(), "t")
    assert isinstance(index.entries, KeyHashes)
    assert (index.min_epoch, index.max_epoch) == (10, 12)
    named = [LAYOUT.format(7, 10 + b, f"k{b}-{i:02d}") for b in range(3) for i in range(20)]
    lines = segment.read_bytes()
    for name in named:
        offsets = index.offsets(name)
        assert len(offsets) == 2
        assert all(name.encode() in lines[o : lines.index(b"\n", o)] for o in offsets)
    wanted = {name: LAYOUT.parse(name).epoch for name in named}  # type: ignore[union-attr]
    wanted[LAYOUT.format(7, 11, "k1-05x")] = 11
    hits = asyncio.run(search_journal(LocalSegments([tmp_path]), wanted))
    assert hits.indexed == 1
    assert not hits.unindexed
    assert sorted(hits.deletions) == sorted(named)
    assert hits.deletions[named[19]][0].outcome == "failed (AccessDenied)"
    assert hits.deletions[named[0]][0].outcome == "deleted"
    assert hits.lines_read == 6
    again = writer(tmp_path / "now")
    for b in range(3):
        keys = tuple(named[b * 20 : b * 20 + 20])
        tried = BatchAttempt(DeleteBasis(20, 21, 40), keys, (10 + b,) * 20, 0, b + 1, b + 1)
        again.before(tried)
        again.after(BatchOutcome(tried, deleted=keys[:-1], failed=((keys[-1], "AccessDenied"),)))
    again.close()
    (written,) = again.closed_segments
    assert written.read_bytes() == lines


def _v2(entries: list[list[object]], size: int = 100, count: int | None = None) -> bytes:
    header = {
        "v": 2,
        "segment": "s",
        "size": size,
        "min_epoch": 1,
        "max_epoch": 1,
        "first_key": "a",
        "last_key": "z",
        "entries": len(entries) if count is None else count,
    }
    flat = [value for entry in entries for value in entry]
    return json.dumps(header).encode() + b"\n" + json.dumps(flat).encode()


def test_a_corrupt_or_short_index_is_refused_and_its_segment_read_whole(
    tmp_path: Path,
) -> None:
    """Truncated, miscounted, out of shape or order, pointing past the segment, or of an
    unknown version: refused; the search then reads the segment in full."""
    good = [[0, 10, 1, 1, "a", "b"], [20, None, None, None, "c", "z"]]
    assert decode_index(_v2(good), "t").offsets("b", 1) == [0, 10]
    bad = {
        "truncated": _v2(good)[:-1],
        "miscounted": _v2(good, count=3),
        "past the segment": _v2([[100, None, 1, 1, "a", "b"]]),
        "after past it": _v2([[0, 100, 1, 1, "a", "b"]]),
        "range upside down": _v2([[0, None, 1, 1, "b", "a"]]),
        "out of order": _v2(list(reversed(good))),
        "a key not a string": _v2([[0, None, 1, 1, 5, "b"]]),
        "an epoch not an integer": _v2([[0, None, 1.5, 2, "a", "b"]]),
        "epochs upside down": _v2([[0, None, 3, 2, "a", "b"]]),
        "nested": _v2([[0, None, 1, 1, ["a"], "b"]]),
        "unknown version": _v2(good).replace(b'"v": 2', b'"v": 3'),
        "no header": b"[]",
    }
    for why, raw in bad.items():
        with pytest.raises(InvalidRecord):
            decode_index(raw, why)
    v1 = (Path(__file__).parent / "data" / "index_v1" / "journal-s-1-000001.jsonl.idx").read_bytes()
    with pytest.raises(InvalidRecord, match="entries"):
        decode_index(v1[:-1], "t")
    journal = writer(tmp_path)
    batch(journal, [key(3, "a"), key(5, "b")])
    journal.close()
    (segment,) = journal.closed_segments
    index = segment.with_name(index_name(segment.name))
    index.write_bytes(index.read_bytes()[:-2])
    hits = asyncio.run(search_journal(LocalSegments([tmp_path]), {key(3, "a"): 3}))
    assert hits.unindexed == [segment.name]
    assert hits.deletions[key(3, "a")][0].outcome == "deleted"


def test_verify_passes_on_segments_of_this_version_and_sees_a_flipped_byte(
    tmp_path: Path,
) -> None:
    """A journal of 1,000-key requests verifies clean; one byte of a key flipped in a
    before record is damage (its digest and the chain no longer match)."""
    journal = writer(tmp_path)
    for epoch in (2, 3):
        batch(journal, [key(epoch, f"k{i:04d}") for i in range(1000)])
    journal.close()
    assert check_records(read_journal([tmp_path])).findings == []
    (segment,) = journal.closed_segments
    raw = bytearray(segment.read_bytes())
    at = raw.index(b"k0500")
    raw[at] = ord("K")
    segment.write_bytes(bytes(raw))
    findings = check_records(read_journal([tmp_path])).findings
    assert FindingKind.DAMAGE in {f.kind for f in findings}
    assert any("chain is broken" in f.message for f in findings)
    assert any("digest" in f.message for f in findings)


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
