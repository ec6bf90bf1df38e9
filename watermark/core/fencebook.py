"""Fences by bearer id, remembered a bounded while after they end: what makes HTTP
commits idempotent.

Design notes: docs/internals/publisher.md, `watermark.core.fencebook`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from watermark.core.fencelock import Hold

__all__ = ["DEFAULT_ENDED_HORIZON_S", "DEFAULT_MAX_ENDED", "FenceBook"]

DEFAULT_ENDED_HORIZON_S = 300.0
"""How long an ended fence is remembered at least (unless `DEFAULT_MAX_ENDED` ended since)."""
DEFAULT_MAX_ENDED = 100_000
"""How many ended fences are remembered at most (~30 MB)."""

H = TypeVar("H", bound=Hold)


class FenceBook(Generic[H]):
    """Live fences by id, and ended ones for the horizon (see the module docstring)."""

    __slots__ = ("_ended", "_live", "_swept_at", "horizon_s", "max_ended")

    def __init__(
        self, *, horizon_s: float = DEFAULT_ENDED_HORIZON_S, max_ended: int = DEFAULT_MAX_ENDED
    ) -> None:
        if horizon_s < 0 or max_ended < 0:
            raise ValueError(
                f"horizon_s and max_ended must be >= 0, got {horizon_s!r} and {max_ended!r}"
            )
        self.horizon_s = horizon_s
        self.max_ended = max_ended
        self._live: dict[str, H] = {}
        self._ended: OrderedDict[str, tuple[H, float]] = OrderedDict()
        self._swept_at = 64

    def __len__(self) -> int:
        return len(self._live) + len(self._ended)

    @property
    def live(self) -> int:
        """How many fences are live (granted, not seen to end)."""
        return len(self._live)

    @property
    def ended(self) -> int:
        """How many ended fences are remembered."""
        return len(self._ended)

    def add(self, token_id: str, hold: H, now: float) -> None:
        """Remember a granted fence under `token_id`."""
        if len(self._live) >= 2 * self._swept_at:
            self.sweep(now)
        self._live[token_id] = hold

    def get(self, token_id: str, now: float) -> H | None:
        """The fence with this id, live or ended within the horizon; None if unknown."""
        hold = self._live.get(token_id)
        if hold is not None:
            return hold
        self._expire(now)
        found = self._ended.get(token_id)
        return None if found is None else found[0]

    def finish(self, token_id: str, now: float) -> None:
        """The fence with this id ended (its hold's `outcome` is set): keep it for the
        horizon from `now`. Nothing happens for an id that is not live."""
        hold = self._live.pop(token_id, None)
        if hold is not None:
            self._ended[token_id] = (hold, now)
        self._expire(now)

    def sweep(self, now: float) -> None:
        """Move live fences that ended unnoticed (reclaimed, revoked) to the ended ones."""
        for token_id, hold in list(self._live.items()):
            if hold.outcome is not None:
                del self._live[token_id]
                self._ended[token_id] = (hold, now)
        self._swept_at = max(64, len(self._live))
        self._expire(now)

    def _expire(self, now: float) -> None:
        ended = self._ended
        while ended:
            _, (_, since) = next(iter(ended.items()))
            if len(ended) <= self.max_ended and now - since <= self.horizon_s:
                break
            ended.popitem(last=False)
