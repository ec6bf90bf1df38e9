"""The partition record stored at `{ns}/partitions/{partition}` (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.record`.
"""

from __future__ import annotations

import functools
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any

from l0gc import strictjson
from l0gc.contract.references import References
from l0gc.errors import InvalidRecord

__all__ = [
    "MAX_OWNER_LENGTH",
    "MAX_RECORD_BYTES",
    "MAX_RECORD_DEPTH",
    "RECORD_VERSION",
    "PartitionRecord",
]

RECORD_VERSION = 1
MAX_RECORD_BYTES = 1 << 20
"""A record larger than 1 MiB is refused unread (etcd's own value limit is 1.5 MiB)."""
MAX_RECORD_DEPTH = 16
"""Nesting limit of a record: l0gc writes 4 levels (record, tracker, slides, slide; or
record, references, entries, entry, keys: 5)."""
MAX_OWNER_LENGTH = 200
_INT64_MAX = 2**63 - 1
_short = reprlib.Repr()  # a huge bad value must not flood the message
_short.maxstring = _short.maxother = 60


def _int(doc: dict[str, Any], name: str, *, minimum: int, optional: bool = False) -> int | None:
    value = doc.get(name)
    if value is None and optional:
        return None
    if type(value) is not int or not minimum <= value <= _INT64_MAX:
        raise InvalidRecord(
            f"field {name!r} must be an integer in [{minimum}, 2**63-1], got {_short.repr(value)}"
        )
    return value


def _window(doc: dict[str, Any]) -> tuple[int | None, int | None]:
    # For operators only: each bound is checked, their relation is not (it blocks nothing).
    raw = doc.get("window", [None, None])
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or any(v is not None and (type(v) is not int or not 0 <= v <= _INT64_MAX) for v in raw)
    ):
        raise InvalidRecord(
            "field 'window' must be [oldest_accepted, latest_seen], each an epoch in int64 "
            f"or null, got {_short.repr(raw)}"
        )
    return (raw[0], raw[1])


def _owner(doc: dict[str, Any]) -> str | None:
    owner = doc.get("owner")
    if owner is None:
        return None
    if (
        not isinstance(owner, str)
        or not 0 < len(owner) <= MAX_OWNER_LENGTH
        or not owner.isprintable()
    ):
        raise InvalidRecord(
            f"field 'owner' must be null or 1-{MAX_OWNER_LENGTH} printable characters, "
            f"got {_short.repr(owner)}"
        )
    return owner


def _updated_at(doc: dict[str, Any]) -> float | None:
    updated = doc.get("updated_at")
    if updated is None:
        return None
    if type(updated) not in (int, float) or not math.isfinite(updated):
        raise InvalidRecord(
            f"field 'updated_at' must be null or a finite number (unix seconds), "
            f"got {_short.repr(updated)}"
        )
    return float(updated)


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """One partition's published GC state."""

    partition: str
    watermark: int
    created_epoch: int
    owner: str | None = None
    owner_epoch: int = 0
    window: tuple[int | None, int | None] = (None, None)
    tracker: dict[str, Any] | None = field(default=None, compare=False)
    updated_at: float | None = None
    sealed_owner_epoch: int | None = None
    waiting: dict[str, Any] | None = field(default=None, compare=False)
    """Why M(p) does not follow the cluster epoch (see the module docstring)."""
    references: References | None = field(default=None, compare=False)
    """The keys its unreconciled entries name, when its writer sends them (None: it
    never did; `l0gc.contract.references`)."""

    @property
    def log_is_complete(self) -> bool:
        """True when `tracker` holds the whole log as of the previous owner (see above)."""
        return self.sealed_owner_epoch is not None and self.sealed_owner_epoch == (
            self.owner_epoch - 1
        )

    def encode(self) -> bytes:
        """The record as compact JSON bytes."""
        doc: dict[str, Any] = {
            "version": RECORD_VERSION,
            "partition": self.partition,
            "watermark": self.watermark,
            "created_epoch": self.created_epoch,
            "window": list(self.window),
            "owner": self.owner,
            "owner_epoch": self.owner_epoch,
            "tracker": self.tracker,
            "updated_at": self.updated_at,
        }
        if self.sealed_owner_epoch is not None:
            doc["sealed_owner_epoch"] = self.sealed_owner_epoch
        if self.waiting is not None:
            doc["waiting"] = self.waiting
        text = strictjson.dumps(
            doc, what=f"partition {self.partition!r} record", compact=True, sort_keys=True
        )
        if self.references is not None:
            # Spliced in sorted place (after "partition", before "sealed_owner_epoch" or
            # "tracker", which every record has): a publisher keeps the field's text, so
            # a publish does not encode every held key again. A quote inside a string is
            # escaped, so the first ',"tracker":' is the top-level field's.
            after = (
                ',"sealed_owner_epoch":' if self.sealed_owner_epoch is not None else ',"tracker":'
            )
            at = text.index(after)
            text = f'{text[:at]},"references":{self.references.json_text()}{text[at:]}'
        return text.encode()

    @classmethod
    def decode(cls, raw: bytes, *, partition: str) -> PartitionRecord:
        """Parse and validate a stored record; raise InvalidRecord naming what is wrong."""
        return cls(*_checked_fields(raw, partition))

    @staticmethod
    def watermark_of(raw: bytes, *, partition: str) -> int:
        """The record's M(p) after every check `decode` makes (InvalidRecord alike), without
        building the record: bulk readers that keep only M(p) (a 1M-record read)."""
        return _watermark_of(raw, partition)

    @staticmethod
    def references_of(raw: bytes, *, partition: str) -> References | None:
        """The record's references after every check `decode` makes, memoised like
        `watermark_of` (a sweeper reads them with M every round)."""
        return _references_of(raw, partition)


