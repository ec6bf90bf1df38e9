"""Deliberately broken variants of l0gc, switched on only inside the simulator.

A checker that never fails proves nothing. Each variant below breaks one rule the
design depends on, as a subclass or wrapper of the real class (no monkeypatching), and
`tests/l0lab/sim/test_variants.py` asserts that the simulation catches every one within
a bounded number of seeds. `CORRECT` is the real code.

- ``single-epoch-window``: the GC state keeps the single-epoch window of the original
  lock-step design (an entry at c promises that every later entry has epoch >= c),
  while the fence admits two epochs: a write at the previous epoch lands below it.
- ``no-drain-slide``: the guard slides the window to a higher epoch at once instead
  of waiting for the in-flight writes at the old epochs to drain.
- ``eager-floor``: the floor advances as entries are applied, without waiting for the
  reconciler to lift them.
- ``applied-max-window`` and ``forgetful-adopt``: bugs 1 and 3 that the simulation
  found in l0gc itself (see `l0lab.sim`), kept as regressions.
- ``lenient-sweeper``: the sweeper treats a malformed partition record as "no
  constraint" instead of failing closed.
- ``owner-blind-publisher``: publishes ignore owner fencing, so a stale owner that
  kept running publishes over the new owner's record.
- ``inclusive-floor``: the window-floor mutant (``epoch <= floor`` made ``epoch <
  floor`` in `EpochWindow.classify`): a window emptied by a raised floor, or recovered
  empty, admits the epoch equal to M(p). The random simulation cannot reach it (it has
  no operator raising M(p)); the exhaustive checker (`l0lab.sim.explore`) finds it, so it
  is not in `RANDOM` (the variants the random simulation must catch).
- ``floor-two-early``: a mutant of `PartitionGcState.reconciled` (issue 51): the floor
  rises with a slide two log entries before the reconciler has lifted it.
- ``late-commit``: the guard accepts a commit on a fence it reclaimed at its hold
  deadline (issue 51): the writer was slow, the window slid on without it, and its
  entry lands below the window.
- ``no-cross-check``: the sweeper ignores the references read with M (issue 54). It
  needs a second bug to show: a reconciler that reports an entry lifted that it has not
  lifted (`SimConfig.reconciler_bug`, the exhaustive ``overreport`` fault). M(p) then
  covers that entry's object; the real sweeper finds the key still referenced and keeps
  it, this one deletes it.

- ``unpaused-restore``: the restore runbook without its first step, `gcd pause`: the
  sweepers, still reading the wrong M(p), hide again what restore brought back.
- ``marker-blind-restore``: `gcd restore` as it was before issue 51: it deletes the
  version id the journal names as l0gc's marker without asking the store whether that
  is a delete marker (a forged journal names a data version).
- ``check-then-delete-deregister``: deregister as it was before issue 51: it checks for
  a live owner, then deletes whatever record is there, so a register's adopt between
  the check and the delete leaves an owner acknowledging writes for a deleted record.

The simulator hosts them through the real `Publisher`'s `state_class` and
`guard_class` parameters; the last three through the operator models
(`l0lab.sim.undo_model`, `l0lab.sim.registration_model`), which run the runbook,
`restore` and `deregister` the variant names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gcd.rules.versions import version_target
from gcd.sweep.safety import WatermarkSource
from gcd.undo.restore import JournaledDeletion, KeyResult, RestoreOutcome, restore
from l0gc.contract.kv import PrefixWatch
from l0gc.contract.namespace import Publication, PublishOutcome
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import SafeEpoch, compute_safe_epoch
from l0gc.errors import InvalidRecord
from l0gc.etcd import liveness
from l0gc.etcd.store import WatermarkStore
from watermark.api import owners
from watermark.core.gcstate import PartitionGcState
from watermark.core.window import Admission, EpochWindow
from watermark.service.guard import FenceToken, FencingGuard

__all__ = [
    "BROKEN",
    "CORRECT",
    "RANDOM",
    "VARIANTS",
    "AppliedMaxGcState",
    "EagerFloorGcState",
    "EarlyFloorGcState",
    "ForgetfulGcState",
    "InclusiveFloorGuard",
    "InclusiveFloorWindow",
    "LateCommitGuard",
    "LenientSafeEpoch",
    "NoDrainGuard",
    "OwnerBlindStore",
    "SingleEpochGcState",
    "UncheckedSafeEpoch",
    "Variant",
    "check_then_delete_deregister",
    "marker_blind_restore",
]


class SingleEpochGcState(PartitionGcState):
    """BROKEN: every entry promises that no later entry is below its own epoch."""

    __slots__ = ()

    def apply(self, offset: int, epoch: int, *, admitted_from: int) -> Admission:
        """Apply as if the fence admitted nothing below `epoch` from now on (lock-step)."""
        return super().apply(offset, epoch, admitted_from=max(admitted_from, epoch))


class AppliedMaxGcState(PartitionGcState):
    """BROKEN (l0gc's own bug 1): the lower bound follows the applied maximum, not the fence."""

    __slots__ = ()

    def apply(self, offset: int, epoch: int, *, admitted_from: int) -> Admission:
        """Apply as if the fence's lower bound were the previous applied maximum."""
        rising = epoch > self.last_applied_epoch
        bound = self.last_applied_epoch if rising else self.previous_applied
        return super().apply(offset, epoch, admitted_from=min(bound, epoch))


class ForgetfulGcState(PartitionGcState):
    """BROKEN (l0gc's own bug 3): a new owner ignores the log's end offset."""

    __slots__ = ()

    def catch_up(self, log_end_offset: int) -> None:
        """Forget the entries the previous owner applied but did not publish."""


class EagerFloorGcState(PartitionGcState):
    """BROKEN: the floor follows the applied window at once, reconciled or not."""

    __slots__ = ()

    def apply(self, offset: int, epoch: int, *, admitted_from: int) -> Admission:
        """Apply, then treat the entry as lifted by the reconciler already."""
        admission = super().apply(offset, epoch, admitted_from=admitted_from)
        self.reconciled(offset)
        return admission


class EarlyFloorGcState(PartitionGcState):
    """BROKEN (a mutant): a slide lifts the floor two log entries before the reconciler."""

    __slots__ = ()

    def reconciled(self, offset: int) -> None:
        """Report as usual, then let the floor pass the slides up to two entries beyond."""
        super().reconciled(offset)
        while self._pending and self._pending[0].offset <= offset + 2:
            self._floor = self._pending.popleft().previous_applied


class LateCommitGuard(FencingGuard):
    """BROKEN: reclaiming a fence at its hold deadline frees the window for a slide but
    does not end the fence, so its writer's late commit is still taken."""

    def _reclaimed(self, tokens: tuple[FenceToken, ...]) -> None:
        super()._reclaimed(tokens)
        for token in tokens:
            token.outcome = None  # the bug: the reclaimed hold looks unfinished

    def ensure_held(self, token: FenceToken) -> None:
        """Held, or reclaimed by this guard (the bug)."""
        if token.outcome is not None:
            super().ensure_held(token)


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


class InclusiveFloorWindow(EpochWindow):
    """BROKEN: the floor refuses epochs below M(p) but admits M(p) itself."""

    __slots__ = ()

    @classmethod
    def of(cls, window: EpochWindow) -> InclusiveFloorWindow:
        """The same window (floor and bounds), with the mutated `classify`."""
        copy = cls(floor=window.floor)
        copy._oldest_accepted, copy._latest_seen = window.bounds
        return copy

    def classify(self, epoch: int) -> Admission:
        """As `EpochWindow.classify`, with ``epoch < floor`` for ``epoch <= floor``."""
        if self._floor is not None and epoch < self._floor:  # the mutant
            return Admission.BELOW
        if self._latest_seen is None or epoch > self._latest_seen:
            return Admission.ABOVE
        assert self._oldest_accepted is not None
        if epoch < self._oldest_accepted:
            return Admission.BELOW
        return Admission.INSIDE


class InclusiveFloorGuard(FencingGuard):
    """BROKEN: a guard over an `InclusiveFloorWindow`."""

    def __init__(self, window: EpochWindow, **kwargs: Any) -> None:
        super().__init__(InclusiveFloorWindow.of(window), **kwargs)


class OwnerBlindStore(WatermarkStore):
    """BROKEN: every publication is rewritten to carry the stored owner, so none is stale;
    and the owner never learns from its records that it lost them (no record watch)."""

    async def watch_partitions(self) -> PrefixWatch | None:
        """No watch: the owner re-reads its records every round (`read_partitions`)."""
        return None

    async def read_partitions(
        self, partitions: Sequence[str]
    ) -> dict[str, PartitionRecord | InvalidRecord | None]:
        """Blind: nothing anyone else wrote reaches the owner."""
        return {}

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


class UncheckedSafeEpoch:
    """BROKEN: the sweeper's read of M without the references read alongside it, so the
    deletion rule has no second opinion (`decide` never answers REFERENCED)."""

    def __init__(self, source: WatermarkSource) -> None:
        self._source = source

    async def read_safe_epoch(self) -> SafeEpoch:
        """M as read, references dropped."""
        read = await self._source.read_safe_epoch()
        return dataclasses.replace(read, references={})


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


async def marker_blind_restore(
    store: Any, chosen: dict[str, JournaledDeletion], **_: Any
) -> list[KeyResult]:
    """BROKEN (restore before issue 51): delete each journaled marker id, unasked."""
    marked = [d for d in chosen.values() if d.marker is not None]
    if marked:
        await store.delete_batch([version_target(d.key, d.marker) for d in marked])
    return [KeyResult(d.key, RestoreOutcome.RESTORED, d.epoch) for d in marked]


async def check_then_delete_deregister(
    store: WatermarkStore, names: Sequence[str], **_: Any
) -> list[str]:
    """BROKEN (deregister before issue 51): check every name, then delete unconditioned."""
    for name in names:
        record = await store.get_partition(name)
        why = (
            None if record is None else await liveness.live_owner(store.kv, store.namespace, record)
        )
        if why is not None:
            raise owners.refuse_live(name, "deregister it", why)
    return [name for name in names if await store.deregister_partition(name)]


@dataclass(frozen=True, slots=True)
class Variant:
    """Which classes the simulated system is built from."""

    name: str
    summary: str
    state_class: type[PartitionGcState] = PartitionGcState
    guard_class: type[FencingGuard] = FencingGuard
    publisher_store: type[WatermarkStore] = WatermarkStore
    lenient_sweeper: bool = False
    restore: Callable[..., Awaitable[list[KeyResult]]] = restore
    paused_restore: bool = True
    """False: the restore runbook skips `gcd pause`."""
    deregister: Callable[..., Awaitable[list[str]]] = owners.deregister
    cross_check: bool = True
    """False: the sweeper ignores the references read with M (`UncheckedSafeEpoch`)."""
    reconciler_bug: bool = False
    """True: caught only under the reconciler bug, which the random simulation runs
    with (`SimConfig.reconciler_bug`) and the exhaustive suite's stage injects."""
    broken: bool = True
    random_finds: bool = True
    """False: out of the random simulation's reach (tests/l0lab/sim/test_variants.py skips
    it; the exhaustive checker's tests do not)."""


CORRECT = Variant("correct", "the real code, as it is", broken=False)
VARIANTS: dict[str, Variant] = {
    variant.name: variant
    for variant in (
        CORRECT,
        Variant(
            "single-epoch-window",
            "GC state assumes a one-epoch window while the fence admits two",
            state_class=SingleEpochGcState,
        ),
        Variant(
            "no-drain-slide",
            "the guard slides without waiting for in-flight writes",
            guard_class=NoDrainGuard,
        ),
        Variant(
            "applied-max-window",
            "the applied window's lower bound is the previous maximum, not the fence's",
            state_class=AppliedMaxGcState,
        ),
        Variant(
            "forgetful-adopt",
            "a new owner ignores entries its predecessor applied but never published",
            state_class=ForgetfulGcState,
            # The log end brings those entries' keys (log_references): with the second
            # opinion on, the sweepers refuse the round instead (a pause, not a loss;
            # tests/l0lab/sim/test_references_sim.py). Off, the bug shows on its own.
            cross_check=False,
        ),
        Variant(
            "eager-floor",
            "the floor advances at the slide, without the reconciler",
            state_class=EagerFloorGcState,
        ),
        Variant(
            "lenient-sweeper",
            "a malformed partition record counts as no constraint",
            lenient_sweeper=True,
        ),
        Variant(
            "owner-blind-publisher",
            "publishes ignore owner fencing (stale owners overwrite M(p))",
            publisher_store=OwnerBlindStore,
        ),
        Variant(
            "inclusive-floor",
            "the fencing window's floor admits the epoch equal to M(p) (a mutant)",
            guard_class=InclusiveFloorGuard,
            random_finds=False,
        ),
        Variant(
            "floor-two-early",
            "the floor rises with a slide two log entries before the reconciler lifted them",
            state_class=EarlyFloorGcState,
        ),
        Variant(
            "late-commit",
            "a commit on a fence reclaimed at its hold deadline is accepted",
            guard_class=LateCommitGuard,
        ),
        Variant(
            "no-cross-check",
            "the sweeper ignores the references read with M (no second opinion)",
            cross_check=False,
            reconciler_bug=True,
        ),
        Variant(
            "unpaused-restore",
            "the restore runbook skips gcd pause (sweepers hide the restored keys again)",
            paused_restore=False,
            random_finds=False,
        ),
        Variant(
            "marker-blind-restore",
            "gcd restore deletes the journaled marker id without asking the store what it is",
            restore=marker_blind_restore,
            random_finds=False,
        ),
        Variant(
            "check-then-delete-deregister",
            "deregister deletes the record without comparing it to the one it checked",
            deregister=check_then_delete_deregister,
            random_finds=False,
        ),
    )
}
BROKEN = tuple(name for name, variant in VARIANTS.items() if variant.broken)
RANDOM = tuple(name for name in BROKEN if VARIANTS[name].random_finds)
"""The broken variants the random simulation must catch (all but the mutant it cannot reach)."""
