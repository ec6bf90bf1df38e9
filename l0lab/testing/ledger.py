"""Ground truth about objects: which ones the partition logs still need (pure, no I/O).

Theory of operation
-------------------
The simulation (`l0lab.sim`) and the demo (`l0lab.demo`) write every object themselves, so
they know, independently of the code under test, what the sweeper must never touch. One
`Ledger` keeps that account for both: the simulation's invariants ask it what is
protected (`l0lab.sim.checks.Checker`), the demo counts and reports from it.

Events, as the writers, reconcilers and sweepers cause them:

- `uploaded(key, epoch, partition=None)`: an object is in the bucket; `epoch` None marks a
  key outside the layout (never deletable).
- `fence_granted` / `fence_finished`: a writer holds (then no longer holds) an accepted
  fence for the object on a partition.
- `committed(key, partition, offset)`: the partition's log references the object at a
  writer offset (an object may be referenced by several partitions and offsets).
- `orphaned(key)`: the object's fence was refused; it will never be committed.
- `reconciled(partition, offset)`: the partition's reconciler lifted its log through
  `offset`; `partition_deleted(partition)`: the partition's data is dropped with it.
- `deleted(keys)`: a sweeper's delete of these keys completed.

An object is *protected* (`protection`) while a live partition's log references it above
that partition's reconciled offset, or while a live fence on a live partition is held
for it. For counting, each object is in one state:

    UPLOADED --commit--> REFERENCED --reconciled--> RECONCILED
        |                                               |
        +--fence refused--> ORPHANED                    |
    any state --deleted by a sweeper--> DELETED  <------+

REFERENCED lasts until every reference of the object is reconciled. A *loss* is what the
watermark rules exist to prevent, recorded as it happens: a delete of a REFERENCED object
("deleted while referenced"), a commit of an object already deleted ("committed after
deletion": its fence was granted after the sweeper removed the upload), or a referenced
object missing when read back ("missing at readback").
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["FenceIsLive", "Ledger", "LedgerCounts", "Loss", "ObjectState"]


class ObjectState(enum.Enum):
    """Where one object is in its life."""

    UPLOADED = "uploaded"
    REFERENCED = "referenced"
    RECONCILED = "reconciled"
    ORPHANED = "orphaned"
    DELETED = "deleted"


_GARBAGE = frozenset({ObjectState.RECONCILED, ObjectState.ORPHANED})
_LIVE = frozenset({ObjectState.UPLOADED, ObjectState.REFERENCED})

FenceIsLive = Callable[[int], bool]
"""Asks the caller whether a fence (by id) is still held by the partition's leader."""


@dataclass(frozen=True, slots=True)
class Loss:
    """One object the partition logs still needed that was lost, and how it was noticed."""

    key: str
    partition: str | None
    epoch: int | None
    how: str


@dataclass(frozen=True, slots=True)
class LedgerCounts:
    """Object counts at one moment (for the demo's live view and summary)."""

    written: int
    live: int
    garbage: int
    deleted: int
    orphans: int
    live_lost: int


@dataclass(slots=True)
class _Object:
    epoch: int | None  # None: not a layout key (never deletable)
    partition: str | None  # the partition it was written for, when the writer said
    state: ObjectState = ObjectState.UPLOADED
    refs: dict[tuple[str, int], None] = field(default_factory=dict)  # (partition, offset)
    fences: dict[int, str] = field(default_factory=dict)  # fence id -> partition
    open_refs: int = 0  # references not reconciled yet
    garbage: bool = False  # became garbage (reconciled or orphaned), deleted or not


@dataclass(slots=True)
class _Partition:
    reconciled: int = -1  # writer offset through which the data is really lifted
    last_offset: int = -1
    live: bool = True
    pending: deque[tuple[int, str]] = field(default_factory=deque)  # (offset, key) unlifted


