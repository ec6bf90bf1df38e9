"""When a listing is broken: the same place twice, or more pages than a prefix can hold.

A store that answers a listing prefix with ``IsTruncated=true`` and a continuation token
it has given before (or, past a skip, sends the lister back to a start key it already
listed from) would be paged through forever: the round never ends, the daemon never
applies a newer M, and every counter looks busy. `ListingGuard` watches one listing
range's cursors (start key, continuation token) as the lister moves on:

* a cursor seen before in this range's listing means the store is broken (it cannot
  make progress: a correct store never sends a lister back where it was);
* more than `max_pages` pages for one range is refused too (a store inventing new tokens
  forever; the bound is documented and configurable: ``--max-pages-per-prefix``).

Either way the lister stops that range and reports it by name, as for a prefix that
cannot be listed (one error; the rest of the round goes on). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["DEFAULT_MAX_PAGES", "ListingGuard"]

DEFAULT_MAX_PAGES: Final = 100_000
"""Pages one listing range may take (100 million keys at 1000 a page)."""


@dataclass(slots=True)
class ListingGuard:
    """The cursors one listing range has been at; `advance` says when it is broken."""

    max_pages: int = DEFAULT_MAX_PAGES
    pages: int = 0
    seen: set[tuple[str | None, str | None]] = field(default_factory=set)

    def advance(self, start_after: str | None, token: str | None) -> str | None:
        """Record that a page came back and the listing goes on at (`start_after`,
        `token`); the reason it must stop, or None."""
        self.pages += 1
        if self.pages >= self.max_pages:
            return f"more than {self.max_pages} pages (--max-pages-per-prefix)"
        cursor = (start_after, token)
        if cursor in self.seen:
            where = (
                f"continuation token {token!r}"
                if token is not None
                else (f"start key {start_after!r}")
            )
            return f"the store sent the listing back to a {where} it had already given"
        self.seen.add(cursor)
        return None
