"""Find the journal records that name given keys, reading only the segments that can.

Design notes: docs/internals/sweep.md, `gcd.journal.search`.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gcd.journal.check import find_key
from gcd.journal.index import INDEX_SUFFIX, SegmentIndex, decode_index, index_name
from gcd.journal.records import MAX_LINE_BYTES, JournalRead, Record, segment_files
from gcd.observe.report import iso_utc
from gcd.rules.explain import JournaledRequest
from gcd.storage.objectstore import BucketStore
from l0gc import strictjson
from l0gc.errors import ConfigError, InvalidJson, InvalidRecord

__all__ = [
    "BothSegments",
    "JournalHits",
    "LocalSegments",
    "PrefixSegments",
    "SegmentSource",
    "search_journal",
]

_MAX_DEPTH = 3
_MAX_SEGMENT = 1 << 30


class SegmentSource(Protocol):
    """Where segments are read from."""

    def describe(self) -> str:
        """For messages: the directory or prefix."""
        ...

    async def names(self) -> list[str]:
        """The segment names, in order."""
        ...

    async def index(self, name: str) -> bytes | None:
        """The segment's index bytes, None when it has none."""
        ...

    async def size(self, name: str) -> int:
        """The segment's size in bytes."""
        ...

    async def lines(self, name: str, offsets: Sequence[int]) -> list[bytes]:
        """The lines starting at `offsets`."""
        ...

    async def whole(self, name: str) -> bytes:
        """Every byte of the segment."""
        ...


class LocalSegments:
    """Segments in local directories (or files)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._files = {path.name: path for path in segment_files(paths)}
        self._where = ",".join(str(path) for path in paths)

    def describe(self) -> str:
        """The directories' names."""
        return self._where

    async def names(self) -> list[str]:
        """See `SegmentSource`."""
        return list(self._files)

    async def index(self, name: str) -> bytes | None:
        """See `SegmentSource`."""
        path = self._files[name]
        try:
            return path.with_name(index_name(path.name)).read_bytes()
        except OSError:
            return None

    async def size(self, name: str) -> int:
        """See `SegmentSource`."""
        return self._files[name].stat().st_size

    async def lines(self, name: str, offsets: Sequence[int]) -> list[bytes]:
        """See `SegmentSource`."""
        found: list[bytes] = []
        with self._files[name].open("rb") as file:
            for offset in offsets:
                file.seek(offset)
                found.append(file.readline(MAX_LINE_BYTES + 1))
        return found

    async def whole(self, name: str) -> bytes:
        """See `SegmentSource`."""
        try:
            return self._files[name].read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"journal segment {self._files[name]} cannot be read ({exc.strerror})"
            ) from exc


class PrefixSegments:
    """Segments shipped under an audit prefix of the bucket (an `ObjectStore` with
    `get_object`)."""

    def __init__(self, objects: BucketStore, prefix: str) -> None:
        self._objects = objects
        self._prefix = prefix.strip("/") + "/"
        self._sizes: dict[str, int] = {}
        self._indexes: set[str] = set()
        self._cache: dict[str, bytes] = {}

    def describe(self) -> str:
        """The prefix."""
        return self._prefix

    async def names(self) -> list[str]:
        """See `SegmentSource`: one listing of the prefix."""
        token: str | None = None
        while True:
            page = await self._objects.list_page(self._prefix, continuation_token=token)
            for info in page.objects:
                name = info.key[len(self._prefix) :]
                if name.endswith(INDEX_SUFFIX):
                    self._indexes.add(name[: -len(INDEX_SUFFIX)])
                elif name.startswith("journal-") and name.endswith(".jsonl"):
                    self._sizes[name] = info.size
            token = page.next_token
            if token is None:
                return sorted(self._sizes)

    async def index(self, name: str) -> bytes | None:
        """See `SegmentSource`."""
        if name not in self._indexes:
            return None
        body: bytes | None = await self._objects.get_object(
            self._prefix + index_name(name), max_bytes=_MAX_SEGMENT
        )
        return body

    async def size(self, name: str) -> int:
        """See `SegmentSource`."""
        return self._sizes[name]

    async def lines(self, name: str, offsets: Sequence[int]) -> list[bytes]:
        """See `SegmentSource`: the segment is fetched once and cut."""
        body = await self.whole(name)
        found: list[bytes] = []
        for offset in offsets:
            end = body.find(b"\n", offset)
            found.append(body[offset : len(body) if end < 0 else end])
        return found

    async def whole(self, name: str) -> bytes:
        """See `SegmentSource`."""
        if name not in self._cache:
            body = await self._objects.get_object(self._prefix + name, max_bytes=_MAX_SEGMENT)
            self._cache[name] = b"" if body is None else body
        return self._cache[name]


