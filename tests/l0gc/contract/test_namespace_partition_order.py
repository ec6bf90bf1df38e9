"""Partitions are listed as people count them (issue 42): orders/2 before orders/10."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from l0gc.contract.namespace import partition_order

NAMES = st.text(alphabet="ab/-_019", min_size=1, max_size=12)


def test_numbers_in_names_sort_as_numbers() -> None:
    """Digit runs compare as numbers, anywhere in the name; text as text."""
    names = [
        "orders/10",
        "orders/2",
        "orders/1",
        "audit",
        "orders/2/9",
        "orders/2/10",
        "orders10",
        "orders9",
        "b/0",
        "a/100",
    ]
    assert sorted(names, key=partition_order) == [
        "a/100",
        "audit",
        "b/0",
        "orders9",
        "orders10",
        "orders/1",
        "orders/2",
        "orders/2/9",
        "orders/2/10",
        "orders/10",
    ]


def test_names_equal_as_numbers_keep_a_fixed_order() -> None:
    """a/01 and a/1 are different partitions: both listed, in one order every time."""
    assert sorted(["a/1", "a/01"], key=partition_order) == sorted(
        ["a/01", "a/1"], key=partition_order
    )
    assert partition_order("a/01") != partition_order("a/1")


@given(st.lists(NAMES, unique=True))
def test_the_order_is_total_and_loses_nothing(names: list[str]) -> None:
    """Sorting by the key keeps every name once; no two names share a key (a total order)."""
    ordered = sorted(names, key=partition_order)
    assert sorted(ordered) == sorted(names)
    assert len({partition_order(n) for n in names}) == len(names)


def test_a_digit_run_longer_than_int_allows_still_sorts() -> None:
    """A forged etcd key with 5,000 digits (over `int()`'s 4,300) sorts, by value."""
    huge = "a/1" + "0" * 5000
    assert sorted([huge, "a/9", "a/" + "0" * 4999 + "7"], key=partition_order) == [
        "a/" + "0" * 4999 + "7",
        "a/9",
        huge,
    ]
