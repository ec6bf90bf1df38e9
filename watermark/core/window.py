"""The fencing window: which cluster epochs a partition leader lets writers commit.

Design notes: docs/internals/publisher.md, `watermark.core.window`.
"""

from __future__ import annotations

import enum
from typing import Self

from l0gc.errors import IllegalTransition, StaleEpoch

__all__ = ["Admission", "EpochWindow"]


class Admission(enum.Enum):
    """Where an epoch falls relative to a window."""

    BELOW = "below"
    """Under the window: refuse it."""
    INSIDE = "inside"
    """Within the window: admit it as it is."""
    ABOVE = "above"
    """Over the window: admit it after sliding the window up to it."""


class EpochWindow:
    """The fencing window ``[oldest_accepted, latest_seen]`` of one partition leader.

    ``EpochWindow()`` is empty; ``EpochWindow(floor=M)`` is empty and never admits an
    epoch <= M. An illegal event raises and leaves the window unchanged.
    """

    __slots__ = ("_floor", "_latest_seen", "_oldest_accepted")

    def __init__(self, *, floor: int | None = None) -> None:
        self._floor = floor
        self._oldest_accepted: int | None = None
        self._latest_seen: int | None = None

    @classmethod
    def recovered(cls, last_applied_epoch: int | None, published_watermark: int) -> Self:
        """Build the window of a new leadership term.

        It is ``[last_applied_epoch]`` and never admits an epoch <=
        `published_watermark` (M(p)); if `last_applied_epoch` is None or <= M(p), it
        is empty with ``floor = M(p)``.
        """
        window = cls(floor=published_watermark)
        if last_applied_epoch is not None and last_applied_epoch > published_watermark:
            window.advance(last_applied_epoch)
        return window

    @property
    def bounds(self) -> tuple[int | None, int | None]:
        """``(oldest_accepted, latest_seen)``; ``(N, N)`` for ``[N]``, ``(None, None)`` if empty."""
        return (self._oldest_accepted, self._latest_seen)

    @property
    def oldest_accepted(self) -> int | None:
        """The lowest admitted epoch, None while the window is empty."""
        return self._oldest_accepted

    @property
    def latest_seen(self) -> int | None:
        """The highest admitted epoch, None while the window is empty."""
        return self._latest_seen

    @property
    def floor(self) -> int | None:
        """The highest epoch that may never be admitted (the published M(p)), if any."""
        return self._floor

    @property
    def is_empty(self) -> bool:
        """True until the first epoch is admitted."""
        return self._latest_seen is None

    def classify(self, epoch: int) -> Admission:
        """Say whether `epoch` is below, inside or above the window; changes nothing."""
        if self._floor is not None and epoch <= self._floor:
            return Admission.BELOW
        if self._latest_seen is None or epoch > self._latest_seen:
            return Admission.ABOVE
        assert self._oldest_accepted is not None
        if epoch < self._oldest_accepted:
            return Admission.BELOW
        return Admission.INSIDE

    def check(self, epoch: int) -> Admission:
        """Like `classify`, but raise `StaleEpoch` (carrying the window) when BELOW."""
        admission = self.classify(epoch)
        if admission is Admission.BELOW:
            raise StaleEpoch(epoch, self.bounds, self._floor)
        return admission

    def advance(self, epoch: int) -> None:
        """Slide the window up to `epoch`, which must be ABOVE it.

        ``[] -> [epoch]``; ``[a, b] -> [b, epoch]``. Raise `IllegalTransition` and
        change nothing if `epoch` is BELOW or INSIDE.
        """
        admission = self.classify(epoch)
        if admission is not Admission.ABOVE:
            raise IllegalTransition(
                f"cannot advance the fencing window {self!r} to epoch {epoch}: the epoch is "
                f"{admission.value} the window, and only an epoch above it may slide it; "
                "classify the epoch first and advance only when it is ABOVE"
            )
        self._oldest_accepted = epoch if self._latest_seen is None else self._latest_seen
        self._latest_seen = epoch

    def raise_floor(self, watermark: int) -> bool:
        """Never admit an epoch <= `watermark` again (the stored M(p) was raised above
        what this window promised, e.g. by an operator's repair); False if it already
        did not. A window whose epochs are all at or below it becomes empty; one that
        straddles it keeps only the epochs above it (``[a, b]`` -> ``[watermark + 1, b]``).
        """
        if self._floor is not None and watermark <= self._floor:
            return False
        self._floor = watermark
        if self._latest_seen is not None:
            if self._latest_seen <= watermark:
                self._oldest_accepted = self._latest_seen = None
            else:
                assert self._oldest_accepted is not None
                self._oldest_accepted = max(self._oldest_accepted, watermark + 1)
        return True

    def __repr__(self) -> str:
        if self._latest_seen is None:
            span = "[]"
        elif self._oldest_accepted == self._latest_seen:
            span = f"[{self._latest_seen}]"
        else:
            span = f"[{self._oldest_accepted}, {self._latest_seen}]"
        floor = "" if self._floor is None else f" floor={self._floor}"
        return f"<EpochWindow {span}{floor}>"