class BothSegments:
    """The local segments and the shipped ones, each name once (`--journal-dir` and
    `--journal-prefix` together: a sweeper that ships deletes its local copies, so
    neither place alone holds its journal; `gcd.journal.places`). A segment held
    in both is read locally: it is the same bytes, compared when it was shipped."""

    def __init__(self, local: LocalSegments, shipped: PrefixSegments) -> None:
        self._local = local
        self._shipped = shipped
        self._local_names: set[str] = set()

    def describe(self) -> str:
        """Both places."""
        return f"{self._local.describe()} and {self._shipped.describe()}"

    async def names(self) -> list[str]:
        """See `SegmentSource`: the union, in name order (each sweeper's in sequence)."""
        local = await self._local.names()
        self._local_names = set(local)
        return sorted(self._local_names | set(await self._shipped.names()))

    def _at(self, name: str) -> SegmentSource:
        return self._local if name in self._local_names else self._shipped

    async def index(self, name: str) -> bytes | None:
        """See `SegmentSource`."""
        return await self._at(name).index(name)

    async def size(self, name: str) -> int:
        """See `SegmentSource`."""
        return await self._at(name).size(name)

    async def lines(self, name: str, offsets: Sequence[int]) -> list[bytes]:
        """See `SegmentSource`."""
        return await self._at(name).lines(name, offsets)

    async def whole(self, name: str) -> bytes:
        """See `SegmentSource`."""
        return await self._at(name).whole(name)


@dataclass(slots=True)
class JournalHits:
    """What the search found: each key's journaled requests, and where it looked."""

    deletions: dict[str, list[JournaledRequest]] = field(default_factory=dict)
    searched: dict[str, list[str]] = field(default_factory=dict)
    """Per key: the segments that could hold it and were read for it."""
    segments: int = 0
    indexed: int = 0
    unindexed: list[str] = field(default_factory=list)
    """Segments read in full (no usable index)."""
    lines_read: int = 0
    damaged: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """JSON form of where the search looked."""
        return {
            "segments": self.segments,
            "indexed": self.indexed,
            "read_in_full": list(self.unindexed),
            "lines_read": self.lines_read,
            "damaged": self.damaged[:20],
        }


def _decode(line: bytes, source: str, hits: JournalHits) -> Record | None:
    line = line.rstrip(b"\n")
    if not line.strip():
        return None
    try:
        doc = strictjson.loads(
            line, what="journal record", max_bytes=MAX_LINE_BYTES, max_depth=_MAX_DEPTH
        )
    except InvalidJson as exc:
        hits.damaged.append(f"{source}: {exc}")
        return None
    if not isinstance(doc, dict) or doc.get("type") not in {"before", "after"}:
        return None
    return Record(doc, line, source)


def _names(record: Record) -> set[str]:
    doc = record.doc
    if record.kind == "before":
        return {k for k in doc.get("keys") or () if isinstance(k, str)}
    named = {k for k in doc.get("deleted") or () if isinstance(k, str)}
    named |= {
        p[0] for p in doc.get("failed") or () if isinstance(p, list) and p and isinstance(p[0], str)
    }
    return named | {k for k in doc.get("unanswered") or () if isinstance(k, str)}


async def search_journal(source: SegmentSource, wanted: Mapping[str, int | None]) -> JournalHits:
    """The journaled requests of every key in `wanted` (key -> its epoch, when known)."""
    hits = JournalHits()
    found: dict[str, list[Record]] = {}
    by_epoch = sorted((epoch, key) for key, epoch in wanted.items() if epoch is not None)
    epochs = [epoch for epoch, _ in by_epoch]
    no_epoch = [key for key, epoch in wanted.items() if epoch is None]
    names = await source.names()
    hits.segments = len(names)
    for name in names:
        index = await _usable_index(source, name)
        if index is None:
            hits.unindexed.append(name)
            body = await source.whole(name)
            for number, line in enumerate(body.split(b"\n"), start=1):
                record = _decode(line, f"{name}:{number}", hits)
                if record is not None:
                    hits.lines_read += 1
                    for key in _names(record) & wanted.keys():
                        found.setdefault(key, []).append(record)
            for key in wanted:
                hits.searched.setdefault(key, []).append(name)
            continue
        hits.indexed += 1
        offsets: dict[int, list[str]] = {}
        for key, epoch in _candidates(index, by_epoch, epochs, no_epoch):
            if not index.may_hold(key, epoch):
                continue
            hits.searched.setdefault(key, []).append(name)
            for offset in index.offsets(key, epoch):
                offsets.setdefault(offset, []).append(key)
        if not offsets:
            continue
        ordered = sorted(offsets)
        for offset, line in zip(ordered, await source.lines(name, ordered), strict=True):
            record = _decode(line, f"{name}@{offset}", hits)
            hits.lines_read += 1
            if record is None:
                continue
            for key in _names(record).intersection(offsets[offset]):
                found.setdefault(key, []).append(record)
        await asyncio.sleep(0)  # a long search lets the daemon's loop serve others
    for key, records in found.items():
        hits.deletions[key] = _deletions(key, records)
    return hits


