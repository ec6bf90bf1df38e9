"""Listing ranges: how listers share the key space when a listing prefix holds most keys (pure).

Theory of operation
-------------------
A sweeper lists its listing prefixes (``{root}/0`` ... ``{root}/9`` when several
listers run) with `list_concurrency` listers. Keys are not spread evenly over them:
with prefix directories 000-099 every key is under ``{root}/0``, and one lister would
page through all of it while the others idle after one empty LIST each. So the work
is a set of ranges, not prefixes: a `ListRange` is a listing prefix, where in it the
range starts (`start_after`, None: at its beginning) and the last key it owns (`end`,
None: to the prefix's end). Whenever a lister would idle, a lister that has just read a
page hands the back half of the directories left in its range to it (`split_range`):
the page's last key says which directory the lister is in, and the directories after
it, up to the range's last, are cut in two halves.

The cut is a skip point as in `gcd.rules.cursor`: ``{root}/0490`` is above every key of
directory 049 and below every key of 050, so the front half owns keys up to it
(`ListRange.owns`), the back half lists after it, and every key of the prefix is in
exactly one range. A lister drops the keys beyond its range's end from a page (the
other range lists them) and is done at the first one, or when its next start is at or
past the end (`ListRange.passed`). Ranges are split only at directory boundaries of a
layout with prefixes, and only while two directories at least are left; the listing
prefixes themselves (sharding) are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcd.rules.layout import PREFIX_COUNT, PREFIX_WIDTH, KeyLayout

__all__ = ["ListRange", "split_range"]


@dataclass(frozen=True, slots=True)
class ListRange:
    """Part of a listing prefix: the keys after `start_after`, up to `end` inclusive."""

    prefix: str
    start_after: str | None = None
    end: str | None = None

    def owns(self, key: str) -> bool:
        """True when `key` (listed under `prefix`) is this range's, not a later range's."""
        return self.end is None or key <= self.end

    def passed(self, start_after: str | None) -> bool:
        """True when a listing going on after `start_after` can find no key of this range."""
        return self.end is not None and start_after is not None and start_after >= self.end


def split_range(
    layout: KeyLayout, current: ListRange, last_key: str
) -> tuple[ListRange, ListRange] | None:
    """`current` cut after `last_key`'s directory: (the front half, the back half), or None.

    The front half keeps `current`'s start and the directories up to the middle of those
    left after `last_key`'s; the back half starts after that middle directory's skip
    point and keeps `current`'s end. None: the layout has no prefix directories,
    `last_key` is in none, or fewer than two directories are left.
    """
    here = _directory(layout, last_key)
    last = _last_directory(layout, current)
    if here is None or last is None or last - here < 2:
        return None
    middle = (here + 1 + last) // 2
    cut = f"{layout.listing_root}{middle:03d}0"
    front = ListRange(current.prefix, current.start_after, cut)
    return front, ListRange(current.prefix, cut, current.end)


def _directory(layout: KeyLayout, key: str) -> int | None:
    """The prefix directory `key` is in, or None when it is in none (junk, another root)."""
    root = layout.listing_root
    digits = key[len(root) : len(root) + PREFIX_WIDTH]
    if not layout.has_prefix or not key.startswith(root) or len(digits) != PREFIX_WIDTH:
        return None
    return int(digits) if digits.isascii() and digits.isdigit() else None


def _last_directory(layout: KeyLayout, current: ListRange) -> int | None:
    """The last prefix directory `current` owns keys of."""
    root = layout.listing_root
    if current.end is not None:
        return _directory(layout, current.end)
    digits = current.prefix[len(root) :]
    if not current.prefix.startswith(root) or len(digits) > PREFIX_WIDTH:
        return None
    if not (digits == "" or (digits.isascii() and digits.isdigit())):
        return None
    return min(PREFIX_COUNT - 1, int(digits.ljust(PREFIX_WIDTH, "9")))
