"""Skip-ahead: where the next listing request starts (pure, no I/O).

Design notes: docs/internals/rules.md, `gcd.rules.cursor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gcd.rules.layout import PREFIX_COUNT, PREFIX_WIDTH, KeyLayout, ParsedKey

__all__ = [
    "PROBE_GROWTH",
    "PROBE_KEYS",
    "Cursor",
    "Skip",
    "can_skip",
    "directory_prefixes",
    "first_page_size",
    "next_cursor",
    "next_page_size",
    "skip",
]

PROBE_KEYS: Final = 32  # keys asked for by the page that starts a directory
PROBE_GROWTH: Final = 4  # the next page asks for this many times more while none skips


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a LIST starts: S3's continuation token when set (it wins), else after a key."""

    start_after: str | None = None
    token: str | None = None


@dataclass(frozen=True, slots=True)
class Skip:
    """The rest of a prefix directory is above M: go on after `start_after`.

    `start_after` None: nothing after that directory is under the listing prefix,
    which is done.
    """

    start_after: str | None

    @property
    def done(self) -> bool:
        """True when the listing prefix has nothing left to list."""
        return self.start_after is None


def can_skip(layout: KeyLayout) -> bool:
    """True when keys of one prefix directory sort by epoch (padded, with a prefix)."""
    return layout.padded and layout.has_prefix


def skip(
    layout: KeyLayout, listing_prefix: str, parsed: ParsedKey | None, safe_epoch: int
) -> Skip | None:
    """The skip a listed key calls for, or None (it is at or below M, or cannot skip).

    `parsed` is the key parsed with `layout` (None when it did not parse: no skip),
    `listing_prefix` the prefix the key was listed under.
    """
    if parsed is None or parsed.prefix is None or parsed.epoch <= safe_epoch:
        return None
    if not can_skip(layout):
        return None
    root = layout.listing_root
    directory = parsed.prefix
    more_dirs = directory + 1 < PREFIX_COUNT and f"{root}{directory + 1:03d}/".startswith(
        listing_prefix
    )
    if more_dirs or listing_prefix == root:
        return Skip(f"{root}{directory:03d}0")
    return Skip(None)


def next_cursor(
    cursor: Cursor, found: Skip | None, last_key: str | None, next_token: str | None
) -> Cursor | None:
    """Where the listing goes on after a page; None: this listing prefix is done.

    `cursor` is where the page started, `found` the last skip its keys called for,
    `last_key` its last key (None for an empty page), `next_token` its continuation
    token (None on the last page).
    """
    if next_token is None or (found is not None and found.done):
        return None
    skip_to = found.start_after if found is not None else None
    if skip_to is not None and (last_key or "") <= skip_to:
        return Cursor(skip_to, None)
    return Cursor(cursor.start_after, next_token)


def directory_prefixes(prefixes: list[str], root: str) -> list[str]:
    """`prefixes` (the root, or the root and 1-3 decimal digits) as prefixes ending in "/":
    the root as it is, a partial prefix as the prefix directories it covers."""
    out: list[str] = []
    for prefix in prefixes:
        width = PREFIX_WIDTH - (len(prefix) - len(root))
        if prefix == root or prefix.endswith("/") or width < 0:
            out.append(prefix)
            continue
        out += [f"{prefix}{n:0{width}d}/" if width else f"{prefix}/" for n in range(10**width)]
    return out


def first_page_size(probing: bool, full: int) -> int:
    """Keys the first LIST of a listing asks for: a probe when the listing may skip."""
    return min(full, PROBE_KEYS) if probing else full


def next_page_size(previous: int, after: Cursor, full: int, *, probing: bool) -> int:
    """Keys the LIST starting at `after` asks for, after a page that asked for `previous`.

    `after` is `next_cursor`'s answer: a cursor without a token skipped to a new
    directory, so its page is a probe; one with a token goes on where the page left
    off, every key so far eligible, so it asks for `PROBE_GROWTH` times more.
    """
    if not probing:
        return full
    if after.token is None:
        return min(full, PROBE_KEYS)
    return min(full, previous * PROBE_GROWTH)
