"""How many LIST streams a round runs: one, and one more only while more pays (pure).

Design notes: docs/internals/rules.md, `gcd.rules.listgrowth`.
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
