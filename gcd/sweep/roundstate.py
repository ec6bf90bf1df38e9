"""The state of one sweeper round in progress, shared by its lister, decider and deleters.

A round (`gcd.sweep.sweeper.Sweeper.sweep`) is one `RoundState`: what the round found
out about the store (versioned, unordered, its listing prefixes), its live counters
(`RoundCounts`), the batch being cut, and the flags that end it early (the delete cap,
the round deadline). The listers (`gcd.sweep.listing`) and the page decider
(`gcd.sweep.pages`) change it between awaits of one event loop, so it needs no lock;
it lives in a module of its own so the three can share it without importing each
other. Batches go to the deleter tasks through a `BatchQueue` (a None ends a task).
`RoundSettings` is what they read of the round's configuration: the fields of
`gcd.sweep.sweeper.RoundConfig` they use, as a protocol, so they need not import the
module that drives them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from gcd.observe.events import DeleteBasis
from gcd.observe.report import RoundCounts
from gcd.rules.candidate import Candidate
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import StoreFeatures
from gcd.sweep.nesting import NestedRoots
from gcd.undo.window import KeyGroups

__all__ = ["BatchQueue", "RoundSettings", "RoundState"]

BatchQueue: TypeAlias = "asyncio.Queue[list[Candidate] | None]"
"""Batches from the listers to the deleter tasks; None tells a deleter task to end."""


class RoundSettings(Protocol):
    """The configuration a round's lister and decider read (`RoundConfig` documents each)."""

    @property
    def layout(self) -> KeyLayout: ...
    @property
    def grace_s(self) -> float: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def list_concurrency(self) -> int: ...
    @property
    def max_deletes(self) -> int | None: ...
    @property
    def dry_run(self) -> bool: ...
    @property
    def page_size(self) -> int: ...
    @property
    def round_deadline_s(self) -> float: ...
    @property
    def request_deadline_s(self) -> float: ...
    @property
    def max_pages_per_prefix(self) -> int: ...


@dataclass
class RoundState:
    """Live counters and coordination of one round."""

    safe_epoch: int
    basis: DeleteBasis
    counts: RoundCounts = field(default_factory=RoundCounts)
    batch: list[Candidate] = field(default_factory=list)
    young_ready_at_s: float | None = None
    max_deleted_epoch: int | None = None
    capped: bool = False
    incomplete: bool = False
    unparsable_logged: int = 0
    versioned: bool = False
    """Listing versions and deleting by version id (a versioned bucket, RECLAIM)."""
    skip_ahead: bool = True
    unordered: bool = False
    """The store lists out of order (no skip-ahead, no StartAfter, claims probed)."""
    prefixes: list[str] = field(default_factory=list)
    deadline_hit: bool = False
    """The round's listing was stopped by `RoundConfig.round_deadline_s`."""
    features: StoreFeatures | None = None
    nested: NestedRoots | None = None
    groups: KeyGroups | None = None
    """Undo window on a versioned bucket: every version of a key is planned together."""
    ceiling: int | None = None
    """Undo window on a store without versions: the delayed M (-1: none yet)."""
    undo_rule: str | None = None
    soft_delete_s: float | None = None
    """The store's own soft delete retention (`SoftDeleteStore`), read with a window."""
    waiting_deleters: int = 0
    """Deleter tasks waiting for a batch (the listing decides whether to grow by it)."""

    def starved(self, queue: BatchQueue) -> bool:
        """True when the deleters wait on the listing: no batch queued, a deleter idle."""
        return queue.empty() and self.waiting_deleters > 0

    def full(self) -> bool:
        """True once the per-round delete cap is reached."""
        return self.capped

    async def pass_on(self, queue: BatchQueue, batch_size: int = 1) -> None:
        """Hand the batch being cut to the deleters once it holds `batch_size` keys (1:
        whenever it holds any)."""
        if self.batch and len(self.batch) >= batch_size:
            batch, self.batch = self.batch, []
            await queue.put(batch)