class Ledger:
    """Every object written and what it is now; see the module docstring."""

    def __init__(self, fence_is_live: FenceIsLive | None = None) -> None:
        self._objects: dict[str, _Object] = {}
        self._partitions: dict[str, _Partition] = {}
        # Keys that may be protected: an object leaves once nothing protects it, and only
        # a new fence or commit (which put it back) can protect it again.
        self._candidates: dict[str, None] = {}
        self._fence_is_live = fence_is_live or (lambda _fence: True)
        self._counts = dict.fromkeys(ObjectState, 0)
        self.orphans = 0
        self.losses: list[Loss] = []
        self.unknown_deleted = 0
        self.max_epoch: int | None = None

    # -- events ------------------------------------------------------------------

    def uploaded(self, key: str, epoch: int | None, partition: str | None = None) -> None:
        """An object was written (before its fence); keys are unique."""
        if key in self._objects:
            raise ValueError(f"object {key!r} is already in the ledger; keys must be unique")
        self._objects[key] = _Object(epoch, partition)
        self._counts[ObjectState.UPLOADED] += 1
        if epoch is not None:
            self.max_epoch = epoch if self.max_epoch is None else max(self.max_epoch, epoch)

    def partition_created(self, partition: str) -> None:
        """A partition was registered (before any write to it)."""
        self._partitions[partition] = _Partition()

    def partition_deleted(self, partition: str) -> None:
        """A partition's record was removed: its unreconciled data is dropped with it."""
        self._partitions[partition].live = False

    def fence_granted(self, fence: int, key: str, partition: str) -> None:
        """A writer holds an accepted fence for `key` on `partition`."""
        self._objects[key].fences[fence] = partition
        self._candidates[key] = None

    def fence_finished(self, fence: int, key: str) -> None:
        """The fence was committed, aborted, or found reclaimed."""
        self._objects[key].fences.pop(fence, None)

    def committed(self, key: str, partition: str, offset: int) -> None:
        """`partition`'s log references `key` at writer `offset` (offsets only go up)."""
        obj = self._objects[key]
        part = self._partitions.setdefault(partition, _Partition())
        if offset <= part.last_offset:
            raise ValueError(
                f"object {key!r} committed at offset {offset}, not after {part.last_offset}; "
                "a partition's entries are committed in offset order"
            )
        if obj.state is ObjectState.ORPHANED:
            raise ValueError(f"object {key!r} committed after its fence was refused")
        part.last_offset = offset
        obj.refs[(partition, offset)] = None
        self._candidates[key] = None
        if obj.state is ObjectState.DELETED:
            self.losses.append(Loss(key, partition, obj.epoch, "committed after deletion"))
            return
        if offset > part.reconciled:
            part.pending.append((offset, key))
            obj.open_refs += 1
            self._move(obj, ObjectState.REFERENCED)
        elif obj.state is ObjectState.UPLOADED:
            obj.garbage = True
            self._move(obj, ObjectState.RECONCILED)

    def orphaned(self, key: str) -> None:
        """The object's fence was refused: it will never be committed."""
        obj = self._objects[key]
        self.orphans += 1
        obj.garbage = True
        if obj.state is ObjectState.UPLOADED:
            self._move(obj, ObjectState.ORPHANED)

    def reconciled(self, partition: str, offset: int) -> int:
        """The reconciler lifted every entry of `partition` through `offset`; returns how
        many objects became garbage."""
        part = self._partitions.setdefault(partition, _Partition())
        part.reconciled = max(part.reconciled, offset)
        freed = 0
        while part.pending and part.pending[0][0] <= offset:
            _, key = part.pending.popleft()
            obj = self._objects[key]
            obj.open_refs -= 1
            if obj.open_refs == 0 and obj.state is ObjectState.REFERENCED:
                obj.garbage = True
                self._move(obj, ObjectState.RECONCILED)
                freed += 1
        return freed

    def deleted(self, keys: Iterable[str]) -> list[Loss]:
        """A sweeper deleted `keys` (request completed); returns the losses among them."""
        found: list[Loss] = []
        for key in keys:
            obj = self._objects.get(key)
            if obj is None:
                self.unknown_deleted += 1
                continue
            if obj.state is ObjectState.DELETED:
                continue
            if obj.state is ObjectState.REFERENCED:
                found.append(Loss(key, obj.partition, obj.epoch, "deleted while referenced"))
            self._move(obj, ObjectState.DELETED)
        self.losses.extend(found)
        return found

    def missing_at_readback(self, key: str) -> None:
        """A referenced object was not found when read back at the end."""
        obj = self._objects[key]
        self.losses.append(Loss(key, obj.partition, obj.epoch, "missing at readback"))

    def _move(self, obj: _Object, state: ObjectState) -> None:
        self._counts[obj.state] -= 1
        self._counts[state] += 1
        obj.state = state

    # -- queries -----------------------------------------------------------------

    def is_known(self, key: str) -> bool:
        """True for every key written through this ledger."""
        return key in self._objects

    def epoch_of(self, key: str) -> int | None:
        """The epoch stamped on a layout key; None for junk or unknown keys."""
        obj = self._objects.get(key)
        return None if obj is None else obj.epoch

    def state(self, key: str) -> ObjectState | None:
        """The object's state, None when it was never written."""
        obj = self._objects.get(key)
        return None if obj is None else obj.state

    def is_garbage(self, key: str) -> bool:
        """True for a written key that is reconciled or orphaned (deleted or not)."""
        obj = self._objects.get(key)
        return obj is not None and obj.garbage

    def referenced(self) -> list[str]:
        """Keys that are committed and not yet reconciled everywhere, sorted."""
        return sorted(k for k, o in self._objects.items() if o.state is ObjectState.REFERENCED)

    def counts(self) -> LedgerCounts:
        """The counts now."""
        c = self._counts
        return LedgerCounts(
            written=len(self._objects),
            live=sum(c[s] for s in _LIVE),
            garbage=sum(c[s] for s in _GARBAGE),
            deleted=c[ObjectState.DELETED],
            orphans=self.orphans,
            live_lost=len(self.losses),
        )

    def _protectors(self, obj: _Object) -> Iterator[tuple[str, int, int | None]]:
        """What protects `obj` now, the one statement of the rule: ``(partition, offset,
        reconciled)`` for a reference above its live partition's reconciled offset, then
        ``(partition, fence, None)`` for a live fence on a live partition."""
        for partition, offset in obj.refs:
            part = self._partitions[partition]
            if part.live and offset > part.reconciled:
                yield partition, offset, part.reconciled
        for fence, partition in obj.fences.items():
            if self._partitions[partition].live and self._fence_is_live(fence):
                yield partition, fence, None

    def protection(self, key: str) -> str | None:
        """Why `key` must not be deleted now (a short reason), or None if it may be."""
        obj = self._objects.get(key)
        if obj is None:
            return None
        for partition, number, reconciled in self._protectors(obj):
            if reconciled is None:
                return f"fenced on {partition} (fence {number})"
            return f"referenced by {partition}@{number} (reconciled {reconciled})"
        return None

    def protected_keys(self) -> Iterable[str]:
        """Every key that is protected right now."""
        return [key for key in list(self._candidates) if self.protection(key) is not None]

    def lowest_protected(self) -> dict[str, tuple[int, str, str]]:
        """Per live partition, its protected object with the lowest epoch:
        ``partition -> (epoch, key, why)``."""
        lowest: dict[str, tuple[int, str, str]] = {}
        for key in list(self._candidates):
            obj = self._objects[key]
            epoch = obj.epoch
            protectors = [] if epoch is None else list(self._protectors(obj))
            if epoch is None or not protectors:
                del self._candidates[key]
                continue
            for partition, number, reconciled in protectors:
                if partition not in lowest or epoch < lowest[partition][0]:
                    why = (
                        f"fenced (fence {number})"
                        if reconciled is None
                        else f"referenced at offset {number} (reconciled {reconciled})"
                    )
                    lowest[partition] = (epoch, key, why)
        return lowest

    def garbage_at_or_below(self, safe_epoch: int, present: Iterable[str]) -> list[str]:
        """Present layout keys with epoch <= `safe_epoch` (what a sweeper should remove)."""
        found = []
        for key in present:
            epoch = self.epoch_of(key)
            if epoch is not None and epoch <= safe_epoch:
                found.append(key)
        return sorted(found)
