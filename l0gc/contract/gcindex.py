"""The sweepers' view of a namespace kept up to date change by change (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.gcindex`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from l0gc.contract.kv import Change
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import Reference, References, merge
from l0gc.contract.safe_epoch import (
    PINNING_LIMIT,
    GcView,
    PartitionSummary,
    PinningPartition,
    SafeEpoch,
    cluster_id_text,
    judge,
    references_in,
)
from l0gc.errors import InvalidRecord

__all__ = ["GcIndex", "IndexCheck", "NamespaceKeys"]

_DIGEST = (1 << 64) - 1
_MALFORMED = -2  # the M(p) of a malformed record in `_pack` (a real one is >= -1)


def _digest(raw: bytes) -> int:
    return hash(raw) & _DIGEST


def _pack(watermark: int, raw: bytes) -> int:
    """One int per record (~44 bytes): M(p) above bit 64, the raw value's digest below."""
    return (watermark << 64) | _digest(raw)


@dataclass(frozen=True, slots=True)
class NamespaceKeys:
    """Where a namespace keeps what the sweepers read (`l0gc.etcd.store.WatermarkStore`)."""

    epoch: str
    partitions: str
    paused: str
    binding: str
    sweepers: str


class GcIndex:
    """See the module docstring."""

    def __init__(
        self, keys: NamespaceKeys, view: GcView, pause_reason: Callable[[bytes], str | None]
    ) -> None:
        """`pause_reason` decodes a pause marker, as the full read does."""
        self._keys = keys
        self._pause_reason = pause_reason
        self._epoch: bytes | None
        self._paused_reason: str | None
        self._binding: bytes | None
        self._sweepers: dict[str, bytes]
        self._clear(view.revision, view.cluster_id)
        self._epoch = view.cluster_epoch_raw
        self._paused_reason = view.paused_reason
        self._paused = view.paused
        self._binding = view.binding_raw
        self._sweepers = dict(view.sweepers)
        for name, raw in view.partitions.items():
            self._set_partition(name, raw)

    @classmethod
    def empty(cls, keys: NamespaceKeys, pause_reason: Callable[[bytes], str | None]) -> GcIndex:
        """An index to hand a full read to (`start`, then `add` page by page)."""
        return cls(keys, GcView(revision=0, cluster_epoch_raw=None, partitions={}), pause_reason)

    def _clear(self, revision: int, cluster_id: str | None) -> None:
        self.revision = revision
        self.cluster_id = cluster_id
        self._epoch = None
        self._paused_reason = None
        self._paused = False
        self._binding = None
        self._sweepers = {}
        self._records: dict[str, int] = {}  # every record: M(p) << 64 | digest (_pack)
        self._malformed: dict[str, str] = {}
        self._groups: dict[int, set[str]] = {}  # M(p) -> the names that have it
        self._low: list[int] = []  # distinct M(p), lazily deleted
        self._high: list[int] = []  # the same, negated
        self._refs: dict[str, References] = {}  # the records that carry references
        self._merged: dict[str, Reference] | None = {}  # merge(_refs), None: to redo

    # -- a full read, page by page (l0gc.contract.kv.RangeFold) ----------------------

    def start(self, revision: int, cluster_id: int) -> None:
        """A full read (re)starts at `revision`: forget everything held so far."""
        self._clear(revision, cluster_id_text(cluster_id))

    def add(self, items: Iterable[tuple[str, bytes]]) -> None:
        """The next page of the full read."""
        for key, value in items:
            self._put(key, value)

    # -- changes ---------------------------------------------------------------------

    def apply(self, changes: Iterable[Change]) -> None:
        """Apply changes in revision order (a whole revision at a time)."""
        for change in changes:
            self.revision = max(self.revision, change.revision)
            if change.value is None:
                self._delete(change.key)
            else:
                self._put(change.key, change.value)

    def _put(self, key: str, value: bytes) -> None:
        keys = self._keys
        if key.startswith(keys.partitions):
            self._set_partition(key[len(keys.partitions) :], value)
        elif key == keys.epoch:
            self._epoch = value
        elif key == keys.paused:
            self._paused = True
            self._paused_reason = self._pause_reason(value)
        elif key == keys.binding:
            self._binding = value
        elif key.startswith(keys.sweepers):
            self._sweepers[key[len(keys.sweepers) :]] = value

    def _delete(self, key: str) -> None:
        keys = self._keys
        if key.startswith(keys.partitions):
            self._drop_partition(key[len(keys.partitions) :])
        elif key == keys.epoch:
            self._epoch = None
        elif key == keys.paused:
            self._paused, self._paused_reason = False, None
        elif key == keys.binding:
            self._binding = None
        elif key.startswith(keys.sweepers):
            self._sweepers.pop(key[len(keys.sweepers) :], None)

    def _set_partition(self, name: str, raw: bytes) -> None:
        if name in self._records:
            self._drop_partition(name)
        try:
            watermark = PartitionRecord.watermark_of(raw, partition=name)
        except InvalidRecord as exc:
            self._malformed[name] = str(exc)
            self._records[name] = _pack(_MALFORMED, raw)
            return
        self._records[name] = _pack(watermark, raw)
        held = references_in(name, raw)
        if held is not None:
            self._refs[name] = held
            self._merged = None
        group = self._groups.get(watermark)
        if group is None:
            group = self._groups[watermark] = set()
            if len(self._low) > 2 * len(self._groups) + 64:  # mostly dead values: rebuild
                self._low = list(self._groups)
                self._high = [-mark for mark in self._groups]
                heapq.heapify(self._low)
                heapq.heapify(self._high)
            else:
                heapq.heappush(self._low, watermark)
                heapq.heappush(self._high, -watermark)
        group.add(name)

    def _drop_partition(self, name: str) -> None:
        packed = self._records.pop(name, None)
        if packed is None:
            return
        if self._refs.pop(name, None) is not None:
            self._merged = None
        mark = packed >> 64
        if mark == _MALFORMED:
            del self._malformed[name]
            return
        group = self._groups[mark]
        group.discard(name)
        if not group:
            del self._groups[mark]

    # -- reading ---------------------------------------------------------------------

    def _live(self, heap: list[int], sign: int) -> int | None:
        """The top live value of `heap` (dead ones popped for good), signed back."""
        while heap:
            if sign * heap[0] in self._groups:
                return sign * heap[0]
            heapq.heappop(heap)
        return None

    def summary(self) -> PartitionSummary:
        """The partition summary `l0gc.contract.safe_epoch.judge` takes."""
        malformed = None
        if self._malformed:
            name = min(self._malformed)
            malformed = (name, self._malformed[name])
        top = self._live(self._high, -1)
        highest = None if top is None else (min(self._groups[top]), top)
        lowest = self._live(self._low, 1)
        pinning: tuple[PinningPartition, ...] = ()
        if lowest is not None:
            names = heapq.nsmallest(PINNING_LIMIT, self._groups[lowest])
            pinning = tuple(PinningPartition(name, lowest) for name in names)
        if self._merged is None:
            self._merged = merge(self._refs)
        return PartitionSummary(
            len(self._records), malformed, highest, lowest, pinning, self._merged, len(self._refs)
        )

    def record_count(self) -> int:
        """How many partition records the index holds (malformed ones too)."""
        return len(self._records)

    def watermark_of(self, name: str) -> int | None:
        """The M(p) held for partition `name`; None if it has no record or a malformed one."""
        packed = self._records.get(name)
        if packed is None or packed >> 64 == _MALFORMED:
            return None
        return packed >> 64

    def view(self) -> GcView:
        """The view a full read at `revision` would return, without the partition records."""
        return GcView(
            revision=self.revision,
            cluster_epoch_raw=self._epoch,
            partitions={},
            paused=self._paused,
            paused_reason=self._paused_reason,
            binding_raw=self._binding,
            cluster_id=self.cluster_id,
            sweepers=dict(self._sweepers),
        )

    def safe_epoch(self) -> SafeEpoch:
        """M and the rest, by the rules of a full read."""
        return judge(self.view(), self.summary())

    def small_keys_differ(self, read: GcView) -> str | None:
        """None when `read` (a read of the small keys alone: cluster epoch, pause marker,
        binding, sweeper announcements) holds what this index does; else which differs."""
        return _small_keys_differ(self.view(), read)

    def checker(self) -> IndexCheck:
        """A `l0gc.contract.kv.RangeFold` that compares a full read with this index."""
        return IndexCheck(self)

    def matches(self, full: GcView) -> str | None:
        """None if the full read `full` (at this index's revision) holds exactly what the
        index does; else what differs (for the report)."""
        check = self.checker()
        check.start(full.revision, 0)
        check.add((self._keys.partitions + name, raw) for name, raw in full.partitions.items())
        return _differs(self.view(), full, check)


