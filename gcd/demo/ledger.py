"""The demo's ground truth: which objects are still referenced (pure, no I/O).

Theory of operation
-------------------
The demo writes every object itself, so it knows what the sweeper must never touch.
Each object moves through these states, driven by the writers, the reconciler and the
sweeper's delete requests (seen through `gcd.demo.s3io.CountingStore`):

    UPLOADED --commit--> REFERENCED --reconciled--> RECONCILED
        |                                               |
        +--fence refused--> ORPHANED                    |
    any state --deleted by the sweeper--> DELETED  <----+

- UPLOADED: in the bucket, not in the partition log yet (the fence is pending). The
  sweeper may delete it only if its fence is then refused, which makes it an orphan.
- REFERENCED: committed to the partition log at some offset and not yet lifted by the
  reconciler. This is the data the collector must keep: it is *live*.
- RECONCILED, ORPHANED: garbage; the sweeper should delete it once M covers its epoch.

A loss (`live_lost`) is either a delete that completes while the object is REFERENCED,
or a commit of an object that was already deleted (its fence was granted after the
sweeper removed the upload). Both are what the watermark rules exist to prevent, so
the demo counts them and fails if there is any.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Ledger", "LedgerCounts", "Loss", "ObjectState"]


class ObjectState(enum.Enum):
    """Where one demo object is in its life."""

    UPLOADED = "uploaded"
    REFERENCED = "referenced"
    RECONCILED = "reconciled"
    ORPHANED = "orphaned"
    DELETED = "deleted"


_GARBAGE = frozenset({ObjectState.RECONCILED, ObjectState.ORPHANED})
_LIVE = frozenset({ObjectState.UPLOADED, ObjectState.REFERENCED})


@dataclass(frozen=True, slots=True)
class Loss:
    """One referenced object the sweeper removed, and how it was noticed."""

    key: str
    partition: str
    epoch: int
    how: str


@dataclass(frozen=True, slots=True)
class LedgerCounts:
    """Object counts at one moment (for the live view and the summary)."""

    written: int
    live: int
    garbage: int
    deleted: int
    orphans: int
    live_lost: int


@dataclass(slots=True)
class _Object:
    partition: str
    epoch: int
    state: ObjectState
    offset: int | None = None
    garbage: bool = False  # became garbage before it was deleted


@dataclass(slots=True)
class _Partition:
    committed: deque[tuple[int, str]] = field(default_factory=deque)  # (offset, key), in order
    reconciled_offset: int = -1
    last_offset: int = -1


class Ledger:
    """Every object the demo wrote and what it is now; see the module docstring."""

    def __init__(self) -> None:
        self._objects: dict[str, _Object] = {}
        self._partitions: dict[str, _Partition] = {}
        self._counts = dict.fromkeys(ObjectState, 0)
        self.orphans = 0
        self.losses: list[Loss] = []
        self.unknown_deleted = 0
        self.max_epoch: int | None = None

    # -- transitions ------------------------------------------------------------------

    def uploaded(self, key: str, partition: str, epoch: int) -> None:
        """An object was uploaded (before its fence)."""
        if key in self._objects:
            raise ValueError(f"object {key!r} is already in the ledger; keys must be unique")
        self._objects[key] = _Object(partition, epoch, ObjectState.UPLOADED)
        self.max_epoch = epoch if self.max_epoch is None else max(self.max_epoch, epoch)
        self._partitions.setdefault(partition, _Partition())
        self._counts[ObjectState.UPLOADED] += 1

    def committed(self, key: str, offset: int) -> None:
        """The object's fence was granted and its entry committed at `offset`."""
        obj = self._objects[key]
        part = self._partitions[obj.partition]
        if offset <= part.last_offset:
            raise ValueError(
                f"object {key!r} committed at offset {offset}, not after {part.last_offset}; "
                "a partition's entries are committed in offset order"
            )
        obj.offset = offset
        part.last_offset = offset
        if obj.state is ObjectState.DELETED:
            self.losses.append(Loss(key, obj.partition, obj.epoch, "committed after deletion"))
            return
        if obj.state is not ObjectState.UPLOADED:
            raise ValueError(f"object {key!r} committed from state {obj.state.value}")
        if offset <= part.reconciled_offset:
            self._move(obj, ObjectState.RECONCILED)
        else:
            part.committed.append((offset, key))
            self._move(obj, ObjectState.REFERENCED)

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
        part.reconciled_offset = max(part.reconciled_offset, offset)
        freed = 0
        while part.committed and part.committed[0][0] <= offset:
            _, key = part.committed.popleft()
            obj = self._objects[key]
            obj.garbage = True
            if obj.state is ObjectState.REFERENCED:
                self._move(obj, ObjectState.RECONCILED)
                freed += 1
        return freed

    def deleted(self, keys: Iterable[str]) -> list[Loss]:
        """The sweeper deleted `keys` (request completed); returns the losses among them."""
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

    # -- queries ----------------------------------------------------------------------

    def state(self, key: str) -> ObjectState | None:
        """The object's state, None when the demo never wrote it."""
        obj = self._objects.get(key)
        return None if obj is None else obj.state

    def epoch(self, key: str) -> int | None:
        """The epoch stamped on the object, None when unknown."""
        obj = self._objects.get(key)
        return None if obj is None else obj.epoch

    def referenced(self) -> list[str]:
        """Keys that are committed and not yet reconciled, sorted."""
        return sorted(k for k, o in self._objects.items() if o.state is ObjectState.REFERENCED)

    def is_garbage(self, key: str) -> bool:
        """True for a key the demo wrote that is reconciled or orphaned (deleted or not)."""
        obj = self._objects.get(key)
        return obj is not None and obj.garbage

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
