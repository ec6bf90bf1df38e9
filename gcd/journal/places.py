"""The deletion journal read from both places a sweeper keeps it.

Design notes: docs/internals/sweep.md, `gcd.journal.places`.
"""

from __future__ import annotations

from pathlib import Path

from gcd.journal.records import JournalRead, Record, read_journal, read_journal_objects
from gcd.storage.objectstore import BucketStore
from l0gc.contract.journal_anchor import JournalAnchor

__all__ = ["merge_reads", "read_journal_places", "unread_shipped"]


def _segment(source: str) -> str:
    """The segment file of a record's source ("file:line")."""
    return source.rsplit(":", 1)[0]


def _name(source: str) -> str:
    """A segment's file name, the same in a directory and under the prefix."""
    return source.replace("\\", "/").rsplit("/", 1)[-1]


def _by_segment(read: JournalRead) -> dict[str, tuple[str, list[Record]]]:
    """Segment name -> (where it was read, its records in order)."""
    records: dict[str, list[Record]] = {source: [] for source in read.files}
    for record in read.records:
        records.setdefault(_segment(record.source), []).append(record)
    return {_name(source): (source, found) for source, found in records.items()}


def _earliest(*markers: dict[str, JournalAnchor]) -> dict[str, JournalAnchor]:
    earliest: dict[str, JournalAnchor] = {}
    for found in markers:
        for sweeper, anchor in found.items():
            if sweeper not in earliest or anchor.seq < earliest[sweeper].seq:
                earliest[sweeper] = anchor
    return earliest


def merge_reads(local: JournalRead, shipped: JournalRead) -> JournalRead:
    """One journal of the local segments and the shipped ones (see the module docstring)."""
    mine, theirs = _by_segment(local), _by_segment(shipped)
    merged = JournalRead(
        audit_anchors=dict(shipped.audit_anchors), pruned=_earliest(shipped.pruned, local.pruned)
    )
    for name in sorted(mine.keys() | theirs.keys()):
        source, records = theirs[name] if name in theirs else mine[name]
        if name in mine and name in theirs:
            other = mine[name]
            if [r.line for r in other[1]] != [r.line for r in records]:
                merged.damaged.append(
                    f"{source}: differs from the local copy {other[0]} (a segment never "
                    "changes once shipped, and was compared when it was): one of them was "
                    "altered; the shipped copy is read"
                )
        merged.files.append(source)
        merged.records.extend(records)
    kept = set(merged.files)
    for read in (local, shipped):
        read_files = set(read.files)
        for line in read.damaged:
            where = _segment(line.split(": ", 1)[0])
            if where in kept or where not in read_files:  # a chosen segment, or a marker
                merged.damaged.append(line)
        merged.torn.extend(torn for torn in read.torn if torn[0] in kept)
    return merged


async def read_journal_places(
    directory: str | None, objects: BucketStore | None, prefix: str | None, *, max_bytes: int
) -> JournalRead:
    """The journal under `directory` (comma-separated directories or files), under
    `prefix` of `objects` (an `ObjectStore`), or both merged; at least one is given."""
    local = None
    if directory is not None:
        local = read_journal([Path(part) for part in directory.split(",") if part])
    if prefix is None:
        assert local is not None, "give a journal directory or prefix"
        return local
    assert objects is not None, "a journal prefix is read from the store"
    shipped = await read_journal_objects(objects, prefix, max_bytes=max_bytes)
    return shipped if local is None else merge_reads(local, shipped)


def unread_shipped(read: JournalRead) -> str | None:
    """For a journal read from a directory alone: a line saying that segments were
    shipped and deleted there (its pruned markers), so `--journal-prefix` is missing."""
    if not read.pruned:
        return None
    sweeper, anchor = min(read.pruned.items())
    more = f" (and {len(read.pruned) - 1} more sweepers)" if len(read.pruned) > 1 else ""
    return (
        f"the journal directory's pruned marker says sweeper {sweeper}'s records up to "
        f"{anchor.seq}{more} were shipped and deleted here: give --journal-prefix (the "
        "audit prefix they were shipped to) to read them too"
    )
