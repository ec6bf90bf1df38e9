"""Deliberately broken variants of l0gc, switched on only inside the simulator.

A checker that never fails proves nothing. Each variant below breaks one rule the
design depends on, as a subclass or wrapper of the real class (no monkeypatching), and
`tests/gcd/sim/test_variants.py` asserts that the simulation catches every one within
a bounded number of seeds. `CORRECT` is the real code.

- ``single-epoch-window``: the GC state keeps the single-epoch window of the original
  lock-step design (a slide to c promises that every later entry has epoch >= c),
  while the fence admits two epochs: a write at the previous epoch lands below it.
- ``no-drain-slide``: the guard slides the window to a higher epoch at once instead
  of waiting for the in-flight writes at the old epochs to drain.
- ``eager-floor``: the floor advances at the slide, without waiting for the
  reconciler to lift the entries before it.
- ``lenient-sweeper``: the sweeper treats a malformed partition record as "no
  constraint" instead of failing closed.
- ``owner-blind-publisher``: publishes ignore owner fencing, so a stale owner that
  kept running publishes over the new owner's record.

`SimPublisher` is the real `Publisher` with the injection points the simulator needs:
the GC-state class and the guard class of the partitions it hosts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from watermark.contract import Publication, PublishOutcome
from watermark.errors import InvalidRecord
from watermark.gcstate import PartitionGcState, PendingSlide
from watermark.guard import FenceToken, FencingGuard
from watermark.publisher import Publisher, _Hosted
from watermark.record import PartitionRecord
from watermark.safe_epoch import SafeEpoch, compute_safe_epoch
from watermark.store import WatermarkStore
from watermark.window import Admission, EpochWindow

__all__ = [
    "BROKEN",
    "CORRECT",
    "PATCHED",
    "VARIANTS",
    "EagerFloorGcState",
    "FenceBoundGcState",
    "LenientSafeEpoch",
    "NoDrainGuard",
    "OwnerBlindStore",
    "SimPublisher",
    "SingleEpochGcState",
    "Variant",
]


class FenceBoundGcState(PartitionGcState):
    """PROPOSED FIX (not in the real code yet): a slide promises no more than the fence.

    The real `PartitionGcState` takes a slide of the applied window at offset o as the
    promise "every later entry has epoch >= previous_applied". That is false when the
    fence skipped an epoch: the fence ``[4] + 6 -> [4, 6]`` admits 5 as INSIDE, the log
    applies 5 then 6, the applied window becomes ``[5, 6]``, and a writer still holding
    a fence at 4 commits below it (FencingViolation) after M(p) = 4 already exposed its
    object to the sweepers. What the fence guarantees is weaker: slides drain the
    in-flight writes, so every entry after o has an epoch >= the fence window's
    oldest_accepted when o was committed. `SimPublisher` passes that bound in as
    `admitted_from`; the slide's promise is clamped to it.
    """

    __slots__ = ("admitted_from",)

    def __init__(self, created_epoch: int, *, max_pending_slides: int = 1024) -> None:
        super().__init__(created_epoch, max_pending_slides=max_pending_slides)
        self.admitted_from: int | None = None

    def _take(self, offset: int, epoch: int) -> Admission:
        admission = super()._take(offset, epoch)
        bound = self.admitted_from
        if admission is Admission.ABOVE and bound is not None and bound < self._previous_applied:
            promise = max(bound, self._floor)
            self._previous_applied = promise
            self._pending.pop()
            if not self._pending or self._pending[-1].previous_applied < promise:
                self._pending.append(PendingSlide(offset, promise))
        return admission


class SingleEpochGcState(FenceBoundGcState):
    """BROKEN: the applied window collapses to the new epoch at every slide."""

    __slots__ = ()

    def _take(self, offset: int, epoch: int) -> Admission:
        admission = PartitionGcState._take(self, offset, epoch)  # no fence bound: lock-step
        if admission is Admission.ABOVE:
            # Lock-step promise: no entry after this one carries an epoch below `epoch`.
            self._previous_applied = epoch
            self._pending[-1] = PendingSlide(offset, epoch)
        return admission


class EagerFloorGcState(FenceBoundGcState):
    """BROKEN: the floor jumps to previous_applied at the slide, reconciled or not."""

    __slots__ = ()

    def _take(self, offset: int, epoch: int) -> Admission:
        admission = super()._take(offset, epoch)
        if admission is Admission.ABOVE:
            self._floor = self._previous_applied
            self._pending.clear()
        return admission


class NoDrainGuard(FencingGuard):
    """BROKEN: an epoch above the window slides it at once, with writes still in flight."""

    async def acquire(
        self,
        epoch: int,
        timeout: float | None,  # noqa: ASYNC109 - same signature as FencingGuard.acquire
        *,
        hold_ttl_s: float | None = None,
    ) -> FenceToken:
        """Slide without draining when `epoch` is above the window; else as usual."""
        if not self.closed and self._window.classify(epoch) is Admission.ABOVE:
            self._slide(epoch)
            return self._grant(epoch, slid=True, hold_ttl_s=hold_ttl_s)
        return await super().acquire(epoch, timeout, hold_ttl_s=hold_ttl_s)


class OwnerBlindStore(WatermarkStore):
    """BROKEN: every publication is rewritten to carry the stored owner, so none is stale."""

    async def publish(self, pubs: Sequence[Publication]) -> list[PublishOutcome]:
        """Publish as if each publisher were the partition's current owner."""
        blind = []
        for pub in pubs:
            try:
                current = await self.get_partition(pub.partition)
            except InvalidRecord:
                current = None
            if current is not None and current.owner is not None:
                pub = dataclasses.replace(  # noqa: PLW2901 - the point of this variant
                    pub, owner=current.owner, owner_epoch=current.owner_epoch
                )
            blind.append(pub)
        return await super().publish(blind)


