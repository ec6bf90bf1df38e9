"""l0gc.contract.namespace.expand_partitions: partition lists with ranges."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from l0gc.contract.namespace import MAX_EXPANDED_PARTITIONS, expand_partitions
from l0gc.errors import ConfigError


def test_a_range_expands_to_every_partition_in_it() -> None:
    """`orders/0-63` is the 64 partitions orders/0 ... orders/63, in order."""
    names = expand_partitions("orders/0-63")
    assert len(names) == 64
    assert names[:3] == ["orders/0", "orders/1", "orders/2"]
    assert names[-1] == "orders/63"


def test_a_bare_range_and_plain_names_mix() -> None:
    """`0-2,audit,orders/7` keeps plain names as they are, ranges expanded in place."""
    assert expand_partitions("0-2,audit,orders/7") == ["0", "1", "2", "audit", "orders/7"]


def test_zero_padded_ranges_keep_their_width() -> None:
    """`p/00-11` names p/00 ... p/11, as a padded naming scheme needs."""
    names = expand_partitions("p/00-11")
    assert names[0] == "p/00"
    assert names[9] == "p/09"
    assert names[-1] == "p/11"


def test_whitespace_and_empty_entries_are_ignored() -> None:
    """Spaces around entries and a trailing comma change nothing; an empty list is empty."""
    assert expand_partitions(" a , b/1-2 ,") == ["a", "b/1", "b/2"]
    assert expand_partitions("") == []
    assert expand_partitions(" , ") == []


def test_names_that_only_contain_dashes_are_not_ranges() -> None:
    """Only a last segment of the form LO-HI is a range: `orders-eu/3` and `a-1x` are names."""
    assert expand_partitions("orders-eu/3,a-1x,t/2-b") == ["orders-eu/3", "a-1x", "t/2-b"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("orders/9-3", "is empty: 9 > 3"),
        ("p/00-100", "same width"),
        ("0-63,5", "listed twice"),
        ("a,a", "listed twice"),
        (f"0-{MAX_EXPANDED_PARTITIONS}", "more than"),
        ("has space", "not valid"),
        ("x" * 201, "not valid"),
    ],
)
def test_bad_lists_are_refused_naming_the_entry(spec: str, message: str) -> None:
    """An empty or huge range, a duplicate or an invalid name raises ConfigError saying which."""
    with pytest.raises(ConfigError, match=message):
        expand_partitions(spec)


def test_the_whole_list_is_capped() -> None:
    """Many ranges together may not name more than MAX_EXPANDED_PARTITIONS partitions."""
    half = MAX_EXPANDED_PARTITIONS // 2
    with pytest.raises(ConfigError, match="more than"):
        expand_partitions(f"a/0-{half},b/0-{half}")


@given(
    st.sampled_from(["", "q/", "orders/", "a/b/"]),
    st.integers(0, 500),
    st.integers(0, 50),
)
def test_a_range_names_exactly_its_numbers(prefix: str, low: int, size: int) -> None:
    """For any prefix and bounds, LO-HI expands to HI-LO+1 names prefix+n, in order."""
    names = expand_partitions(f"{prefix}{low}-{low + size}")
    assert names == [f"{prefix}{n}" for n in range(low, low + size + 1)]
