"""References: the object keys a partition's unreconciled entries name (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.references`.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from l0gc.errors import InvalidRecord

__all__ = [
    "DEFAULT_MAX_REFERENCES",
    "MAX_ENTRY_KEYS",
    "MAX_KEY_BYTES",
    "MAX_REFERENCE_BYTES",
    "Reference",
    "References",
    "check_key",
    "merge",
]

DEFAULT_MAX_REFERENCES = 10_000
"""Keys one partition may hold referenced at once (`watermark serve --max-references`)."""
MAX_REFERENCE_BYTES = 512 * 1024
"""Their UTF-8 bytes at most, whatever the cap: the record holding them must stay far
below etcd's 1.5 MiB value limit (`MAX_RECORD_BYTES` is 1 MiB)."""
MAX_KEY_BYTES = 1024
"""An object key is at most 1,024 UTF-8 bytes on S3, Azure and GCS alike."""
MAX_ENTRY_KEYS = 1000
"""Keys one commit may name."""
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


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


@dataclass(frozen=True, slots=True)
class Reference:
    """One referenced key: the partition whose entry at log `offset` names it."""

    partition: str
    offset: int
    key: str


@dataclass(frozen=True, slots=True)
class References:
    """A partition's references as its record stores them: ``{"entries": [[offset,
    [key, ...]], ...]}``, offsets rising. An empty one still says the writer sends them."""

    entries: tuple[tuple[int, tuple[str, ...]], ...] = ()

    @property
    def keys(self) -> int:
        """How many (entry, key) references it holds."""
        return sum(len(keys) for _, keys in self.entries)

    def encode(self) -> dict[str, Any]:
        """The record field, JSON-able."""
        return {"entries": [[offset, list(keys)] for offset, keys in self.entries]}

    @classmethod
    def decode(cls, doc: object) -> References:
        """Check a stored field; InvalidRecord names what is wrong. A record whose
        references cannot be read blocks deletion like any unreadable record."""
        entries = doc.get("entries") if isinstance(doc, Mapping) else None
        if not isinstance(entries, list):
            raise InvalidRecord(
                f"field 'references' must be {{\"entries\": [[offset, [key, ...]], ...]}}, "
                f"got {_short.repr(doc)}"
            )
        out: list[tuple[int, tuple[str, ...]]] = []
        previous = -1
        for i, entry in enumerate(entries):
            where = f"field 'references', entry {i}"
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
                raise InvalidRecord(
                    f"{where}: must be [offset, [key, ...]], got {_short.repr(entry)}"
                )
            offset, keys = entry
            if type(offset) is not int or offset <= previous:
                raise InvalidRecord(
                    f"{where}: offset {_short.repr(offset)} must be an integer above the "
                    f"previous entry's ({previous})"
                )
            previous = offset
            out.append((offset, tuple(check_key(key, where) for key in keys)))
        return cls(tuple(out))

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