def _candidates(
    index: SegmentIndex, by_epoch: list[tuple[int, str]], epochs: list[int], no_epoch: list[str]
) -> Iterator[tuple[str, int | None]]:
    """The wanted keys whose epoch lies in the segment's range (bisected: a journal of
    hundreds of segments is not scanned key by key), and those without an epoch."""
    if index.min_epoch is None or index.max_epoch is None:
        chosen = by_epoch
    else:
        start = bisect.bisect_left(epochs, index.min_epoch)
        chosen = by_epoch[start : bisect.bisect_right(epochs, index.max_epoch, lo=start)]
    for epoch, key in chosen:
        yield key, epoch
    for key in no_epoch:
        yield key, None


async def _usable_index(source: SegmentSource, name: str) -> SegmentIndex | None:
    raw = await source.index(name)
    if raw is None:
        return None
    try:
        index = decode_index(raw, index_name(name))
    except InvalidRecord:
        return None
    if index.segment != name or index.size != await source.size(name):
        return None  # stale: the segment is not the one indexed
    return index


def _deletions(key: str, records: list[Record]) -> list[JournaledRequest]:
    """The requests that named `key`, told as `gcd journal show` tells them."""
    unique = list({(r.sweeper, r.kind, r.doc.get("seq")): r for r in records}.values())
    read = JournalRead(records=unique)
    befores = {
        (r.sweeper, r.doc.get("request"), r.doc.get("attempt")): r
        for r in unique
        if r.kind == "before"
    }
    afters = {(r.sweeper, r.doc.get("request")): r for r in unique if r.kind == "after"}
    by_source = {r.source: r for r in befores.values()}
    stories = []
    for story in find_key(read, key):
        before = by_source.get(story.source)
        request = None if before is None else before.doc.get("request")
        after = afters.get((story.sweeper, request))
        pinning = tuple(
            (str(p[0]), int(p[1]))
            for p in story.pinning
            if isinstance(p, list) and len(p) == 2 and type(p[1]) is int
        )
        stories.append(
            JournaledRequest(
                at=story.at,
                sweeper=story.sweeper,
                request=request if type(request) is int else None,
                outcome=story.outcome,
                safe_epoch=story.safe_epoch,
                cluster_epoch=story.cluster_epoch,
                revision=story.revision,
                epoch=story.epoch,
                pinning=pinning,
                version_ids=_version_ids(key, before, after),
                source=story.source,
                marker=_marker(key, after),
                round=_round(before),
                when=iso_utc(story.at),
            )
        )
    return stories


def _round(before: Record | None) -> str | None:
    """The round its before record names (None: none, or not a string)."""
    found = None if before is None else before.doc.get("round")
    return found if isinstance(found, str) else None


def _marker(key: str, after: Record | None) -> str | None:
    """The delete marker the request wrote over `key` (undo window), from its after record."""
    pairs = [] if after is None else after.doc.get("markers") or []
    found = [
        p[1]
        for p in pairs
        if isinstance(p, list) and len(p) == 2 and p[0] == key and isinstance(p[1], str)
    ]
    return found[-1] if found else None


def _version_ids(key: str, before: Record | None, after: Record | None) -> tuple[str, ...]:
    """The version ids the request deleted for `key` (sent ones when no answer says)."""
    if after is not None:
        deleted = after.doc.get("deleted") or []
        ids = after.doc.get("deleted_version_ids") or []
        got = [v for k, v in zip(deleted, ids, strict=False) if k == key and isinstance(v, str)]
        if got:
            return tuple(got)
    if before is None:
        return ()
    keys, ids = before.doc.get("keys") or [], before.doc.get("version_ids") or []
    return tuple(v for k, v in zip(keys, ids, strict=False) if k == key and isinstance(v, str))