class IndexCheck:
    """A full read compared with a `GcIndex`, page by page (a `RangeFold`): each partition
    record by name and digest as it arrives (nothing of it is kept), the other keys in an
    index of their own (`read`: the view the full read gave, without partition records)."""

    def __init__(self, index: GcIndex) -> None:
        self._index = index
        self.read = GcIndex.empty(index._keys, index._pause_reason)
        self.records = 0
        """How many partition records the read held."""
        self._first: str | None = None  # the first record that differs, by name

    def start(self, revision: int, cluster_id: int) -> None:
        """The read (re)starts: forget what it gave so far."""
        self.read.start(revision, cluster_id)
        self.records, self._first = 0, None

    def add(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Compare the next page's partition records; keep the other keys."""
        prefix = self._index._keys.partitions
        records = self._index._records
        for key, value in items:
            if not key.startswith(prefix):
                self.read._put(key, value)
                continue
            self.records += 1
            packed = records.get(key[len(prefix) :])
            if self._first is None and (packed is None or packed & _DIGEST != _digest(value)):
                self._first = key[len(prefix) :]

    def differs(self) -> str | None:
        """None when the read holds exactly what the index does; else what differs."""
        return _differs(self._index.view(), self.read.view(), self)


def _differs(ours: GcView, theirs: GcView, check: IndexCheck) -> str | None:
    small = _small_keys_differ(ours, theirs)
    if small is not None:
        return small
    if check._first is not None:
        return f"partition records differ, e.g. {check._first!r}"
    held = len(check._index._records)
    if check.records != held:  # every record read is in the index: it holds more
        return f"the index holds {held} partition records, the full read {check.records}"
    return None


def _small_keys_differ(ours: GcView, theirs: GcView) -> str | None:
    for label, mine, read in (
        ("cluster epoch", ours.cluster_epoch_raw, theirs.cluster_epoch_raw),
        ("pause marker", (ours.paused, ours.paused_reason), (theirs.paused, theirs.paused_reason)),
        ("binding", ours.binding_raw, theirs.binding_raw),
        ("sweeper announcements", ours.sweepers, theirs.sweepers),
    ):
        if mine != read:
            return f"{label} differs"
    return None
