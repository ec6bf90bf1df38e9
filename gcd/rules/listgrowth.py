"""How many LIST streams a round runs: one, and one more only while more pays (pure).

Theory of operation
-------------------
More listers help where a LIST waits on latency (a remote store: each answer takes tens
of milliseconds whatever else is in flight), and only add work where the store's CPU is
the limit (a self-hosted server such as SeaweedFS on the sweeper's machine: another
stream's LISTs take CPU from the deletes and the listing gets no faster; each stream
also starts with probe pages, bench/RESULTS.md section 28). So a round starts with one
lister, and `ListerGrowth.grow` allows one more only when

1. the delete pipeline waits on the listing (the caller says so: the batch queue is
   empty and a deleter task is waiting for it), and
2. the current number of listers has had its say: it has examined at least
   `SETTLE_PAGES` pages per lister since it began, and
3. going from k - 1 to k listers paid: the pages examined per second with k listers
   is at least `1 + MIN_SHARE / (k - 1)` times what k - 1 achieved (with a latency-bound
   store k listers examine k / (k - 1) times as many pages per second; `MIN_SHARE` =
   1/2 asks for half of that gain). When it did not pay, the count is pinned for the
   rest of the round: the store, not the listing, is the limit.

A count's rate is that of its latest `SETTLE_PAGES` pages per lister, taken when it is
judged: the first pages of a round are small probes listed while nothing is deleted
yet, and judged over them one lister would look faster than it is once the deletes
compete with it for the store.

Pages per second, not keys: in a listing that skips, pages are small probes and the
keys they return say little about progress; in a dense one, pages are full after the
first few. A store whose LIST cost grows with the page makes the first (probe) pages
look fast, which can only make growing look less worth it: it errs towards fewer
streams, which is the cheap side.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["MIN_SHARE", "SETTLE_PAGES", "ListerGrowth"]

SETTLE_PAGES = 3
"""Pages each lister examines before the count is judged (per lister of the count)."""
MIN_SHARE = 0.5
"""The share of a latency-bound store's gain one more lister must bring to be kept."""


@dataclass
class ListerGrowth:
    """How many listers a round may run (`allowed`), grown one at a time; see the module."""

    most: int
    """The most listers a round may run (`--list-concurrency`)."""
    allowed: int = 1
    pinned: bool = False
    """True once one more lister did not pay: `allowed` stays for the round."""
    latest: deque[float] = field(default_factory=deque)
    """When the latest pages of the current count were examined (its window)."""
    rates: list[float] = field(default_factory=list)
    """Pages per second of each count that was judged (1, 2, ... listers)."""

    def __post_init__(self) -> None:
        if self.most < 1:
            raise ValueError(f"at most {self.most!r} listers: must be >= 1")

    def _window(self) -> int:
        return SETTLE_PAGES * self.allowed

    def page(self, now_s: float) -> None:
        """A lister examined a page at `now_s` (a monotonic clock's reading)."""
        self.latest.append(now_s)
        if len(self.latest) > self._window():
            self.latest.popleft()

    def settled(self) -> bool:
        """True once the current count has examined a whole window of pages."""
        return len(self.latest) >= self._window()

    def rate(self) -> float:
        """Pages per second over the current count's window (settled: >= 3 pages)."""
        return (len(self.latest) - 1) / max(self.latest[-1] - self.latest[0], 1e-9)

    def grow(self, *, starved: bool) -> bool:
        """Whether one more lister may start now (then `allowed` counts it); `starved`:
        the deleters wait on the listing. Judges the current count once it `settled`."""
        if self.pinned or self.allowed >= self.most or not starved or not self.settled():
            return False
        rate = self.rate()
        if self.rates and rate < self.rates[-1] * (1 + MIN_SHARE / (self.allowed - 1)):
            self.pinned = True
            return False
        self.rates.append(rate)
        self.allowed += 1
        self.latest.clear()
        return True
