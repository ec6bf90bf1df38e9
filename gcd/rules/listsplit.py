"""Listing ranges: how listers share the key space when a listing prefix holds most keys (pure).

Theory of operation
-------------------
A sweeper lists its listing prefixes (``{root}/0`` ... ``{root}/9`` when several
listers may run) with up to `list_concurrency` listers. Keys are not spread evenly over
them: with prefix directories 000-099 every key is under ``{root}/0``, and one lister
would page through all of it while the others idle. So the work is a set of ranges: a
`ListRange` is part of a listing prefix (`prefix`, which the round's bookkeeping counts
by): the keys under a narrower prefix (`within`, None: the listing prefix itself), after
`start_after` (None: from the beginning).

When another lister may start, a lister that has just read a page narrows its own range
(`narrow`): the page's last key says which child prefix it is in (``{root}/04`` for a
key of directory 043 under ``{root}/0``); it goes on in that child only, after the key,
and the children after it (``{root}/05`` ... ``{root}/09``) become ranges of their own
for other listers, with one more range for the rest of its prefix after the last digit
child (keys beside the directories, e.g. ``{root}/0zz``: listed, counted as
unparsable). Every key of the prefix is in exactly one range.

Why prefixes, not key ranges with an end: a LIST has no end key, and its page size
counts keys returned, not entries walked. A lister near the end of a key range would
ask the store for a page that runs into the next range, which the next range's lister
has been emptying meanwhile; a store with directories (SeaweedFS keeps a directory per
``/`` level, and removes the emptied ones minutes later) then walks every emptied
directory to fill the page. That walk grew with the bucket (bench/RESULTS.md section
28). A prefix ends where its keys end: the store stops there.

Ranges are narrowed only in a layout with 3-digit prefix directories, down to one
directory (``{root}/043``): keys of one directory are never split between listers.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcd.rules.layout import PREFIX_WIDTH, KeyLayout

__all__ = ["AFTER_DIGITS", "ListRange", "narrow"]

AFTER_DIGITS = "9\U0010ffff"
"""Appended to a prefix: above every key of its children 0-9 (a child's keys start with
a digit, and no character sorts above U+10FFFF), below the keys beside them."""


@dataclass(frozen=True, slots=True)
class ListRange:
    """Part of listing prefix `prefix`: the keys under `within` after `start_after`."""

    prefix: str
    start_after: str | None = None
    within: str | None = None

    @property
    def listed(self) -> str:
        """The prefix this range's LISTs ask for."""
        return self.prefix if self.within is None else self.within


def narrow(
    layout: KeyLayout, current: ListRange, last_key: str
) -> tuple[ListRange, list[ListRange]] | None:
    """`current` narrowed after `last_key`: (the range its lister goes on with, the
    ranges after it for other listers, in key order), or None when nothing can be given
    away (no prefix directories in the layout, `last_key` in none of them or beside
    them, already one directory, or no child after `last_key`'s at any depth).

    The kept range lists the child prefix holding `last_key`, after it; the given ones
    are the later children and the rest of `current` after the last digit child."""
    listed = current.listed
    root = layout.listing_root
    if not layout.has_prefix or not listed.startswith(root) or not last_key.startswith(listed):
        return None
    depth = len(listed) - len(root)
    digits = last_key[len(root) : len(root) + PREFIX_WIDTH]
    if depth >= PREFIX_WIDTH or len(digits) != PREFIX_WIDTH:
        return None
    if not (digits.isascii() and digits.isdigit()):
        return None
    here = digits[depth]
    child = ListRange(current.prefix, last_key, listed + here)
    given = [
        ListRange(current.prefix, None, listed + digit) for digit in "0123456789" if digit > here
    ]
    given.append(ListRange(current.prefix, listed + AFTER_DIGITS, listed))
    if here == "9":  # no digit child after this one here: give away deeper ones
        deeper = narrow(layout, child, last_key)
        if deeper is None:
            return None
        kept, more = deeper
        return kept, [*more, *given]
    return child, given
