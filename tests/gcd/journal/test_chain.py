"""The journal's line format: records are written as `l0gc.strictjson.dumps` writes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.journal.chain import Chain, after_doc, before_doc, encode_record
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis
from l0gc import strictjson
from l0gc.errors import InvalidJson

_SCALARS = (
    st.text()  # every code point, lone surrogates and non-ASCII included
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.none()
    | st.booleans()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple),
    max_leaves=12,
)


def _strict(record: dict[str, Any]) -> bytes:
    return strictjson.dumps(record, what="t", compact=True).encode("utf-8", "surrogatepass")


@settings(max_examples=600, deadline=None)
@given(
    st.dictionaries(st.text(max_size=4), _VALUES, max_size=6),
    st.floats(allow_nan=False, allow_infinity=False),
)
def test_a_record_is_the_bytes_strictjson_writes(fields: dict[str, Any], at: float) -> None:
    """Whatever its strings, integers, nesting and time: byte for byte strictjson's line."""
    record = {"v": 1, "at": at, **fields}
    assert encode_record(record) == _strict(record)


def test_a_record_of_a_thousand_keys_is_the_bytes_strictjson_writes() -> None:
    """Before and after records of a 1,000-key request, one key non-ASCII, as Chain
    writes them: strictjson's bytes, ASCII, and read back as the same record."""
    keys = (*(f"l0/data/007/{e:018d}/k" for e in range(999)), "l0/data/é/1/k")
    tried = BatchAttempt(DeleteBasis(9, 10, 40, (("p/1", 9),)), keys, tuple(range(1000)), 0, 1, 1)
    for doc in (
        before_doc(tried),
        after_doc(BatchOutcome(tried, deleted=keys)),
        after_doc(BatchOutcome(tried, deleted=keys[1:], failed=((keys[0], "SlowDown"),))),
    ):
        record = {"v": 1, "sweeper": "s", "at": 1_700_000_000.123456, **doc}
        line = encode_record(record)
        assert line == _strict(record)
        assert line.isascii()
        assert json.loads(line) == json.loads(_strict(record))
    ascii_keys = keys[:999]
    tried = BatchAttempt(None, ascii_keys, (1,) * 999, 0, 1, 2)
    record = {"at": 5.5, **after_doc(BatchOutcome(tried, deleted=ascii_keys))}
    assert encode_record(record) == _strict(record)
    assert json.loads(encode_record(record))["unanswered"] == []


@pytest.mark.parametrize("at", [float("nan"), float("inf"), -float("inf")])
def test_a_time_that_is_not_a_number_is_refused(at: float) -> None:
    """NaN or infinity is InvalidJson, as strictjson refuses it (never written as null)."""
    with pytest.raises(InvalidJson):
        Chain("s").line({"type": "after", "request": 1}, at)
