"""A small index per journal segment, so `gcd explain` reads only the lines naming a key.

Design notes: docs/internals/sweep.md, `gcd.journal.index`.
"""

from __future__ import annotations

import bisect
import hashlib
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from l0gc import strictjson
from l0gc.errors import InvalidJson, InvalidRecord

__all__ = [
    "INDEX_SUFFIX",
    "IndexBuilder",
    "SegmentIndex",
    "decode_index",
    "index_name",
    "key_hash",
]

INDEX_SUFFIX: Final = ".idx"
INDEX_VERSION: Final = 1
_MAX_HEADER: Final = 64 * 1024
_OFFSET_LIMIT: Final = 1 << 32


def index_name(segment_name: str) -> str:
    """The index file (or object) name of a segment."""
    return segment_name + INDEX_SUFFIX


def key_hash(key: str) -> int:
    """32 bits of BLAKE2b of the key's UTF-8 bytes (lone surrogates passed through)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big")


@dataclass(slots=True)
class IndexBuilder:
    """The index of the segment being written, built record by record."""

    entries: array[int] = field(default_factory=lambda: array("Q"))
    min_epoch: int | None = None
    max_epoch: int | None = None
    first_key: str | None = None
    last_key: str | None = None
    overflow: bool = False
    """An offset passed 4 GiB: no index for this segment (it is read in full)."""

    def add(self, offset: int, keys: Iterable[str], epochs: Iterable[object] = ()) -> None:
        """Note that the line at `offset` names `keys` (of these `epochs`)."""
        if offset >= _OFFSET_LIMIT:
            self.overflow = True
            return
        for key in keys:
            self.entries.append(key_hash(key) << 32 | offset)
            if self.first_key is None or key < self.first_key:
                self.first_key = key
            if self.last_key is None or key > self.last_key:
                self.last_key = key
        for epoch in epochs:
            if type(epoch) is not int:
                continue
            if self.min_epoch is None or epoch < self.min_epoch:
                self.min_epoch = epoch
            if self.max_epoch is None or epoch > self.max_epoch:
                self.max_epoch = epoch

    def encode(self, segment_name: str, size: int) -> bytes | None:
        """The index file's bytes, None when the segment cannot be indexed (overflow)."""
        if self.overflow:
            return None
        header = {
            "v": INDEX_VERSION,
            "segment": segment_name,
            "size": size,
            "min_epoch": self.min_epoch,
            "max_epoch": self.max_epoch,
            "first_key": self.first_key,
            "last_key": self.last_key,
            "entries": len(self.entries),
        }
        line = strictjson.dumps(header, what="journal index", compact=True).encode(
            "utf-8", "surrogatepass"
        )
        ordered = array("Q", sorted(self.entries))
        if sys.byteorder != "little":  # pragma: no cover - every supported platform is little
            ordered.byteswap()
        return line + b"\n" + ordered.tobytes()


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """A decoded index: the ranges, and the sorted entries."""

    segment: str
    size: int
    min_epoch: int | None
    max_epoch: int | None
    first_key: str | None
    last_key: str | None
    entries: array[int]

    def may_hold(self, key: str, epoch: int | None) -> bool:
        """False when no record of the segment can name `key` (of `epoch`, when known)."""
        if self.first_key is None or self.last_key is None:
            return False
        if not self.first_key <= key <= self.last_key:
            return False
        if epoch is None or self.min_epoch is None or self.max_epoch is None:
            return True
        return self.min_epoch <= epoch <= self.max_epoch

    def offsets(self, key: str) -> list[int]:
        """The offsets of the lines that may name `key`, ascending."""
        high = key_hash(key) << 32
        start = bisect.bisect_left(self.entries, high)
        end = bisect.bisect_left(self.entries, high + _OFFSET_LIMIT, lo=start)
        return sorted({entry & (_OFFSET_LIMIT - 1) for entry in self.entries[start:end]})


def decode_index(raw: bytes, source: str) -> SegmentIndex:
    """Read an index file; InvalidRecord when it is not one this l0gc writes."""
    newline = raw.find(b"\n", 0, _MAX_HEADER)
    if newline < 0:
        raise InvalidRecord(f"{source}: not a journal index (no header line)")
    try:
        header: Any = strictjson.loads(
            raw[:newline], what="journal index", max_bytes=_MAX_HEADER, max_depth=2
        )
    except InvalidJson as exc:
        raise InvalidRecord(f"{source}: unreadable journal index header ({exc})") from exc
    if not isinstance(header, dict) or header.get("v") != INDEX_VERSION:
        raise InvalidRecord(f"{source}: not a version {INDEX_VERSION} journal index")
    body = raw[newline + 1 :]
    count = header.get("entries")
    if type(count) is not int or len(body) != count * 8:
        raise InvalidRecord(f"{source}: journal index of {count!r} entries has {len(body)} bytes")
    entries = array("Q")
    entries.frombytes(body)
    if sys.byteorder != "little":  # pragma: no cover
        entries.byteswap()
    size = header.get("size")
    if type(size) is not int or not isinstance(header.get("segment"), str):
        raise InvalidRecord(f"{source}: journal index without a segment name and size")
    return SegmentIndex(
        header["segment"],
        size,
        _opt_int(header.get("min_epoch")),
        _opt_int(header.get("max_epoch")),
        _opt_str(header.get("first_key")),
        _opt_str(header.get("last_key")),
        entries,
    )


def _opt_int(value: object) -> int | None:
    return value if type(value) is int else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
