"""Ground truth and invariants of the simulation (pure: no asyncio, no l0gc I/O).

The simulator keeps its own account of the world in a `l0lab.testing.ledger.Ledger`
(the demo's too), independent of the code under test: which object each partition's
log references at which offset, how far each partition's reconciler has really lifted
its data, which fences writers hold and whether partitions are still registered. The
`Checker` compares what the system does against that account.

SAFETY (checked at the moment it happens, or after every step):

- DELETED_REFERENCED: an object referenced by an entry a live partition's reconciler
  has not lifted yet was deleted.
- DELETED_FENCED: an object a writer holds an accepted fence for (uploaded, fenced,
  not committed yet) was deleted.
- DELETED_OUTSIDE_LAYOUT: a key outside the root, or one the layout cannot parse, was
  deleted.
- FENCED_DELETED: a fence was granted, or an entry committed, for an object that is
  already gone (the write would reference lost data).
- FENCING_VIOLATION: the tracker refused a committed entry below its applied window
  (the fence let through an epoch it must not have).
- UNSAFE_WATERMARK: a watermark covers a protected object, whether or not a sweeper
  has acted on it yet: a partition's published M(p) is >= the epoch of an object that
  partition still references (unreconciled) or holds a fence for; or the global M in
  etcd, or the M a sweeper round is about to use, is >= the epoch of any protected
  object.
- WATERMARK_DECREASED: a partition's published M(p) went down.
- WATERMARK_ABOVE_EPOCH: the global M is above cluster epoch - 1.

The operator models (`l0lab.sim.undo_model`, `l0lab.sim.registration_model`) add
LOST_BYTES (no version of a needed object holds its bytes any more), HIDDEN_AFTER_RESTORE
(a key `gcd restore` brought back is hidden again before the repair),
DELETED_WHILE_PAUSED (a round sent a delete while GC was paused) and
ACKED_AFTER_DEREGISTER (an owner granted a fence or acknowledged a commit after the
partition's record was deleted).

Under the reconciler bug (`l0lab.sim.actions.overreport`: a reconciler reports an entry
lifted that it has not lifted) the publisher is misled, not wrong: its M(p) may then cover a
live object. So UNSAFE_WATERMARK judges a watermark against what the reconcilers
*reported* (`SimLedger.told`), and a watermark that covers an object only because of a
false report is an observation (`Checker.misled`), not a violation; whether that object
survives is DELETED_REFERENCED's question, judged against the truth. The sweeper's
refusals of referenced keys are observations too (`Checker.conflicts`): each is the
second opinion catching a wrong M.

LIVENESS (after the quiescent tail): GARBAGE_LEFT, every layout object with an epoch
<= the final M is deleted; M_PINNED, the final M >= cluster epoch - 2 (idle partitions
do not pin it); TAIL_STUCK, the tail could not bring the system to rest. And CRASH:
an actor raised an exception that l0gc should have handled.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from l0lab.testing.ledger import FenceIsLive, Ledger, Loss

Lowest = Mapping[str, tuple[int, str, str]]
"""Per partition, its protected object with the lowest epoch: (epoch, key, why)."""

__all__ = ["SAFETY", "Checker", "SimLedger", "Violation", "ViolationKind"]


class ViolationKind(enum.Enum):
    """What went wrong; SAFETY kinds first, then LIVENESS."""

    DELETED_REFERENCED = "deleted_referenced"
    DELETED_FENCED = "deleted_fenced"
    DELETED_OUTSIDE_LAYOUT = "deleted_outside_layout"
    FENCED_DELETED = "fenced_deleted"
    FENCING_VIOLATION = "fencing_violation"
    UNSAFE_WATERMARK = "unsafe_watermark"
    WATERMARK_DECREASED = "watermark_decreased"
    WATERMARK_ABOVE_EPOCH = "watermark_above_epoch"
    LOST_BYTES = "lost_bytes"
    HIDDEN_AFTER_RESTORE = "hidden_after_restore"
    DELETED_WHILE_PAUSED = "deleted_while_paused"
    ACKED_AFTER_DEREGISTER = "acked_after_deregister"
    GARBAGE_LEFT = "garbage_left"
    M_PINNED = "m_pinned"
    TAIL_STUCK = "tail_stuck"
    CRASH = "crash"


SAFETY = frozenset(
    {
        ViolationKind.DELETED_REFERENCED,
        ViolationKind.DELETED_FENCED,
        ViolationKind.DELETED_OUTSIDE_LAYOUT,
        ViolationKind.FENCED_DELETED,
        ViolationKind.FENCING_VIOLATION,
        ViolationKind.UNSAFE_WATERMARK,
        ViolationKind.WATERMARK_DECREASED,
        ViolationKind.WATERMARK_ABOVE_EPOCH,
        ViolationKind.LOST_BYTES,
        ViolationKind.HIDDEN_AFTER_RESTORE,
        ViolationKind.DELETED_WHILE_PAUSED,
        ViolationKind.ACKED_AFTER_DEREGISTER,
    }
)
"""The kinds that mean data could be lost (the rest are liveness and crashes)."""


class SimLedger(Ledger):
    """The truth (what the reconcilers really lifted), with a twin, `told`, that is sent
    every event too but moves its reconciled offsets by the reconcilers' reports
    (`claimed`), true or not: what the publisher was told."""

    def __init__(self, fence_is_live: FenceIsLive | None = None) -> None:
        super().__init__(fence_is_live)
        self.told = Ledger(fence_is_live)
        self.misled = False
        """True once a reconciler reported an entry lifted that it had not lifted."""

    def uploaded(self, key: str, epoch: int | None, partition: str | None = None) -> None:
        """As `Ledger.uploaded`, on both."""
        super().uploaded(key, epoch, partition)
        self.told.uploaded(key, epoch, partition)

    def partition_created(self, partition: str) -> None:
        """As `Ledger.partition_created`, on both."""
        super().partition_created(partition)
        self.told.partition_created(partition)

    def partition_deleted(self, partition: str) -> None:
        """As `Ledger.partition_deleted`, on both."""
        super().partition_deleted(partition)
        self.told.partition_deleted(partition)

    def fence_granted(self, fence: int, key: str, partition: str) -> None:
        """As `Ledger.fence_granted`, on both."""
        super().fence_granted(fence, key, partition)
        self.told.fence_granted(fence, key, partition)

    def fence_finished(self, fence: int, key: str) -> None:
        """As `Ledger.fence_finished`, on both."""
        super().fence_finished(fence, key)
        self.told.fence_finished(fence, key)

    def committed(self, key: str, partition: str, offset: int) -> None:
        """As `Ledger.committed`, on both."""
        super().committed(key, partition, offset)
        self.told.committed(key, partition, offset)

    def orphaned(self, key: str) -> None:
        """As `Ledger.orphaned`, on both."""
        super().orphaned(key)
        self.told.orphaned(key)

    def reconciled(self, partition: str, offset: int) -> int:
        """As `Ledger.reconciled`, on both (a true report)."""
        self.told.reconciled(partition, offset)
        return super().reconciled(partition, offset)

    def claimed(self, partition: str, offset: int) -> None:
        """`partition`'s reconciler reported `offset` lifted, beyond what it lifted."""
        self.told.reconciled(partition, offset)
        self.misled = True

    def deleted(self, keys: Iterable[str]) -> list[Loss]:
        """As `Ledger.deleted`, on both; the losses are the truth's."""
        keys = list(keys)
        self.told.deleted(keys)
        return super().deleted(keys)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: which, at which step, and the values that show it."""

    kind: ViolationKind
    step: int
    detail: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"kind": self.kind.value, "step": self.step, "detail": self.detail}


class Checker:
    """Evaluates the invariants against a `Ledger` and collects violations."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.violations: list[Violation] = []
        self.step = 0
        self._published: dict[str, int] = {}
        self.misled: list[str] = []
        """Watermarks that covered a live object only because a reconciler reported it
        lifted (first few; `misled_count` counts them all)."""
        self.misled_count = 0
        self.conflicts: list[str] = []
        """Referenced keys a sweeper found at or below its M (first few)."""
        self.conflict_count = 0

    def _fail(self, kind: ViolationKind, detail: str) -> None:
        self.violations.append(Violation(kind, self.step, detail))

    def crash(self, detail: str) -> None:
        """An actor raised an exception nothing in l0gc should let escape."""
        self._fail(ViolationKind.CRASH, detail)

    def stuck(self, detail: str) -> None:
        """The quiescent tail could not bring the system to rest."""
        self._fail(ViolationKind.TAIL_STUCK, detail)

    # -- at the moment of an event -------------------------------------------------

    def on_deleted(self, key: str, who: str) -> None:
        """A sweeper's DeleteObjects removed `key`, which existed until now."""
        if self.ledger.epoch_of(key) is None:
            self._fail(ViolationKind.DELETED_OUTSIDE_LAYOUT, f"{who} deleted {key!r}")
            return
        reason = self.ledger.protection(key)
        if reason is not None:
            kind = (
                ViolationKind.DELETED_FENCED
                if reason.startswith("fenced")
                else ViolationKind.DELETED_REFERENCED
            )
            self._fail(kind, f"{who} deleted {key!r} (epoch {self.ledger.epoch_of(key)}), {reason}")

    def on_fence_granted(self, key: str, partition: str, exists: bool) -> None:
        """A fence was granted; the object must still exist."""
        if not exists:
            self._fail(
                ViolationKind.FENCED_DELETED,
                f"fence granted on {partition} for "
                f"{key!r} (epoch {self.ledger.epoch_of(key)}), already deleted",
            )

    def on_committed(self, key: str, partition: str, offset: int, exists: bool) -> None:
        """An entry was committed; the object it references must still exist."""
        if not exists:
            self._fail(
                ViolationKind.FENCED_DELETED,
                f"{partition}@{offset} committed "
                f"{key!r} (epoch {self.ledger.epoch_of(key)}), already deleted",
            )

    def on_fencing_violation(self, partition: str, offset: int, detail: str) -> None:
        """The tracker raised FencingViolation for a committed entry."""
        self._fail(ViolationKind.FENCING_VIOLATION, f"{partition}@{offset}: {detail}")

    # -- after every step ----------------------------------------------------------

    def on_conflict(self, detail: str) -> None:
        """A sweeper found a key that a partition still references at or below its M."""
        self.conflict_count += 1
        if len(self.conflicts) < 10:
            self.conflicts.append(f"step {self.step}: {detail}")

    def _note_misled(self, detail: str) -> None:
        self.misled_count += 1
        if len(self.misled) < 10:
            self.misled.append(f"step {self.step}: {detail}")

    def _lowest(self) -> tuple[Lowest, Lowest]:
        """The lowest protected object per partition by what the publishers were told,
        and by the truth (the same unless a reconciler lied)."""
        truth = self.ledger.lowest_protected()
        ledger = self.ledger
        if isinstance(ledger, SimLedger) and ledger.misled:
            return ledger.told.lowest_protected(), truth
        return truth, truth

    def check_watermarks(
        self,
        published: Mapping[str, int],
        safe_epoch: int | None,
        cluster_epoch: int,
    ) -> None:
        """Published M(p) per live partition and the global M, read from etcd now."""
        lowest, truth = self._lowest()
        for partition in sorted(published):
            value = published[partition]
            before = self._published.get(partition)
            if before is not None and value < before:
                self._fail(
                    ViolationKind.WATERMARK_DECREASED,
                    f"M({partition}) went from {before} to {value}",
                )
            if before is None or value > before:
                self._published[partition] = value
            if partition in lowest and lowest[partition][0] <= value:
                epoch, key, why = lowest[partition]
                self._fail(
                    ViolationKind.UNSAFE_WATERMARK,
                    f"published M({partition}) = {value} covers {key!r} (epoch {epoch}), {why}",
                )
            elif partition in truth and truth[partition][0] <= value:
                epoch, key, why = truth[partition]
                self._note_misled(f"M({partition}) = {value} covers {key!r} (epoch {epoch}), {why}")
        if safe_epoch is not None:
            if safe_epoch > cluster_epoch - 1:
                detail = f"global M {safe_epoch} > cluster epoch {cluster_epoch} - 1"
                self._fail(ViolationKind.WATERMARK_ABOVE_EPOCH, detail)
            self.check_safe_epoch(safe_epoch, "global M", lowest)

    def check_safe_epoch(
        self,
        safe_epoch: int,
        source: str,
        lowest: Mapping[str, tuple[int, str, str]] | None = None,
    ) -> None:
        """A global M (read from etcd, or used by a sweeper) must not cover an object the
        publishers were told is protected."""
        lowest = self._lowest()[0] if lowest is None else lowest
        for partition in sorted(lowest):
            epoch, key, why = lowest[partition]
            if epoch <= safe_epoch:
                self._fail(
                    ViolationKind.UNSAFE_WATERMARK,
                    f"{source} {safe_epoch} covers {key!r} (epoch {epoch}), {why} on {partition}",
                )
                return

    # -- after the quiescent tail --------------------------------------------------

    def check_final(
        self,
        safe_epoch: int | None,
        cluster_epoch: int,
        present: Iterable[str],
        stuck: str | None = None,
    ) -> None:
        """Liveness: the tail came to rest, collected the garbage and did not stay pinned."""
        if stuck is not None:
            self._fail(ViolationKind.TAIL_STUCK, stuck)
            return
        if safe_epoch is None:
            self._fail(ViolationKind.TAIL_STUCK, "global M undefined after the tail")
            return
        if safe_epoch < cluster_epoch - 2:
            self._fail(
                ViolationKind.M_PINNED, f"final M {safe_epoch} < cluster epoch {cluster_epoch} - 2"
            )
        left = self.ledger.garbage_at_or_below(safe_epoch, present)
        if left:
            self._fail(
                ViolationKind.GARBAGE_LEFT,
                f"{len(left)} objects with epoch <= final M {safe_epoch} remain, e.g. {left[:3]}",
            )