@functools.lru_cache(maxsize=4096)
def _watermark_of(raw: bytes, partition: str) -> int:
    """Memoised on the exact bytes: a daemon, `gcd status` and the simulation re-read mostly
    unchanged records (an int is immutable, so sharing it is safe; errors are not cached)."""
    watermark: int = _checked_fields(raw, partition)[1]
    return watermark


@functools.lru_cache(maxsize=4096)
def _references_of(raw: bytes, partition: str) -> References | None:
    references: References | None = _checked_fields(raw, partition)[10]
    return references


def _checked_fields(raw: bytes, partition: str) -> tuple[Any, ...]:
    """A stored record's fields in `PartitionRecord`'s order, every one checked."""
    if not raw:
        raise InvalidRecord(f"partition {partition!r}: record is empty")
    doc = strictjson.loads(
        raw,
        what=f"partition {partition!r}: record",
        max_bytes=MAX_RECORD_BYTES,
        max_depth=MAX_RECORD_DEPTH,
    )
    if not isinstance(doc, dict):
        raise InvalidRecord(f"partition {partition!r}: record must be a JSON object")
    try:
        return _fields(doc, partition)
    except InvalidRecord as exc:
        raise InvalidRecord(f"partition {partition!r}: {exc}") from None


def _fields(doc: dict[str, Any], partition: str) -> tuple[Any, ...]:
    version = doc.get("version")
    if type(version) is not int or version != RECORD_VERSION:
        raise InvalidRecord(
            f"unsupported record version {_short.repr(version)} (expected the integer "
            f"{RECORD_VERSION})"
        )
    if doc.get("partition", partition) != partition:
        raise InvalidRecord(f"record names partition {_short.repr(doc.get('partition'))}")
    if "watermark" not in doc:
        raise InvalidRecord("record has no watermark")
    watermark = _int(doc, "watermark", minimum=-1)
    created = _int(doc, "created_epoch", minimum=0)
    owner_epoch = _int(doc, "owner_epoch", minimum=0, optional=True) or 0
    sealed = _int(doc, "sealed_owner_epoch", minimum=0, optional=True)
    tracker = doc.get("tracker")
    if tracker is not None and not isinstance(tracker, dict):
        raise InvalidRecord(
            f"field 'tracker' must be an object or null, got {_short.repr(tracker)}"
        )
    assert watermark is not None
    assert created is not None
    return (
        partition,
        watermark,
        created,
        _owner(doc),
        owner_epoch,
        _window(doc),
        tracker,
        _updated_at(doc),
        sealed,
        _waiting(doc),
        None if doc.get("references") is None else References.decode(doc["references"]),
    )


def _waiting(doc: dict[str, Any]) -> dict[str, Any] | None:
    waiting = doc.get("waiting")
    if waiting is None:
        return None
    on = waiting.get("on") if isinstance(waiting, dict) else None
    if not (isinstance(on, str) and 0 < len(on) <= 32 and on.isprintable()) or not all(
        type(value) is int or (type(value) is float and math.isfinite(value))
        for key, value in waiting.items()
        if key != "on"
    ):
        return None  # for operators only: a malformed one is no reason to block GC
    return dict(waiting)
