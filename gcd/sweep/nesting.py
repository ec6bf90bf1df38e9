"""Claims found below the root while a round lists: the subtrees no key is deleted from.

Design notes: docs/internals/sweep.md, `gcd.sweep.nesting`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from gcd.storage.objectstore import ListPage
from l0gc.contract.binding import (
    CLAIM_NAME,
    any_may_precede_claim,
    claim_key,
    covering_root,
    directories_below,
    may_precede_claim,
    nested_root,
)
from l0gc.errors import StorageError

__all__ = ["NestedRoots"]

log = structlog.get_logger("gcd.sweeper")

Probe = Callable[[str], Awaitable[bool]]
"""Whether an object with exactly this key exists (one one-key LIST)."""


class NestedRoots:
    """The roots claimed below `root` that this round has found (one per round)."""

    def __init__(self, root: str, probe: Probe, *, ordered: bool = True) -> None:
        self.root = root
        self.ordered = ordered
        """False: the listing has no order, so no page tells a claim is absent."""
        self.found: dict[str, str] = {}
        """Nested root -> its claim object's key."""
        self._probe = probe
        self._probed: dict[str, bool] = {}

    def scan(self, prefix: str, page: ListPage) -> None:
        """Note every claim object of `page` below the root (before any key is decided)."""
        if CLAIM_NAME not in "\n".join(obj.key for obj in page.objects):
            return  # no key of the page names a claim: one search, not a test per key
        for obj in page.objects:
            nested = nested_root(obj.key, self.root)
            if nested is not None and nested not in self.found:
                self.found[nested] = obj.key
                log.error(
                    "sweep.nested_root",
                    nested_root=nested,
                    claim=obj.key,
                    root=self.root,
                    prefix=prefix,
                )

    def may_block(self, key: str) -> bool:
        """False when `blocks` would say None without a look (no nested root found, an
        ordered listing, and no directory of `key` whose claim would sort after it):
        the common case, decided without a coroutine per key."""
        return bool(self.found) or not self.ordered or any(may_precede_claim(key, self.root))

    def page_may_block(self, keys: Sequence[str]) -> bool:
        """False when `may_block` is False for every key of `keys` (one look at the page)."""
        return bool(self.found) or not self.ordered or any_may_precede_claim(keys)

    async def blocks(self, key: str, page: ListPage) -> str | None:
        """The nested root that keeps `key` (a key of `page` about to be deleted), or None."""
        covered = covering_root(key, self.root, self.found)
        if covered is not None:
            return covered
        last = page.objects[-1].key if page.objects else key
        ordered = self.ordered
        directories = may_precede_claim if ordered else directories_below
        for directory in directories(key, self.root):
            claim = claim_key(directory)
            if ordered and (page.next_token is None or last.encode() >= claim.encode()):
                continue  # this page lists past where the claim would be: scan() saw it
            if directory not in self._probed:
                try:
                    self._probed[directory] = await self._probe(claim)
                except StorageError as exc:  # cannot tell: keep the key this round
                    log.warning("sweep.nested_probe_failed", claim=claim, code=exc.code)
                    return directory
            if self._probed[directory]:
                self.found.setdefault(directory, claim)
                log.error("sweep.nested_root", nested_root=directory, claim=claim, root=self.root)
                return directory
        return None
