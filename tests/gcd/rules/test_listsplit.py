"""Listing ranges: the back half of a range goes to another lister; every key in exactly one."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.rules.layout import KeyLayout
from gcd.rules.listsplit import ListRange, split_range

LAYOUT = KeyLayout.default("r")
ROOT = LAYOUT.listing_root


def key(prefix: int, epoch: int = 5, name: str = "x") -> str:
    return LAYOUT.format(prefix, epoch, name)


def test_split_cuts_the_directories_left_in_two_halves() -> None:
    """After a key of directory 017 in {root}0: 018-058 stay, 059-099 go to another lister."""
    front, back = split_range(LAYOUT, ListRange(f"{ROOT}0"), key(17)) or (None, None)
    assert front == ListRange(f"{ROOT}0", None, f"{ROOT}0580")
    assert back == ListRange(f"{ROOT}0", f"{ROOT}0580", None)
    assert front.owns(key(58, 10**18 - 1, "zzz"))
    assert not front.owns(key(59, 0, "0"))
    # the back half is split again at its own last directory
    again = split_range(LAYOUT, back, key(60))
    assert again == (ListRange(f"{ROOT}0", f"{ROOT}0580", f"{ROOT}0800"),
                     ListRange(f"{ROOT}0", f"{ROOT}0800", None))  # fmt: skip
    # a range with an end splits what is left up to its end
    halves = split_range(LAYOUT, front, key(20))
    assert halves is not None
    assert halves[0].end == f"{ROOT}0390"
    assert halves[1] == ListRange(f"{ROOT}0", f"{ROOT}0390", f"{ROOT}0580")


def test_no_split_without_two_directories_left_or_outside_the_directories() -> None:
    """Too little left, a key in no directory, a layout without prefixes: no split."""
    assert split_range(LAYOUT, ListRange(f"{ROOT}0"), key(98)) is None
    assert split_range(LAYOUT, ListRange(f"{ROOT}0"), key(97)) is not None
    assert split_range(LAYOUT, ListRange(f"{ROOT}417"), key(417)) is None
    assert split_range(LAYOUT, ListRange(f"{ROOT}0"), f"{ROOT}0ab") is None
    assert split_range(LAYOUT, ListRange(f"{ROOT}0"), f"{ROOT}0\u0663\u0663/x") is None
    assert split_range(LAYOUT, ListRange(ROOT), f"{ROOT}.claim") is None
    flat = KeyLayout.custom(root="r", pattern=r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
                            template="{epoch}/{name}")  # fmt: skip
    assert split_range(flat, ListRange(ROOT), f"{ROOT}100/x") is None


def test_whole_root_splits_up_to_999_and_keeps_what_is_beside() -> None:
    """Splitting the whole root: the back half keeps no end, so junk after 999 is listed."""
    halves = split_range(LAYOUT, ListRange(ROOT), key(0))
    assert halves is not None
    assert halves[0].end == f"{ROOT}5000"  # 001-500 stay, 501-999 go
    assert halves[1].end is None
    assert halves[1].owns(f"{ROOT}zzz-junk")


def test_passed_says_when_a_range_has_nothing_left() -> None:
    """A listing going on at or past the end finds no key of the range."""
    part = ListRange(f"{ROOT}0", None, f"{ROOT}0580")
    assert part.passed(f"{ROOT}0580")
    assert part.passed(f"{ROOT}0590")
    assert not part.passed(f"{ROOT}0570")
    assert not part.passed(None)
    assert not ListRange(f"{ROOT}0").passed(f"{ROOT}0990")


@settings(database=None, max_examples=80)
@given(st.lists(st.integers(0, 99), min_size=1, max_size=12))
def test_repeated_splits_own_every_key_exactly_once(positions: list[int]) -> None:
    """However ranges are split, each key of the prefix (junk too) is owned by one range."""
    ranges = [ListRange(f"{ROOT}0")]
    for position in positions:
        # split the range that holds the position's directory, as its lister would
        for index, part in enumerate(ranges):
            probe = key(position)
            if (part.start_after is None or probe > part.start_after) and part.owns(probe):
                halves = split_range(LAYOUT, part, probe)
                if halves is not None:
                    ranges[index : index + 1] = list(halves)
                break
    keys = [key(p, e, n) for p, e, n in itertools.product(range(100), (0, 10**18 - 1), ("0", "~"))]
    keys += [f"{ROOT}0", f"{ROOT}0!", f"{ROOT}0490", f"{ROOT}0491", f"{ROOT}05", f"{ROOT}0zz"]
    for listed in keys:
        owners = [p for p in ranges if (p.start_after or "") < listed and p.owns(listed)]
        assert len(owners) == 1, (listed, ranges)
