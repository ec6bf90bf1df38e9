"""The request-body checks, without a server (the HTTP tests drive them end to end)."""

from __future__ import annotations

import pytest

from watermark.api.http_body import (
    MAX_FENCE_TIMEOUT_S,
    MAX_FIELD_VALUE,
    BadRequest,
    BatchTooLarge,
    entries,
    int_field,
    str_field,
    timeout_field,
)
from watermark.api.limits import HttpLimits


@pytest.mark.parametrize("value", [-1, MAX_FIELD_VALUE + 1, 1.0, True, "1", None])
def test_an_integer_field_takes_only_json_integers_in_range(value: object) -> None:
    """Floats, booleans, strings, negatives and values past 2**63 - 1 are refused."""
    with pytest.raises(BadRequest, match="'offset'"):
        int_field({"offset": value}, "offset")


def test_an_integer_field_keeps_the_bounds() -> None:
    """0 and 2**63 - 1 are taken as they are."""
    assert int_field({"e": 0}, "e") == 0
    assert int_field({"e": MAX_FIELD_VALUE}, "e") == MAX_FIELD_VALUE


def test_a_string_field_must_be_non_empty_and_names_where() -> None:
    """An empty or missing string is refused, naming the batch entry."""
    with pytest.raises(BadRequest, match=r"fences\[2\]\.'partition'"):
        str_field({"partition": ""}, "partition", "fences[2].")


def test_a_batch_holds_exact_entries_within_the_limit() -> None:
    """Too many entries is 413; an entry with a field too many or too few is 400."""
    limits = HttpLimits(max_batch_entries=2)
    doc = {"commits": [{"token": "t", "offset": 1}, {"token": "u", "offset": 2}]}
    assert entries(doc, "commits", ("token", "offset"), limits) == doc["commits"]
    with pytest.raises(BatchTooLarge):
        entries(
            {"commits": [{"token": "t", "offset": 1}] * 3}, "commits", ("token", "offset"), limits
        )
    with pytest.raises(BadRequest, match=r"commits\[0\]"):
        entries({"commits": [{"token": "t"}]}, "commits", ("token", "offset"), limits)


def test_a_timeout_is_a_positive_number_of_seconds_up_to_the_cap() -> None:
    """The default stands in when absent; 0, past the cap and booleans are refused."""
    assert timeout_field({}, 5.0) == 5.0
    assert timeout_field({"timeout_s": 2}, 5.0) == 2.0
    for bad in (0, MAX_FENCE_TIMEOUT_S + 1, True, "5"):
        with pytest.raises(BadRequest, match="timeout_s"):
            timeout_field({"timeout_s": bad}, 5.0)
