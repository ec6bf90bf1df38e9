"""The fencing window: which cluster epochs a partition leader lets writers commit.

Theory of operation
-------------------
A writer stamps each L0 object with a cluster epoch (read from a cache, so possibly a
little stale), uploads it, and then asks the partition leader to *fence* that epoch
before the object's metadata is committed to the partition log. The leader keeps a
window of at most two epochs, ``[oldest_accepted, latest_seen]``, and classifies each
epoch against it:

* ABOVE: higher than ``latest_seen`` (or anything, while the window is empty). The
  leader slides the window, ``[] -> [N] -> [N, N+1] -> [N+1, N+2]``: the old latest
  epoch becomes the oldest accepted one. In general ``[a, b] + c -> [b, c]``.
* INSIDE: ``oldest_accepted <= epoch <= latest_seen``: admitted as it is. Epochs need
  not be contiguous: ``[5, 6] + 10`` gives ``[6, 10]``, which admits 7, 8 and 9.
* BELOW: lower than ``oldest_accepted``: refused. The writer must re-read the cluster
  epoch and re-upload; its first upload is garbage.

Why two epochs and not one: a writer that read epoch N just before another writer
brought N+1 is still admitted, instead of failing spuriously at every epoch change.

The window only ever moves up, so an epoch refused once is refused forever. That is
what the garbage collector builds on (see `watermark.core.gcstate`): after the window slid
to ``[b, c]`` and the in-flight writes drained, no entry with an epoch below ``b`` can
be committed any more.

The floor may also rise while a term runs (`raise_floor`): the owner learned that the
stored M(p) is above what its window promised (an operator raised it), so epochs at or
below it must not be admitted any more; fences already held there are taken back by
the lock (`watermark.core.fencelock.FenceLock.raise_floor`).

The window is volatile (one leadership term). After recovery it is rebuilt by
`EpochWindow.recovered`: collapsed to the last applied epoch ``[max_applied]``, and
never admitting an epoch at or below the published watermark M(p), because objects
with such epochs may already be deleted. If nothing was applied above M(p), the window
is empty with ``floor = M(p)``: everything above M(p) is ABOVE, everything else BELOW.
(This ``floor`` is *exclusive*, the highest refused epoch; the GC floor of
`watermark.core.gcstate` is the lowest protected epoch, one more than M(p).)

This module is pure: no I/O, no clock, no locks. The caller (the partition guard)
holds the locks and calls `classify`, `check` and `advance`.
"""

from __future__ import annotations

import enum
from typing import Self

from watermark.errors import IllegalTransition, StaleEpoch

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
