"""A small index per journal segment, so `gcd explain` reads only the lines naming a key.

Version 2 (written now) has one entry per request: its key and epoch ranges and the
offsets of its before and after lines. Version 1 (one entry per key per record, a 32-bit
hash and the line's offset) is still read. Design notes: docs/internals/sweep.md,
`gcd.journal.index`.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from l0gc import strictjson
from l0gc.errors import InvalidJson, InvalidRecord

__all__ = [
    "INDEX_SUFFIX",
    "INDEX_VERSION",
    "IndexBuilder",
    "KeyHashes",
    "RequestRanges",
    "SegmentIndex",
    "decode_index",
    "index_name",
    "key_hash",
]

INDEX_SUFFIX: Final = ".idx"
INDEX_VERSION: Final = 2
"""The version written; version 1 indexes (l0gc before issue 56) are still read."""
_MAX_HEADER: Final = 64 * 1024
_OFFSET_LIMIT: Final = 1 << 32
_FIELDS: Final = 6
"""A version 2 entry: line, after line, min epoch, max epoch, first key, last key."""


def index_name(segment_name: str) -> str:
    """The index file (or object) name of a segment."""
    return segment_name + INDEX_SUFFIX


def key_hash(key: str) -> int:
    """32 bits of BLAKE2b of the key's UTF-8 bytes (lone surrogates passed through): the
    hash of a version 1 index's entries."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _epoch_range(epochs: Sequence[object]) -> tuple[int | None, int | None]:
    """(min, max) of the integer epochs (built-ins; a non-integer one is passed over)."""
    try:
        low, high = min(epochs), max(epochs)  # type: ignore[type-var]
    except (TypeError, ValueError):  # mixed types, or no epoch at all
        low = high = None
    if type(low) is int and type(high) is int:
        return low, high
    known = [epoch for epoch in epochs if type(epoch) is int]
    return (min(known), max(known)) if known else (None, None)


@dataclass(slots=True)
class IndexBuilder:
    """The index of the segment being written, built request by request."""

    entries: list[list[Any]] = field(default_factory=list)
    """[line, after line or None, min epoch, max epoch, first key, last key]."""
    _waiting: dict[int, tuple[object, list[Any]]] = field(default_factory=dict)
    """id(request) -> (request, its entry): befores whose after is not written yet."""

    def before(
        self, offset: int, keys: Sequence[str], epochs: Sequence[object], request: object
    ) -> None:
        """The line at `offset` is the before record of `request` (any object: its after
        is paired with it by identity), naming `keys` of `epochs`."""
        if not keys:
            return
        entry = [offset, None, *_epoch_range(epochs), min(keys), max(keys)]
        self.entries.append(entry)
        self._waiting[id(request)] = (request, entry)

    def after(
        self, offset: int, keys: Sequence[str], epochs: Sequence[object], request: object
    ) -> None:
        """The line at `offset` is the after record of `request`, whose before named
        `keys` of `epochs` (the after names only keys of its before)."""
        waiting = self._waiting.pop(id(request), None)
        if waiting is not None and waiting[0] is request:
            waiting[1][1] = offset
        elif keys:  # its before is in an earlier segment: an entry of its own
            self.entries.append([offset, None, *_epoch_range(epochs), min(keys), max(keys)])

    def encode(self, segment_name: str, size: int) -> bytes:
        """The index file's bytes (version 2)."""
        ordered = sorted(self.entries, key=lambda entry: (entry[4], entry[0]))
        lows = [entry[2] for entry in ordered if entry[2] is not None]
        highs = [entry[3] for entry in ordered if entry[3] is not None]
        header = {
            "v": INDEX_VERSION,
            "segment": segment_name,
            "size": size,
            "min_epoch": min(lows, default=None),
            "max_epoch": max(highs, default=None),
            "first_key": ordered[0][4] if ordered else None,
            "last_key": max((entry[5] for entry in ordered), default=None),
            "entries": len(ordered),
        }
        flat = [value for entry in ordered for value in entry]
        return b"%s\n%s" % (
            strictjson.dumps(header, what="journal index", compact=True).encode("ascii"),
            strictjson.dumps(flat, what="journal index", compact=True).encode("ascii"),
        )


@dataclass(frozen=True, slots=True)
class KeyHashes:
    """A version 1 index's entries: ``hash32(key) << 32 | line offset``, sorted."""

    entries: array[int]

    def offsets(self, key: str, epoch: int | None = None) -> list[int]:
        """The offsets of the lines that may name `key` (`epoch` is not indexed)."""
        del epoch
        high = key_hash(key) << 32
        start = bisect.bisect_left(self.entries, high)
        end = bisect.bisect_left(self.entries, high + _OFFSET_LIMIT, lo=start)
        return sorted({entry & (_OFFSET_LIMIT - 1) for entry in self.entries[start:end]})


