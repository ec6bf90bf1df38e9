"""l0gc.contract.record: a record decodes exactly, or raises InvalidRecord and nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc.contract.record import MAX_RECORD_BYTES, PartitionRecord
from l0gc.contract.safe_epoch import GcView, compute_safe_epoch
from l0gc.errors import InvalidJson, InvalidRecord
from tests.l0gc.test_strictjson import cpu_s, one_scan_s, parser_never_called
from watermark.core.gcstate import PartitionGcState


def good_doc(**changes: Any) -> dict[str, Any]:
    """A well-formed record of partition 'p0' as a dict, with `changes` applied."""
    doc: dict[str, Any] = json.loads(
        PartitionRecord(
            "p0",
            41,
            40,
            owner="pub-a",
            owner_epoch=3,
            window=(42, 43),
            tracker=PartitionGcState(created_epoch=40).snapshot(),
            updated_at=1763700000.5,
        ).encode()
    )
    doc.update(changes)
    return doc


def decode(raw: bytes | dict[str, Any]) -> PartitionRecord:
    """Decode `raw` (a dict is JSON-encoded first) as partition 'p0'."""
    data = json.dumps(raw).encode() if isinstance(raw, dict) else raw
    return PartitionRecord.decode(data, partition="p0")


def test_a_written_record_decodes_to_itself() -> None:
    """encode then decode gives back the same record, tracker included."""
    record = decode(good_doc())
    assert (record.watermark, record.owner, record.window) == (41, "pub-a", (42, 43))
    assert decode(record.encode()) == record
    assert decode(record.encode()).tracker == record.tracker


@pytest.mark.parametrize("version", [1.0, True, "1", 2, 0, None, [1]])
def test_only_the_integer_1_is_a_version(version: object) -> None:
    """version 1.0, true, "1" and anything but the int 1 make the record malformed."""
    with pytest.raises(InvalidRecord, match="unsupported record version"):
        decode(good_doc(version=version))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"version": 1, "version": 1, "watermark": 1, "created_epoch": 1}', "'version' more"),
        (b'{"version": 1, "watermark": 1, "created_epoch": 1, "updated_at": NaN}', "NaN"),
        (b'{"version": 1, "watermark": 1, "created_epoch": 1, "updated_at": 1e999}', "too large"),
        (b'{"version": 1, "watermark": 1, "created_epoch": 1, "owner": Infinity}', "Infinity"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_non_strict_json_is_refused_naming_the_partition(raw: bytes, expected: str) -> None:
    """Duplicate keys, NaN, Infinity, overflowing floats and non-UTF-8 are malformed."""
    with pytest.raises(InvalidJson, match=expected) as caught:
        decode(raw)
    assert str(caught.value).startswith("partition 'p0': record: ")


def test_a_100k_deep_record_is_refused_fast_not_recursion_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record of 100 000 nested arrays (or objects) raises InvalidRecord before any
    parser sees it (no RecursionError), in linear time: the CPU time of a few regex passes
    over it, measured here (test_strictjson's bound, free of the machine's speed and load).
    """
    parser_never_called(monkeypatch)
    for raw in (
        b"[" * 100_000,
        b'{"version": 1, "tracker": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
    ):
        with pytest.raises(InvalidRecord, match="nested more than 16 levels"):
            decode(raw)

        def refused(raw: bytes = raw) -> None:
            with pytest.raises(InvalidRecord):
                decode(raw)

        assert cpu_s(refused) < 20 * one_scan_s(raw)


def test_a_record_over_1_mib_is_refused_unread() -> None:
    """A record larger than MAX_RECORD_BYTES is refused by its size."""
    padding = "x" * MAX_RECORD_BYTES
    with pytest.raises(InvalidRecord, match=f"more than the limit of {MAX_RECORD_BYTES}"):
        decode(good_doc(note=padding))


@pytest.mark.parametrize(
    "owner", ["\x1b[31mred", "a\nb", "", "x" * 201, "\u202eevil", 7, ["pub-a"], True]
)
def test_owner_must_be_null_or_printable_and_bounded(owner: object) -> None:
    """An owner with control characters, empty, over 200 chars or not a string is refused."""
    with pytest.raises(InvalidRecord, match="field 'owner' must be null or 1-200 printable") as e:
        decode(good_doc(owner=owner))
    assert "\x1b" not in str(e.value)
    assert decode(good_doc(owner=None)).owner is None
    assert decode(good_doc(owner="pub-\u00e9 1")).owner == "pub-\u00e9 1"


@pytest.mark.parametrize("window", [[True, 1], [1.0, 2], [-1, 1], [0, 2**63], [1], [1, 2, 3], {}])
def test_window_must_be_two_int64_epochs_or_nulls(window: object) -> None:
    """A window that is not two bounds, each null or an int in [0, 2**63), is refused."""
    with pytest.raises(InvalidRecord, match="field 'window'"):
        decode(good_doc(window=window))
    assert decode(good_doc(window=[None, None])).window == (None, None)
    assert decode(good_doc(window=[5, None])).window == (5, None)


