"""References: the object keys a partition's unreconciled entries name (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.references`.
"""

from __future__ import annotations

import itertools
import json
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as encode_key  # json's own, in C
from typing import Any, cast

from l0gc.errors import InvalidRecord

__all__ = [
    "DEFAULT_MAX_REFERENCES",
    "MAX_ENTRY_KEYS",
    "MAX_KEY_BYTES",
    "MAX_REFERENCE_BYTES",
    "Keys",
    "Reference",
    "References",
    "check_key",
    "merge",
    "plain",
]

DEFAULT_MAX_REFERENCES = 10_000
"""Keys one partition may hold referenced at once (`watermark serve --max-references`)."""
MAX_REFERENCE_BYTES = 512 * 1024
"""The bytes they take in the record at most (as stored: ASCII-only JSON), whatever the
cap: the record holding them must stay below `MAX_RECORD_BYTES` (1 MiB)."""
MAX_KEY_BYTES = 1024
"""An object key is at most 1,024 UTF-8 bytes on S3, Azure and GCS alike."""
MAX_ENTRY_KEYS = 1000
_INT64_MAX = 2**63 - 1
"""Keys one commit may name."""
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


def plain(keys: Sequence[Any]) -> bool:
    """True when every one of `keys` passes `check_key`, checked in bulk (a record holds
    thousands: one join and one scan instead of a call per key)."""
    return (
        all(type(key) is str and 0 < len(key) <= MAX_KEY_BYTES // 4 for key in keys)
        and "".join(keys).isprintable()
    )


def check_key(key: object, where: str) -> str:
    """`key` if it is an object key a writer may reference (a non-empty string of at most
    1,024 UTF-8 bytes, no control characters); else InvalidRecord naming it and `where`."""
    if (
        not isinstance(key, str)
        or not key
        or len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES
        or not key.isprintable()
    ):
        raise InvalidRecord(
            f"{where}: {_short.repr(key)} is not an object key (a non-empty string of at most "
            f"{MAX_KEY_BYTES} UTF-8 bytes without control characters)"
        )
    return key


class Keys(tuple[str, ...]):
    """The object keys one commit names, checked (`check_key`), each once, in order, with
    the bytes they take in a record (`size`, what the cap counts): made once per request
    (`checked`), so a batch whose entries name the same objects checks them once."""

    size: int

    @classmethod
    def checked(cls, objects: Sequence[object], where: str) -> Keys:
        """`objects` checked, without repeats; InvalidRecord names a bad key and `where`."""
        if isinstance(objects, Keys):
            return objects
        valid = objects if plain(objects) else [check_key(key, where) for key in objects]
        keys = cls(dict.fromkeys(cast("Sequence[str]", valid)))
        # each key as ASCII-only JSON, its quotes and a comma (json's encoder, in C)
        keys.size = len(",".join(map(encode_key, keys))) + 1 if keys else 0
        return keys


@dataclass(frozen=True, slots=True)
class Reference:
    """One referenced key: the partition whose entry at log `offset` names it."""

    partition: str
    offset: int
    key: str


@dataclass(frozen=True, slots=True)
class References:
    """A partition's references: per entry offset (rising), the keys it names. An empty
    one still says the writer sends them.

    Stored as two flat lists, ``{"offsets": [o1, o1, o2], "keys": [k1, k2, k3]}`` (the
    offset of each key, non-decreasing): two brackets however many keys, so the strict
    parser's bracket count (`l0gc.strictjson`) stays on its fast path."""

    entries: tuple[tuple[int, tuple[str, ...]], ...] = ()
    text: str | None = field(default=None, compare=False, repr=False)
    """`json_text`, kept once computed: a publisher republishes the same `References`
    until its set changes (`watermark.core.references.ReferenceSet.stored`)."""

    @property
    def keys(self) -> int:
        """How many (entry, key) references it holds."""
        return sum(len(keys) for _, keys in self.entries)

    def encode(self) -> dict[str, Any]:
        """The record field, JSON-able."""
        return {
            "offsets": [offset for offset, keys in self.entries for _ in keys],
            "keys": [key for _, keys in self.entries for key in keys],
        }

    def json_text(self) -> str:
        """The record field as compact, ASCII-only JSON with sorted keys, exactly as the
        record's encoder writes `encode()`; computed once."""
        if self.text is None:
            text = json.dumps(self.encode(), separators=(",", ":"), sort_keys=True)
            object.__setattr__(self, "text", text)  # a cache: not part of the value
            return text
        return self.text

    @classmethod
    def decode(cls, doc: object, name: str = "references") -> References:
        """Check a stored field (`name`, as messages call it); InvalidRecord names what
        is wrong. A record whose references cannot be read blocks deletion like any
        unreadable record."""
        offsets = doc.get("offsets") if isinstance(doc, Mapping) else None
        keys = doc.get("keys") if isinstance(doc, Mapping) else None
        if not (isinstance(offsets, list) and isinstance(keys, list)) or len(offsets) != len(keys):
            raise InvalidRecord(
                f'field {name!r} must be {{"offsets": [offset, ...], "keys": [key, ...]}} '
                f"of one length, got {_short.repr(doc)}"
            )
        if not all(type(o) is int and 0 <= o <= _INT64_MAX for o in offsets) or any(
            b < a for a, b in itertools.pairwise(offsets)
        ):
            raise InvalidRecord(
                f"field {name!r}: 'offsets' must be integers in [0, 2**63-1], never "
                f"decreasing, got {_short.repr(offsets)}"
            )
        if not plain(keys):  # the slow path names the bad key
            keys = [check_key(key, f"field {name!r}") for key in keys]
        entries: dict[int, list[str]] = {}
        for offset, key in zip(offsets, keys, strict=True):
            entries.setdefault(offset, []).append(key)
        return cls(tuple((offset, tuple(held)) for offset, held in entries.items()))

    def of(self, partition: str) -> Iterable[Reference]:
        """Every reference, as `Reference`s of `partition`."""
        for offset, keys in self.entries:
            for key in keys:
                yield Reference(partition, offset, key)


def merge(by_partition: Mapping[str, References]) -> dict[str, Reference]:
    """Every referenced key, with the first reference to it (partitions in name order,
    entries in offset order): what a sweeper checks each key against."""
    out: dict[str, Reference] = {}
    for name in sorted(by_partition):
        for reference in by_partition[name].of(name):
            out.setdefault(reference.key, reference)
    return out