class LenientSafeEpoch:
    """BROKEN: the sweeper's M skips partitions whose record does not decode."""

    def __init__(self, store: WatermarkStore) -> None:
        self._store = store

    async def read_safe_epoch(self) -> SafeEpoch:
        """M computed from the readable records only."""
        view = await self._store.read_gc_view()
        readable: dict[str, bytes] = {}
        for name, raw in view.partitions.items():
            try:
                PartitionRecord.decode(raw, partition=name)
            except InvalidRecord:
                continue  # the bug: an unreadable record is "no constraint"
            readable[name] = raw
        return compute_safe_epoch(dataclasses.replace(view, partitions=readable))


@dataclass(frozen=True, slots=True)
class Variant:
    """Which classes the simulated system is built from.

    `proposed_fixes` applies the two fixes `gcd.sim` proposes for bugs it found in the
    real code (see `FenceBoundGcState` and `SimPublisher`); every broken variant is built
    on top of them, so that what the simulation catches is the variant's own bug.
    """

    name: str
    summary: str
    state_class: type[PartitionGcState] = PartitionGcState
    guard_class: type[FencingGuard] = FencingGuard
    publisher_store: type[WatermarkStore] = WatermarkStore
    lenient_sweeper: bool = False
    proposed_fixes: bool = True
    broken: bool = True


CORRECT = Variant("correct", "the real code, as it is", proposed_fixes=False, broken=False)
PATCHED = Variant(
    "patched",
    "the real code with the fixes proposed for the bugs the simulation found",
    state_class=FenceBoundGcState,
    broken=False,
)
VARIANTS: dict[str, Variant] = {
    variant.name: variant
    for variant in (
        CORRECT,
        PATCHED,
        Variant(
            "single-epoch-window",
            "GC state assumes a one-epoch window while the fence admits two",
            state_class=SingleEpochGcState,
        ),
        Variant(
            "no-drain-slide",
            "the guard slides without waiting for in-flight writes",
            state_class=FenceBoundGcState,
            guard_class=NoDrainGuard,
        ),
        Variant(
            "eager-floor",
            "the floor advances at the slide, without the reconciler",
            state_class=EagerFloorGcState,
        ),
        Variant(
            "lenient-sweeper",
            "a malformed partition record counts as no constraint",
            state_class=FenceBoundGcState,
            lenient_sweeper=True,
        ),
        Variant(
            "owner-blind-publisher",
            "publishes ignore owner fencing (stale owners overwrite M(p))",
            state_class=FenceBoundGcState,
            publisher_store=OwnerBlindStore,
        ),
    )
}
BROKEN = tuple(name for name, variant in VARIANTS.items() if variant.broken)

WriterOffsets = dict[str, tuple[int, int | None]]
"""partition -> (offset_shift, last_writer_offset): what the proposed fix persists."""


class SimPublisher(Publisher):
    """The real `Publisher`, hosting partitions with the variant's state and guard classes.

    `Publisher` builds the GC state and the guard of an adopted partition itself
    (`_host`); this subclass lets the real construction run and then swaps in the
    variant's classes with the same state and window. For `CORRECT` it changes nothing.

    With `proposed_fixes` it also applies the publisher half of the fixes: it tells a
    `FenceBoundGcState` the fence window's lower bound before each commit and
    housekeeping entry, and a new owner takes over the writer-offset mapping
    (`offset_shift`, `last_writer_offset`) instead of starting from 0 / None, as if
    the record carried it. (Without that, a partition whose owner changed after idle
    advances maps reconciled reports below its last entry forever and pins M.) The
    mapping is shared through `offsets` keyed by partition; the simulator only moves
    ownership when the record holds every applied entry, so the last committed mapping
    is the one a record published at that point would carry.
    """

    def __init__(
        self,
        store: WatermarkStore,
        owner_id: str,
        variant: Variant,
        offsets: WriterOffsets,
        **kw: Any,
    ) -> None:
        super().__init__(store, owner_id, **kw)
        self._variant = variant
        self._offsets = offsets

    def _host(self, record: PartitionRecord) -> None:
        super()._host(record)
        hosted = self._hosted[record.partition]
        if self._variant.state_class is not PartitionGcState:
            hosted.state = self._variant.state_class.restore(hosted.state.snapshot())
        if self._variant.guard_class is not FencingGuard:
            window = EpochWindow(floor=hosted.guard.floor)
            low, high = hosted.guard.window
            for epoch in dict.fromkeys(e for e in (low, high) if e is not None):
                window.advance(epoch)
            hosted.guard = self._variant.guard_class(
                window,
                metrics=self.metrics,
                partition=record.partition,
                hold_ttl_s=self._hold_ttl_s,
                clock=self.clock,
            )
        saved = self._offsets.get(record.partition)
        if self._variant.proposed_fixes and saved is not None:
            hosted.offset_shift, hosted.last_writer_offset = saved

    def _bound(self, hosted: _Hosted) -> None:
        if isinstance(hosted.state, FenceBoundGcState):
            hosted.state.admitted_from = hosted.guard.window[0]

    def commit(self, token: FenceToken, offset: int) -> None:
        """`Publisher.commit`, telling a fence-bound state the fence's lower bound first."""
        hosted = self._hosted.get(token.partition)
        if hosted is not None:
            self._bound(hosted)
        super().commit(token, offset)
        if hosted is not None and self._variant.proposed_fixes:
            self._offsets[token.partition] = (hosted.offset_shift, hosted.last_writer_offset)

    def _apply_housekeeping(self, hosted: _Hosted, epoch: int) -> None:
        self._bound(hosted)
        super()._apply_housekeeping(hosted, epoch)
