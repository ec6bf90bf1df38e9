"""The contract's pause marker: any marker pauses; decoding is bounded and never raises."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc.contract.namespace import LATEST_PAUSE_AT, pause_at, pause_marker, pause_reason


def test_a_written_marker_reads_back_its_reason_and_time() -> None:
    """pause_marker's reason and time come back from pause_reason and pause_at."""
    raw = pause_marker("investigating", 1763700000.25)
    assert pause_reason(raw) == "investigating"
    assert pause_at(raw) == 1763700000.25
    assert pause_reason(pause_marker("", 1.0)) == "no reason given"


def test_a_non_finite_time_is_written_as_null_so_the_marker_stays_json() -> None:
    """pause_marker with NaN writes "at": null; the marker still reads (time unknown)."""
    raw = pause_marker("r", math.nan)
    assert b"NaN" not in raw
    assert (pause_reason(raw), pause_at(raw)) == ("r", None)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"yes", "it is not JSON"),
        (b"[" * 60_000, "nested more than 4 levels"),
        (b'{"reason": "a", "reason": "b"}', "the key 'reason' more than once"),
        (b'{"reason": "x", "at": NaN}', "NaN is not a JSON number"),
        (b"\xff", "not UTF-8"),
        (b'"just a string"', "it is not a JSON object"),
        (b'{"reason": 7}', 'it has no "reason" string'),
        (b"{}", 'it has no "reason" string'),
    ],
)
def test_an_unreadable_marker_still_pauses_and_says_why(raw: bytes, problem: str) -> None:
    """A marker that does not decode gives 'unreadable pause marker (<why>)', never raises."""
    reason = pause_reason(raw)
    assert reason.startswith("unreadable pause marker (")
    assert problem in reason


def test_an_oversized_marker_is_not_read() -> None:
    """A marker over 64 KiB is refused by size (it still pauses)."""
    raw = pause_marker("x" * 70_000, 1.0)
    assert "more than the limit of 65536" in pause_reason(raw)
    assert pause_at(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"reason": "r", "at": 1e300}',
        b'{"reason": "r", "at": 1e999}',
        b'{"reason": "r", "at": NaN}',
        b'{"reason": "r", "at": -1}',
        b'{"reason": "r", "at": true}',
        b'{"reason": "r", "at": "yesterday"}',
        b'{"reason": "r"}',
        b"[" * 100_000,
    ],
)
def test_an_insane_time_is_unknown(raw: bytes) -> None:
    """at beyond year 9999, negative, non-finite, not a number or missing gives None."""
    assert pause_at(raw) is None


def test_pause_at_bounds() -> None:
    """0 and the last second of year 9999 are accepted; None means no marker."""
    assert pause_at(b'{"reason": "r", "at": 0}') == 0.0
    assert pause_at(pause_marker("r", LATEST_PAUSE_AT)) == LATEST_PAUSE_AT
    assert pause_at(None) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_give_a_reason_and_a_time_or_none(raw: bytes) -> None:
    """pause_reason and pause_at never raise, whatever the marker holds."""
    assert isinstance(pause_reason(raw), str)
    at = pause_at(raw)
    assert at is None or 0 <= at <= LATEST_PAUSE_AT
