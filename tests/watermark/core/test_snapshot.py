"""The GC state's version 1 snapshot: every malformed field is refused, by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from l0gc.errors import InvalidRecord, InvalidSnapshot, L0gcError
from watermark.core.gcstate import PartitionGcState
from watermark.core.snapshot import parse_snapshot


def two_slide_snapshot() -> dict[str, Any]:
    """created 10, floor 10, window [12, 13], slides (9, 11) and (10, 12), reconciled 3."""
    state = PartitionGcState(created_epoch=10)
    state.apply(1, 10, admitted_from=10)
    state.apply(5, 11, admitted_from=10)
    state.apply(9, 12, admitted_from=11)
    state.apply(10, 13, admitted_from=12)
    state.reconciled(3)
    snapshot: dict[str, Any] = json.loads(json.dumps(state.snapshot()))
    return snapshot


def test_a_valid_snapshot_parses_to_its_fields() -> None:
    """parse_snapshot returns every field, slides as (offset, previous_applied) pairs."""
    fields = parse_snapshot(two_slide_snapshot())
    assert (fields.created_epoch, fields.floor, fields.previous_applied) == (10, 10, 12)
    assert (fields.max_applied, fields.last_applied_offset, fields.reconciled_offset) == (13, 10, 3)
    assert fields.pending_slides == ((9, 11), (10, 12))


Mutation = Callable[[dict[str, Any]], object]


def _set(field: str, value: object) -> Mutation:
    return lambda snapshot: snapshot.__setitem__(field, value)


def _drop(field: str) -> Mutation:
    return lambda snapshot: snapshot.pop(field)


def _slide(index: int, field: str, value: object) -> Mutation:
    return lambda snapshot: snapshot["pending_slides"][index].__setitem__(field, value)


MALFORMED: list[tuple[str, Mutation, str]] = [
    ("missing version", _drop("version"), "version"),
    ("wrong version", _set("version", 2), "version"),
    ("version as text", _set("version", "1"), "version"),
    ("version as bool", _set("version", True), "version"),
    ("unknown field", _set("watermark", 9), "watermark"),
    ("missing created_epoch", _drop("created_epoch"), "created_epoch"),
    ("negative created_epoch", _set("created_epoch", -1), "created_epoch"),
    ("float created_epoch", _set("created_epoch", 10.0), "created_epoch"),
    ("zero cap", _set("max_pending_slides", 0), "max_pending_slides"),
    ("bool floor", _set("floor", True), "floor"),
    ("null floor", _set("floor", None), "floor"),
    ("floor below created_epoch", _set("floor", 9), "floor"),
    ("floor above previous_applied", _set("floor", 13), "previous_applied"),
    ("max below previous_applied", _set("max_applied", 10), "max_applied"),
    ("epoch beyond int64", _set("max_applied", 2**63), "max_applied"),
    ("text offset", _set("last_applied_offset", "9"), "last_applied_offset"),
    ("negative reconciled", _set("reconciled_offset", -1), "reconciled_offset"),
    ("reconciled beyond log", _set("reconciled_offset", 11), "reconciled_offset"),
    ("reconciled but nothing applied", _set("last_applied_offset", None), "reconciled_offset"),
    (
        "slides but nothing applied",
        lambda snapshot: snapshot.update(last_applied_offset=None, reconciled_offset=None),
        "pending_slides[0].offset",
    ),
    ("slides not a list", _set("pending_slides", {"offset": 5}), "pending_slides"),
    ("more slides than the cap", _set("max_pending_slides", 1), "pending_slides"),
    ("slide as a pair", _set("pending_slides", [[5, 10]]), "pending_slides[0]"),
    ("slide with junk key", _slide(0, "epoch", 3), "pending_slides[0]"),
    ("bool slide offset", _slide(0, "offset", False), "pending_slides[0].offset"),
    ("slide already reconciled", _slide(0, "offset", 3), "pending_slides[0].offset"),
    ("slides out of order", _slide(1, "offset", 4), "pending_slides[1].offset"),
    ("duplicate slide offset", _slide(1, "offset", 9), "pending_slides[1].offset"),
    ("slide beyond log", _slide(1, "offset", 11), "pending_slides[1].offset"),
    ("slide below floor", _slide(0, "previous_applied", 9), "pending_slides[0].previous_applied"),
    ("slides not rising", _slide(1, "previous_applied", 11), "pending_slides[1].previous_applied"),
    ("slide above window", _slide(1, "previous_applied", 13), "pending_slides[1].previous_applied"),
]


@pytest.mark.parametrize(
    ("mutate", "field"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED]
)
def test_restore_rejects_a_malformed_snapshot_naming_the_field(
    mutate: Mutation, field: str
) -> None:
    """restore() raises InvalidSnapshot whose message names the offending field."""
    snapshot = two_slide_snapshot()
    mutate(snapshot)
    with pytest.raises(InvalidSnapshot) as caught:
        PartitionGcState.restore(snapshot)
    assert caught.value.field == field
    assert f"field {field!r}" in str(caught.value)


@pytest.mark.parametrize("junk", [None, [], "{}", 42])
def test_restore_rejects_a_snapshot_that_is_not_an_object(junk: object) -> None:
    """restore() of a non-mapping raises InvalidSnapshot."""
    with pytest.raises(InvalidSnapshot, match="JSON object"):
        PartitionGcState.restore(junk)


def test_invalid_snapshot_is_an_invalid_record_and_a_value_error() -> None:
    """InvalidSnapshot is caught by handlers of InvalidRecord, ValueError and L0gcError."""
    error = InvalidSnapshot("floor", "got True")
    assert isinstance(error, InvalidRecord)
    assert isinstance(error, ValueError)
    assert isinstance(error, L0gcError)
