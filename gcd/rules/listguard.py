"""When a listing is broken: the same place twice, or more pages than a prefix can hold.

Design notes: docs/internals/rules.md, `gcd.rules.listguard`.
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
