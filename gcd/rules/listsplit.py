"""Listing ranges: how listers share the key space when a listing prefix holds most keys (pure).

Design notes: docs/internals/rules.md, `gcd.rules.listsplit`.
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
