"""Listing ranges: a lister narrows its range to a child prefix and gives the later
children away; every key of the listing prefix is in exactly one range."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.rules.layout import KeyLayout
from gcd.rules.listsplit import AFTER_DIGITS, ListRange, narrow

LAYOUT = KeyLayout.default("r")
ROOT = LAYOUT.listing_root


def key(prefix: int, epoch: int = 5, name: str = "x") -> str:
    return LAYOUT.format(prefix, epoch, name)


def test_a_lister_keeps_its_child_prefix_and_gives_the_later_ones_away() -> None:
    """After a key of directory 017 in {root}0: {root}01 is kept (after the key), {root}02
    ... {root}09 and the rest of {root}0 beside the digits go to other listers."""
    narrowed = narrow(LAYOUT, ListRange(f"{ROOT}0"), key(17))
    assert narrowed is not None
    kept, given_away = narrowed
    assert kept == ListRange(f"{ROOT}0", key(17), f"{ROOT}01")
    assert kept.listed == f"{ROOT}01"
    assert [part.listed for part in given_away] == [f"{ROOT}0{d}" for d in "23456789"] + [
        f"{ROOT}0"
    ]
    assert all(part.prefix == f"{ROOT}0" for part in given_away)  # counted by their prefix
    assert given_away[-1].start_after == f"{ROOT}0{AFTER_DIGITS}"
    # narrowed again, one level down: one directory is the narrowest
    again = narrow(LAYOUT, kept, key(17, 9))
    assert again is not None
    assert again[0] == ListRange(f"{ROOT}0", key(17, 9), f"{ROOT}017")
    assert [part.listed for part in again[1]] == [f"{ROOT}01{d}" for d in "89"] + [f"{ROOT}01"]
    assert narrow(LAYOUT, again[0], key(17, 10)) is None


def test_a_key_in_the_last_child_gives_away_deeper_ones() -> None:
    """Directory 093 under {root}0: no child after {root}09, so {root}094-099 go, then
    the rest of {root}09 and of {root}0 beside the digits, in key order."""
    narrowed = narrow(LAYOUT, ListRange(f"{ROOT}0"), key(93))
    assert narrowed is not None
    kept, given_away = narrowed
    assert kept.listed == f"{ROOT}093"
    assert [part.listed for part in given_away] == [
        *(f"{ROOT}09{d}" for d in "456789"),
        f"{ROOT}09",
        f"{ROOT}0",
    ]
    assert narrow(LAYOUT, ListRange(f"{ROOT}0"), key(99)) is None  # nothing after 099


def test_nothing_is_given_away_outside_the_directories() -> None:
    """A key in no directory, beside them, another prefix's, a layout without prefixes."""
    assert narrow(LAYOUT, ListRange(f"{ROOT}417"), key(417)) is None
    assert narrow(LAYOUT, ListRange(f"{ROOT}0"), f"{ROOT}0ab") is None
    assert narrow(LAYOUT, ListRange(f"{ROOT}0"), f"{ROOT}0\u0663\u0663/x") is None
    assert narrow(LAYOUT, ListRange(ROOT), f"{ROOT}.claim") is None
    assert narrow(LAYOUT, ListRange(f"{ROOT}1"), key(17)) is None
    flat = KeyLayout.custom(
        root="r", pattern=r"(?P<epoch>[0-9]+)/(?P<name>[^/]+)", template="{epoch}/{name}"
    )
    assert narrow(flat, ListRange(ROOT), f"{ROOT}100/x") is None


def test_the_whole_root_narrows_to_a_digit_child() -> None:
    narrowed = narrow(LAYOUT, ListRange(ROOT), key(0))
    assert narrowed is not None
    assert narrowed[0].listed == f"{ROOT}0"
    assert [part.listed for part in narrowed[1]][-1] == ROOT  # junk after 999 is listed


def owner_count(ranges: list[ListRange], listed: str) -> int:
    return sum(
        1 for part in ranges if listed.startswith(part.listed) and (part.start_after or "") < listed
    )


@settings(database=None, max_examples=80)
@given(st.lists(st.integers(0, 99), min_size=1, max_size=12))
def test_repeated_narrowing_leaves_every_key_in_exactly_one_range(positions: list[int]) -> None:
    """However ranges are narrowed, each key of the prefix (junk too) not listed yet is
    in exactly one range: the narrowed one from its lister's last key, or one given."""
    ranges = [ListRange(f"{ROOT}0")]
    examined: set[str] = set()
    keys = [key(p, e, n) for p, e, n in itertools.product(range(100), (0, 10**18 - 1), ("0", "~"))]
    keys += [f"{ROOT}0", f"{ROOT}0!", f"{ROOT}0490", f"{ROOT}0491", f"{ROOT}05", f"{ROOT}0zz"]
    for position in positions:
        probe = key(position)
        for index, part in enumerate(ranges):  # the range whose lister is at `probe`
            if probe.startswith(part.listed) and (part.start_after or "") < probe:
                # its lister has examined every key of it up to `probe`
                examined |= {
                    k
                    for k in keys
                    if k.startswith(part.listed) and (part.start_after or "") < k <= probe
                }
                narrowed = narrow(LAYOUT, ListRange(part.prefix, probe, part.within), probe)
                if narrowed is not None:
                    ranges[index : index + 1] = [narrowed[0], *narrowed[1]]
                else:
                    ranges[index] = ListRange(part.prefix, probe, part.within)
                break
    for listed in keys:
        expected = 0 if listed in examined else 1
        assert owner_count(ranges, listed) == expected, (listed, ranges)