@pytest.mark.parametrize("field", ["watermark", "created_epoch", "owner_epoch"])
@pytest.mark.parametrize("value", [2**63, 1.0, True, "1", -2])
def test_epochs_are_int64_integers(field: str, value: object) -> None:
    """Epoch fields beyond int64, floats, booleans, strings and negatives are refused."""
    with pytest.raises(InvalidRecord, match=f"field {field!r} must be an integer"):
        decode(good_doc(**{field: value}))


@pytest.mark.parametrize("updated_at", ["now", True, [1]])
def test_updated_at_must_be_a_finite_number(updated_at: object) -> None:
    """updated_at that is not null or a number is refused; an int is accepted as seconds."""
    with pytest.raises(InvalidRecord, match="field 'updated_at' must be null or a finite"):
        decode(good_doc(updated_at=updated_at))
    assert decode(good_doc(updated_at=17)).updated_at == 17.0


def test_a_huge_bad_value_is_clipped_in_the_message() -> None:
    """A 100 kB bad owner does not flood the error message."""
    with pytest.raises(InvalidRecord) as caught:
        decode(good_doc(owner="\x00" * 100_000))
    assert len(str(caught.value)) < 400


def test_encode_refuses_a_non_finite_updated_at() -> None:
    """A record is never written with NaN (which would not decode): encode refuses it."""
    with pytest.raises(InvalidJson, match="partition 'p0' record"):
        PartitionRecord("p0", 1, 1, updated_at=float("nan")).encode()


def test_a_deep_record_blocks_the_safe_epoch_naming_the_partition() -> None:
    """compute_safe_epoch turns a 100k-deep record into a block naming it, not an exception."""
    good = PartitionRecord("a", 3, 1).encode()
    view = GcView(revision=1, cluster_epoch_raw=b"9", partitions={"a": good, "b": b"[" * 100_000})
    safe = compute_safe_epoch(view)
    assert (safe.safe_epoch, safe.blocked_partition) == (None, "b")
    assert "nested more than 16 levels" in str(safe.blocked_reason)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_invalid_record(raw: bytes) -> None:
    """Any bytes give a record or InvalidRecord, never another exception."""
    try:
        decode(raw)
    except InvalidRecord:
        return


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "version",
        "partition",
        "watermark",
        "created_epoch",
        "owner",
        "owner_epoch",
        "window",
        "tracker",
        "updated_at",
        "sealed_owner_epoch",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELDS, JSON_VALUES, max_size=4))
def test_any_field_values_decode_or_raise_invalid_record(changes: dict[str, Any]) -> None:
    """A record with arbitrary JSON in any field decodes or raises InvalidRecord."""
    raw = json.dumps(good_doc(**changes)).encode()  # may hold NaN: decode must refuse it
    try:
        record = decode(raw)
    except InvalidRecord:
        return
    assert decode(record.encode()) == record


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELDS, JSON_VALUES, max_size=4) | st.binary(max_size=200))
def test_watermark_of_checks_exactly_what_decode_checks(changes: dict[str, Any] | bytes) -> None:
    """The bulk readers' `watermark_of` refuses exactly the records `decode` refuses, with
    the same message, and gives the same M(p) otherwise."""
    raw = changes if isinstance(changes, bytes) else json.dumps(good_doc(**changes)).encode()
    try:
        expected: int | str = PartitionRecord.decode(raw, partition="p0").watermark
    except InvalidRecord as exc:
        expected = str(exc)
    try:
        got: int | str = PartitionRecord.watermark_of(raw, partition="p0")
    except InvalidRecord as exc:
        got = str(exc)
    assert got == expected


SNAPSHOT_FIELDS = st.sampled_from([*good_doc()["tracker"], "unknown"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(SNAPSHOT_FIELDS, JSON_VALUES, max_size=3), JSON_VALUES)
def test_any_decoded_tracker_restores_or_raises_invalid_record(
    changes: dict[str, Any], anything: Any
) -> None:
    """Restoring GC state from any JSON tracker gives a state or InvalidRecord, nothing else."""
    for tracker in (good_doc()["tracker"] | changes, anything):
        try:
            PartitionGcState.restore(tracker)
        except InvalidRecord:
            continue


def test_waiting_round_trips_and_is_optional() -> None:
    """`waiting` (issue 55) is kept as written; a record without it decodes as before."""
    waiting = {
        "on": "reconciler",
        "committed_offset": 9,
        "reconciled_offset": 4,
        "since": 1763700000.25,
    }
    record = decode(good_doc(waiting=waiting))
    assert record.waiting == waiting
    assert decode(record.encode()).waiting == waiting
    assert decode(good_doc()).waiting is None
    assert "waiting" not in json.loads(decode(good_doc()).encode())


@pytest.mark.parametrize(
    "waiting",
    [
        [],
        "log_end",
        {"since": 1.0},
        {"on": ""},
        {"on": "x" * 33},
        {"on": "a\x1b[2J"},
        {"on": "log_end", "since": "yesterday"},
        {"on": "fences", "fences": [1]},
        {"on": 7},
    ],
)
def test_a_malformed_waiting_reads_as_absent_and_blocks_nothing(waiting: object) -> None:
    """For operators only: a bad one (a hand edit, another writer) is no malformed record,
    which would stop GC for the whole namespace."""
    record = decode(good_doc(waiting=waiting))
    assert record.waiting is None
    assert record.watermark == 41
