"""Skip-ahead: where the next LIST starts, with one end condition for sweeper and Spark."""

from __future__ import annotations

from gcd.rules.cursor import (
    PROBE_GROWTH,
    PROBE_KEYS,
    Cursor,
    Skip,
    can_skip,
    directory_prefixes,
    first_page_size,
    next_cursor,
    next_page_size,
    skip,
)
from gcd.rules.layout import KeyLayout

LAYOUT = KeyLayout.default("r")
ROOT = LAYOUT.listing_root
M = 10


def parsed(prefix: int, epoch: int) -> object:
    return LAYOUT.parse(LAYOUT.format(prefix, epoch, "x"))


def test_key_at_or_below_m_never_skips() -> None:
    """Only an epoch above M skips: M itself is still deletable."""
    assert skip(LAYOUT, ROOT, LAYOUT.parse(LAYOUT.format(417, M, "x")), M) is None
    assert skip(LAYOUT, ROOT, None, M) is None


def test_skip_point_sorts_between_two_directories() -> None:
    """The skip point is above every key of the directory and below the next one's."""
    found = skip(LAYOUT, ROOT, LAYOUT.parse(LAYOUT.format(417, M + 1, "x")), M)
    assert found == Skip(f"{ROOT}4170")
    assert found.start_after is not None
    assert LAYOUT.format(417, 10**18 - 1, "zzz") < found.start_after
    assert found.start_after < LAYOUT.format(418, 0, "0")


def test_end_condition_at_a_listing_prefix_boundary() -> None:
    """Skipping the last directory under a listing prefix ends it; one before does not."""
    last = skip(LAYOUT, f"{ROOT}41", LAYOUT.parse(LAYOUT.format(419, M + 1, "x")), M)
    assert last is not None
    assert last.done
    before = skip(LAYOUT, f"{ROOT}41", LAYOUT.parse(LAYOUT.format(418, M + 1, "x")), M)
    assert before == Skip(f"{ROOT}4180")
    single = skip(LAYOUT, f"{ROOT}417", LAYOUT.parse(LAYOUT.format(417, M + 1, "x")), M)
    assert single is not None
    assert single.done


def test_whole_root_goes_on_past_the_last_directory() -> None:
    """Listing the whole root, skipping 999 still lists on (junk beside the dirs)."""
    found = skip(LAYOUT, ROOT, LAYOUT.parse(LAYOUT.format(999, M + 1, "x")), M)
    assert found == Skip(f"{ROOT}9990")
    in_nine = skip(LAYOUT, f"{ROOT}9", LAYOUT.parse(LAYOUT.format(999, M + 1, "x")), M)
    assert in_nine is not None
    assert in_nine.done


def test_layouts_that_cannot_skip_list_everything() -> None:
    """Unpadded layouts, or layouts without a prefix, never skip."""
    unpadded = KeyLayout.custom(
        pattern=r"(?P<prefix>[0-9]{3})/(?P<epoch>[0-9]+)/(?P<name>[^/]+)",
        root="r",
        template="{prefix:03d}/{epoch}/{name}",
    )
    flat = KeyLayout.custom(
        pattern=r"(?P<epoch>[0-9]{18})/(?P<name>[^/]+)",
        root="r",
        epoch_width=18,
        template="{epoch:018d}/{name}",
    )
    assert can_skip(LAYOUT)
    assert not can_skip(unpadded)
    assert not can_skip(flat)
    assert skip(unpadded, ROOT, unpadded.parse(unpadded.format(417, M + 1, "x")), M) is None
    assert skip(flat, ROOT, flat.parse(flat.format(None, M + 1, "x")), M) is None


