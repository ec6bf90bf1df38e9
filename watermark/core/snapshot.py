"""The persisted form of a partition GC state: the version 1 snapshot and its checks.

`PartitionGcState.snapshot` writes a flat JSON object; `parse_snapshot` reads one back
and checks every field: its type (``type() is int``: a JSON ``true`` is not an epoch),
its range, and the ordering invariants the state machine keeps
(``created_epoch <= floor <= previous_applied <= max_applied``, pending slides after the
reconciled offset, at most the last applied one, rising in offset and epoch, within
``[floor, previous_applied]``). Anything else raises `InvalidSnapshot` naming the field,
the value and what was expected: a record we cannot trust is never published from.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from l0gc.errors import InvalidSnapshot

__all__ = ["SNAPSHOT_VERSION", "SnapshotFields", "parse_snapshot"]

SNAPSHOT_VERSION = 1
_INT64_MAX = 2**63 - 1
_FIELDS = frozenset(
    {
        "version",
        "created_epoch",
        "max_pending_slides",
        "floor",
        "previous_applied",
        "max_applied",
        "last_applied_offset",
        "reconciled_offset",
        "pending_slides",
    }
)
_SLIDE_FIELDS = frozenset({"offset", "previous_applied"})


@dataclass(frozen=True, slots=True)
class SnapshotFields:
    """A checked version 1 snapshot; `pending_slides` as ``(offset, previous_applied)``."""

    created_epoch: int
    max_pending_slides: int
    floor: int
    previous_applied: int
    max_applied: int
    last_applied_offset: int | None
    reconciled_offset: int | None
    pending_slides: tuple[tuple[int, int], ...]


def parse_snapshot(snapshot: object) -> SnapshotFields:
    """Check `snapshot` (a decoded JSON object) field by field; raise `InvalidSnapshot`."""
    if not isinstance(snapshot, Mapping):
        raise InvalidSnapshot.bad_value("<snapshot>", snapshot, "a JSON object")
    if "version" not in snapshot:
        raise InvalidSnapshot("version", f"is missing; expected {SNAPSHOT_VERSION}")
    version = snapshot["version"]
    if type(version) is not int or version != SNAPSHOT_VERSION:
        raise InvalidSnapshot.bad_value(
            "version", version, f"{SNAPSHOT_VERSION} (a newer l0gc may have written it)"
        )
    for key in snapshot:
        if key not in _FIELDS:
            raise InvalidSnapshot(str(key), "is not a field of a version 1 snapshot")
    created = _int(snapshot, "created_epoch", 0, "an epoch >= 0")
    cap = _int(snapshot, "max_pending_slides", 1, "an integer >= 1")
    floor = _int(snapshot, "floor", created, f"an epoch >= created_epoch ({created})")
    previous = _int(snapshot, "previous_applied", floor, f"an epoch >= floor ({floor})")
    maximum = _int(snapshot, "max_applied", previous, f"an epoch >= previous_applied ({previous})")
    last = _optional_int(snapshot, "last_applied_offset", 0, "null or an offset >= 0")
    reconciled = _optional_int(
        snapshot,
        "reconciled_offset",
        0,
        f"null or an offset <= last_applied_offset ({last})",
        high=-1 if last is None else last,
    )
    slides = _slides(
        snapshot, cap=cap, floor=floor, previous=previous, reconciled=reconciled, last=last
    )
    return SnapshotFields(created, cap, floor, previous, maximum, last, reconciled, slides)


def _int(
    snapshot: Mapping[Any, object], field: str, low: int, expected: str, high: int = _INT64_MAX
) -> int:
    if field not in snapshot:
        raise InvalidSnapshot(field, f"is missing; expected {expected}")
    return _checked_int(field, snapshot[field], low, high, expected)


def _optional_int(
    snapshot: Mapping[Any, object], field: str, low: int, expected: str, high: int = _INT64_MAX
) -> int | None:
    if snapshot.get(field, 0) is None:
        return None
    return _int(snapshot, field, low, expected, high)


def _checked_int(field: str, value: object, low: int, high: int, expected: str) -> int:
    # type() and not isinstance(): True is an int to Python but never a valid epoch.
    if type(value) is not int or not low <= value <= high:
        raise InvalidSnapshot.bad_value(field, value, expected)
    return value


def _slides(
    snapshot: Mapping[Any, object],
    *,
    cap: int,
    floor: int,
    previous: int,
    reconciled: int | None,
    last: int | None,
) -> tuple[tuple[int, int], ...]:
    if "pending_slides" not in snapshot:
        raise InvalidSnapshot("pending_slides", "is missing; expected a list")
    raw = snapshot["pending_slides"]
    if not isinstance(raw, list | tuple) or len(raw) > cap:
        raise InvalidSnapshot.bad_value(
            "pending_slides", raw, f"a list of at most max_pending_slides ({cap}) slides"
        )
    slides: list[tuple[int, int]] = []
    low_offset = 0 if reconciled is None else reconciled + 1
    high_offset = -1 if last is None else last
    low_epoch = floor
    for index, item in enumerate(raw):
        name = f"pending_slides[{index}]"
        if not isinstance(item, Mapping) or set(item) != _SLIDE_FIELDS:
            raise InvalidSnapshot.bad_value(
                name, item, 'an object {"offset": int, "previous_applied": int}'
            )
        offset = _checked_int(
            f"{name}.offset",
            item["offset"],
            low_offset,
            high_offset,
            f"an offset in [{low_offset}, {last}]: after reconciled_offset and the previous "
            "slide, at most last_applied_offset",
        )
        epoch = _checked_int(
            f"{name}.previous_applied",
            item["previous_applied"],
            low_epoch,
            previous,
            f"an epoch in [{low_epoch}, {previous}]: at least floor and above the previous "
            "slide's, at most previous_applied",
        )
        slides.append((offset, epoch))
        low_offset = offset + 1
        low_epoch = epoch + 1
    return tuple(slides)