@dataclass(frozen=True, slots=True)
class RequestRanges:
    """A version 2 index's entries, one per request, sorted by first key."""

    firsts: list[str]
    lasts: list[str]
    reach: list[str]
    """reach[i]: the largest last key of entries 0..i (a key above it is in none)."""
    lines: list[int]
    afters: list[int | None]
    lows: list[int | None]
    highs: list[int | None]

    def offsets(self, key: str, epoch: int | None = None) -> list[int]:
        """The before and after lines of every request whose key range (and epoch
        range, when `epoch` is known) holds `key`: a superset of those naming it."""
        found: set[int] = set()
        at = bisect.bisect_right(self.firsts, key) - 1
        while at >= 0 and self.reach[at] >= key:
            low, high = self.lows[at], self.highs[at]
            if self.lasts[at] >= key and (
                epoch is None or low is None or high is None or low <= epoch <= high
            ):
                found.add(self.lines[at])
                after = self.afters[at]
                if after is not None:
                    found.add(after)
            at -= 1
        return sorted(found)


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """A decoded index: the segment's ranges, and its entries (either version)."""

    segment: str
    size: int
    min_epoch: int | None
    max_epoch: int | None
    first_key: str | None
    last_key: str | None
    entries: KeyHashes | RequestRanges

    def may_hold(self, key: str, epoch: int | None) -> bool:
        """False when no record of the segment can name `key` (of `epoch`, when known)."""
        if self.first_key is None or self.last_key is None:
            return False
        if not self.first_key <= key <= self.last_key:
            return False
        if epoch is None or self.min_epoch is None or self.max_epoch is None:
            return True
        return self.min_epoch <= epoch <= self.max_epoch

    def offsets(self, key: str, epoch: int | None = None) -> list[int]:
        """The offsets of the lines that may name `key` (of `epoch`, when known),
        ascending; every line naming it is among them."""
        return self.entries.offsets(key, epoch)


def decode_index(raw: bytes, source: str) -> SegmentIndex:
    """Read an index file (version 1 or 2); InvalidRecord when it is not one."""
    newline = raw.find(b"\n", 0, _MAX_HEADER)
    if newline < 0:
        raise InvalidRecord(f"{source}: not a journal index (no header line)")
    try:
        header: Any = strictjson.loads(
            raw[:newline], what="journal index", max_bytes=_MAX_HEADER, max_depth=2
        )
    except InvalidJson as exc:
        raise InvalidRecord(f"{source}: unreadable journal index header ({exc})") from exc
    if not isinstance(header, dict) or header.get("v") not in {1, INDEX_VERSION}:
        raise InvalidRecord(f"{source}: not a version 1 or {INDEX_VERSION} journal index")
    size = header.get("size")
    if type(size) is not int or not isinstance(header.get("segment"), str):
        raise InvalidRecord(f"{source}: journal index without a segment name and size")
    count = header.get("entries")
    body = raw[newline + 1 :]
    entries = (
        _hashes(body, count, source) if header["v"] == 1 else _ranges(body, count, size, source)
    )
    return SegmentIndex(
        header["segment"],
        size,
        _opt_int(header.get("min_epoch")),
        _opt_int(header.get("max_epoch")),
        _opt_str(header.get("first_key")),
        _opt_str(header.get("last_key")),
        entries,
    )


def _hashes(body: bytes, count: object, source: str) -> KeyHashes:
    """Version 1: `count` little-endian unsigned 64-bit entries."""
    if type(count) is not int or len(body) != count * 8:
        raise InvalidRecord(f"{source}: journal index of {count!r} entries has {len(body)} bytes")
    entries = array("Q")
    entries.frombytes(body)
    if sys.byteorder != "little":  # pragma: no cover - every supported platform is little
        entries.byteswap()
    return KeyHashes(entries)


def _ranges(body: bytes, count: object, size: int, source: str) -> RequestRanges:
    """Version 2: one JSON array of `count` entries of `_FIELDS` values, in order."""
    try:
        flat: Any = strictjson.loads(
            body, what="journal index", max_bytes=max(len(body), 2), max_depth=1
        )
    except InvalidJson as exc:
        raise InvalidRecord(f"{source}: unreadable journal index entries ({exc})") from exc
    if type(count) is not int or not isinstance(flat, list) or len(flat) != count * _FIELDS:
        raise InvalidRecord(
            f"{source}: journal index of {count!r} entries has "
            f"{len(flat) if isinstance(flat, list) else 'no'} values"
        )
    lines, afters = flat[0::_FIELDS], flat[1::_FIELDS]
    lows, highs = flat[2::_FIELDS], flat[3::_FIELDS]
    firsts, lasts = flat[4::_FIELDS], flat[5::_FIELDS]
    if not (
        all(type(line) is int and 0 <= line < size for line in lines)
        and all(after is None or (type(after) is int and 0 <= after < size) for after in afters)
        and all(epoch is None or type(epoch) is int for epoch in lows + highs)
        and all(
            low is None or high is None or low <= high
            for low, high in zip(lows, highs, strict=True)
        )
        and all(isinstance(first, str) for first in firsts)
        and all(isinstance(last, str) for last in lasts)
        and all(first <= last for first, last in zip(firsts, lasts, strict=True))
        and all(a <= b for a, b in itertools.pairwise(firsts))
    ):
        raise InvalidRecord(f"{source}: journal index entries out of shape or order")
    reach: list[str] = []
    for last in lasts:
        reach.append(last if not reach or last > reach[-1] else reach[-1])
    return RequestRanges(firsts, lasts, reach, lines, afters, lows, highs)


def _opt_int(value: object) -> int | None:
    return value if type(value) is int else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