def test_next_cursor_after_a_page() -> None:
    """Last page or a finished prefix: done; a page ending inside the skipped directory
    goes on at the skip point; one ending past it goes on at the continuation token."""
    start = Cursor("s", None)
    point = f"{ROOT}4170"
    assert next_cursor(start, None, "k", None) is None
    assert next_cursor(start, Skip(None), "k", "tok") is None
    assert next_cursor(start, Skip(point), f"{ROOT}417/x", "tok") == Cursor(point, None)
    assert next_cursor(start, Skip(point), f"{ROOT}418/x", "tok") == Cursor("s", "tok")
    assert next_cursor(start, None, f"{ROOT}417/x", "tok") == Cursor("s", "tok")
    assert next_cursor(start, Skip(point), None, "tok") == Cursor(point, None)


def test_skipping_998_goes_on_to_999_under_every_listing_prefix() -> None:
    """Directory 998 is not the last: under `{root}9` and `{root}99` the listing goes on
    after it, so directory 999 is listed (its garbage is not left forever)."""
    for prefix in (f"{ROOT}9", f"{ROOT}99", ROOT):
        found = skip(LAYOUT, prefix, LAYOUT.parse(LAYOUT.format(998, M + 1, "x")), M)
        assert found == Skip(f"{ROOT}9980"), prefix
        assert not found.done
    last = skip(LAYOUT, f"{ROOT}99", LAYOUT.parse(LAYOUT.format(999, M + 1, "x")), M)
    assert last == Skip(None)
    assert skip(LAYOUT, f"{ROOT}999", LAYOUT.parse(LAYOUT.format(999, M + 1, "x")), M) == Skip(None)


def test_a_page_ending_at_the_skip_point_goes_on_after_it() -> None:
    """A page whose last key is the skip point itself (junk named like it) goes on after
    that point, not at the continuation token: nothing below it is listed again."""
    point = f"{ROOT}4170"
    assert next_cursor(Cursor("s", None), Skip(point), point, "tok") == Cursor(point, None)
    assert next_cursor(Cursor("s", None), Skip(point), point + "0", "tok") == Cursor("s", "tok")


def test_directory_prefixes_cover_each_partial_prefix_with_its_directories() -> None:
    """Unordered listings need prefixes ending in '/': the root stays as it is, a partial
    prefix becomes exactly the 3-digit directories it covers, in order; a prefix that is
    already a directory (or longer) is kept."""
    root = "level_zero/data/"
    assert directory_prefixes([root], root) == [root]
    assert directory_prefixes([root + "4"], root) == [f"{root}4{n:02d}/" for n in range(100)]
    assert directory_prefixes([root + "41"], root) == [f"{root}41{n}/" for n in range(10)]
    assert directory_prefixes([root + "417"], root) == [f"{root}417/"]
    assert directory_prefixes([root + "417/"], root) == [f"{root}417/"]
    assert directory_prefixes([root + "4170"], root) == [f"{root}4170"]
    both = directory_prefixes([root + "9", root + "23"], root)
    assert both == [f"{root}9{n:02d}/" for n in range(100)] + [f"{root}23{n}/" for n in range(10)]
    assert directory_prefixes([], root) == []


def test_page_sizes_probe_a_directory_and_grow_while_nothing_skips() -> None:
    """A page that starts a directory asks for few keys; each page that went on asks for
    4x more up to the full page; a listing that cannot skip always asks for full pages."""
    assert (PROBE_KEYS, PROBE_GROWTH) == (32, 4)
    assert first_page_size(True, 1000) == 32
    assert first_page_size(False, 1000) == 1000
    assert first_page_size(True, 3) == 3  # never more than the configured page
    sizes = [first_page_size(True, 1000)]
    for _ in range(4):
        sizes.append(next_page_size(sizes[-1], Cursor(None, "token"), 1000, probing=True))
    assert sizes == [32, 128, 512, 1000, 1000]
    jumped = Cursor(f"{ROOT}4170", None)  # next_cursor's answer after a skip
    assert next_page_size(1000, jumped, 1000, probing=True) == 32
    assert next_page_size(32, jumped, 1000, probing=False) == 1000
    assert next_page_size(32, Cursor(None, "token"), 1000, probing=False) == 1000
