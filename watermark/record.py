"""The partition record stored at `{ns}/partitions/{partition}` (pure, no I/O).

This JSON document is the whole contract between a partition's publisher and every
sweeper, so it is parsed strictly: a record that does not decode exactly is reported
as malformed, and a malformed record makes the global safe epoch undefined (the
sweepers then delete nothing). Writers in other languages produce the same document;
see docs/integration.md.

    {"version": 1, "partition": "orders/0", "watermark": 41, "window": [42, 43],
     "owner": "publisher-a", "owner_epoch": 3, "created_epoch": 40,
     "tracker": {...PartitionGcState.snapshot()...}, "updated_at": 1763700000.0}

`watermark` is M(p): every object whose epoch is <= it is garbage as far as this
partition is concerned. `window` is the fencing window at publish time ([null, null]
when empty), for operators. `tracker` is optional (a partition registered but never
owned has none).

`sealed_owner_epoch` (optional, absent = null) says that `tracker` holds every entry of
the partition's log: the owner with that owner_epoch wrote it when it stopped hosting
the partition cleanly (every fence finished, none revoked), or registration wrote 0
(a new partition's log is empty). A new owner, whose owner_epoch is one more, then
knows where the log ends; after any other owner (one that adopted and crashed without
publishing) it does not. Every ordinary publish clears it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from watermark.errors import InvalidRecord

__all__ = ["RECORD_VERSION", "PartitionRecord"]

RECORD_VERSION = 1
_INT64_MAX = 2**63 - 1


def _int(doc: dict[str, Any], name: str, *, minimum: int, optional: bool = False) -> int | None:
    value = doc.get(name)
    if value is None and optional:
        return None
    if type(value) is not int or not minimum <= value <= _INT64_MAX:
        raise InvalidRecord(f"field {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


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
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes, *, partition: str) -> PartitionRecord:
        """Parse and validate a stored record; raise InvalidRecord naming what is wrong."""
        if not raw:
            raise InvalidRecord(f"partition {partition!r}: record is empty")
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidRecord(f"partition {partition!r}: record is not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise InvalidRecord(f"partition {partition!r}: record must be a JSON object")
        try:
            return cls._from_doc(doc, partition)
        except InvalidRecord as exc:
            raise InvalidRecord(f"partition {partition!r}: {exc}") from None

    @classmethod
    def _from_doc(cls, doc: dict[str, Any], partition: str) -> PartitionRecord:
        if doc.get("version") != RECORD_VERSION:
            raise InvalidRecord(
                f"unsupported record version {doc.get('version')!r} (expected {RECORD_VERSION})"
            )
        if doc.get("partition", partition) != partition:
            raise InvalidRecord(f"record names partition {doc.get('partition')!r}")
        if "watermark" not in doc:
            raise InvalidRecord("record has no watermark")
        watermark = _int(doc, "watermark", minimum=-1)
        created = _int(doc, "created_epoch", minimum=0)
        owner_epoch = _int(doc, "owner_epoch", minimum=0, optional=True) or 0
        sealed = _int(doc, "sealed_owner_epoch", minimum=0, optional=True)
        owner = doc.get("owner")
        if owner is not None and not isinstance(owner, str):
            raise InvalidRecord(f"field 'owner' must be a string or null, got {owner!r}")
        raw_window = doc.get("window", [None, None])
        if (
            not isinstance(raw_window, list)
            or len(raw_window) != 2
            or any(v is not None and type(v) is not int for v in raw_window)
        ):
            raise InvalidRecord(
                f"field 'window' must be [lo, hi] or [null, null], got {raw_window!r}"
            )
        tracker = doc.get("tracker")
        if tracker is not None and not isinstance(tracker, dict):
            raise InvalidRecord("field 'tracker' must be an object or null")
        updated = doc.get("updated_at")
        if updated is not None and (
            isinstance(updated, bool) or not isinstance(updated, int | float)
        ):
            raise InvalidRecord(f"field 'updated_at' must be a number, got {updated!r}")
        assert watermark is not None
        assert created is not None
        return cls(
            partition=partition,
            watermark=watermark,
            created_epoch=created,
            owner=owner,
            owner_epoch=owner_epoch,
            window=(raw_window[0], raw_window[1]),
            tracker=tracker,
            updated_at=None if updated is None else float(updated),
            sealed_owner_epoch=sealed,
        )
