"""The undo window's marker ledger read from a bounded part of the shipped journal:
only recent segments at start, the rest once when a round meets an older unknown
marker (`gcd.cli.undo`, `UndoKeeper.older_marker`)."""

from __future__ import annotations

from pathlib import Path

from gcd.journal.records import JournalRead, JournalWriter, read_journal, read_journal_objects
from gcd.rules.admission import SafetyGate
from gcd.rules.layout import KeyLayout
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from gcd.undo.window import UndoKeeper
from l0gc.errors import StorageError
from l0lab.testing.memory import MemoryObjectStore
from l0lab.testing.versioned import VersionedMemoryStore

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def sweeper(
    bucket: VersionedMemoryStore, keeper: UndoKeeper, clock: Clock, journal: Path | None = None
) -> Sweeper:
    sinks = (
        []
        if journal is None
        else [
            JournalWriter(
                journal, "s-1", namespace="/ns", bucket="b", root=ROOT, fsync=False, clock=clock
            )
        ]
    )
    config = RoundConfig(layout=LAYOUT, grace_s=0.0, undo_window_s=HOUR)
    return Sweeper(bucket, config, clock=clock, undo=keeper, sinks=sinks)


async def test_an_unknown_marker_older_than_the_segments_read_loads_the_rest(
    tmp_path: Path,
) -> None:
    """A sweeper that read only recent segments meets l0gc's older marker: it keeps the
    key that round (foreign to it), reads every segment, and reclaims the next round;
    one that claims a full read keeps such a marker forever (it may be a writer's)."""
    clock = Clock()
    bucket = VersionedMemoryStore(clock)
    key = LAYOUT.format(7, 3, "a.log")
    bucket.put(key, b"bytes")
    clock.now += 10
    first = sweeper(bucket, UndoKeeper(HOUR, clock=clock), clock, tmp_path)
    assert (await run_round(first, SafetyGate(), None, override=5)).summary.markers_written == 1
    for sink in first.deleter.sinks:
        getattr(sink, "close", lambda: None)()
    clock.now += 2 * HOUR
    loads: list[int] = []

    async def rest() -> JournalRead:
        loads.append(1)
        return read_journal([tmp_path])

    bounded = UndoKeeper(HOUR, clock=clock, ledger_from=clock.now - 60, load_rest=rest)
    later = sweeper(bucket, bounded, clock)
    one = await run_round(later, SafetyGate(), None, override=5)
    assert (one.summary.undo or {})["foreign_markers"] == 1
    assert len(bucket.versions[key]) == 2
    assert loads == []
    two = await run_round(later, SafetyGate(), None, override=5)
    assert two.summary.versions_reclaimed == 2
    assert key not in bucket.versions
    assert loads == [1]

    bucket.put(key, b"again")
    clock.now += 10
    await run_round(
        sweeper(bucket, UndoKeeper(HOUR, clock=clock), clock), SafetyGate(), None, override=5
    )
    clock.now += 2 * HOUR
    full = sweeper(bucket, UndoKeeper(HOUR, clock=clock), clock)  # its markers not journaled
    for _ in range(2):
        await run_round(full, SafetyGate(), None, override=5)
    assert len(bucket.versions[key]) == 2  # unknown: never touched


async def test_only_segments_shipped_since_the_bound_are_read(tmp_path: Path) -> None:
    """`newer_than` skips segments shipped (LastModified) before it; anchors are kept."""
    clock = Clock()
    objects = MemoryObjectStore(clock=clock)
    await objects.put_object("audit/journal-old-000001.jsonl", b"", if_absent=True)
    clock.now += HOUR
    await objects.put_object("audit/journal-new-000001.jsonl", b"", if_absent=True)
    seen: list[str] = []
    real_get = objects.get_object

    async def get(key: str, *, max_bytes: int) -> bytes | None:
        seen.append(key)
        return await real_get(key, max_bytes=max_bytes)

    objects.get_object = get  # type: ignore[method-assign]
    await read_journal_objects(objects, "audit", max_bytes=1 << 20, newer_than=clock.now - 60)
    assert seen == ["audit/journal-new-000001.jsonl"]
    seen.clear()
    await read_journal_objects(objects, "audit", max_bytes=1 << 20)
    assert sorted(seen) == ["audit/journal-new-000001.jsonl", "audit/journal-old-000001.jsonl"]


async def test_a_retention_that_cannot_be_read_is_no_retention() -> None:
    """A store whose soft delete setting cannot be read (the request fails) is taken for
    one without: None, never an exception out of the round, and not relied on."""

    class Unreachable:
        async def soft_delete_retention(self) -> float | None:
            raise StorageError(
                "buckets.get could not reach the endpoint", code="ConnectionError", retryable=True
            )

        async def undelete(self, key: str, generation: str | None) -> str:
            raise AssertionError("not called")

    keeper = UndoKeeper(HOUR, clock=Clock())
    assert await keeper.retention(Unreachable()) is None
    assert not keeper.covered(None)


async def test_every_listed_version_is_counted_and_the_text_says_what_eligible_means() -> None:
    """Issue 55: versions planned with their key were never counted as listed, so a round
    said "listed 0 objects; eligible 20". Now: 40 versions listed, 20 keys to hide."""
    from gcd.cli.sweep import text_summary  # noqa: PLC0415 - the command's text

    clock = Clock()
    bucket = VersionedMemoryStore(clock)
    for index in range(20):
        key = LAYOUT.format(index % 4, 3, f"o{index}.log")
        bucket.put(key, b"old")
        bucket.put(key, b"new")
    clock.now += 10
    summary = (
        await run_round(
            sweeper(bucket, UndoKeeper(HOUR, clock=clock), clock), SafetyGate(), None, override=5
        )
    ).summary
    assert (summary.listed, summary.eligible, summary.markers_written) == (40, 20, 20)
    text = text_summary(summary)
    assert "listed     40 versions and delete markers; eligible 20 (each a key to hide" in text
    assert "hid 20 objects behind delete markers" in text
