"""The sweepers' view of a namespace kept up to date change by change (pure, no I/O).

A `GcIndex` starts from one full read (`GcView` at revision R) and applies etcd's
changes after R (`watermark.core.kv.Change`: a put or a delete of one key, with its
revision); its revision is the last change's, so after whole revisions in order it
holds exactly the namespace at that revision. It keeps
every raw value the full read would return (cluster epoch, pause marker, binding,
sweeper announcements, partition records), so `view()` at revision R' equals a full
read at R' (which is how a follower checks itself: `matches`), and it keeps the
partition summary of `watermark.core.safe_epoch` current in O(log n) per change:

- M(p) of every well-formed record in a min-heap and a max-heap of (M(p), name) with
  lazy deletion (an entry is live while the name still maps to that M(p); a name may
  have several live copies, which only the pinning walk has to skip); the lowest and
  highest are found by popping dead entries off the top, and the heaps are rebuilt
  when dead entries outnumber live ones;
- malformed records by name (any one blocks M; the lowest name is reported);
- the pinning records (M(p) equal to the lowest) by popping the live minimum entries
  and pushing them back: O(k log n) for k <= `PINNING_LIMIT`.

`safe_epoch()` is then `judge(view, summary)`: the same rules as a full read, at the
cost of decoding one changed record per change instead of every record per round.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from watermark.core.kv import Change
from watermark.core.record import PartitionRecord
from watermark.core.safe_epoch import PINNING_LIMIT, GcView, PartitionSummary, SafeEpoch, judge
from watermark.errors import InvalidRecord

__all__ = ["GcIndex", "NamespaceKeys"]


@dataclass(frozen=True, slots=True)
class NamespaceKeys:
    """Where a namespace keeps what the sweepers read (`watermark.etcd.store.WatermarkStore`)."""

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
        self.revision = view.revision
        self.cluster_id = view.cluster_id
        self._epoch = view.cluster_epoch_raw
        self._paused_raw: bytes | None = None
        self._paused_reason = view.paused_reason
        self._paused = view.paused
        self._binding = view.binding_raw
        self._sweepers = dict(view.sweepers)
        self._raw: dict[str, bytes] = {}
        self._marks: dict[str, int] = {}
        self._malformed: dict[str, str] = {}
        self._low: list[tuple[int, str]] = []
        self._high: list[tuple[int, str]] = []
        for name, raw in view.partitions.items():
            self._set_partition(name, raw)

    # -- changes ---------------------------------------------------------------------

    def apply(self, changes: Iterable[Change]) -> None:
        """Apply changes in revision order (a whole revision at a time)."""
        keys = self._keys
        for change in changes:
            key, value = change.key, change.value
            self.revision = max(self.revision, change.revision)
            if key.startswith(keys.partitions):
                name = key[len(keys.partitions) :]
                if value is None:
                    self._drop_partition(name)
                else:
                    self._set_partition(name, value)
            elif key == keys.epoch:
                self._epoch = value
            elif key == keys.paused:
                self._paused = value is not None
                self._paused_reason = None if value is None else self._reason(value)
            elif key == keys.binding:
                self._binding = value
            elif key.startswith(keys.sweepers):
                sweeper = key[len(keys.sweepers) :]
                if value is None:
                    self._sweepers.pop(sweeper, None)
                else:
                    self._sweepers[sweeper] = value

    def _reason(self, raw: bytes) -> str | None:
        return self._pause_reason(raw)

    def _set_partition(self, name: str, raw: bytes) -> None:
        self._raw[name] = raw
        self._marks.pop(name, None)
        self._malformed.pop(name, None)
        try:
            watermark = PartitionRecord.watermark_of(raw, partition=name)
        except InvalidRecord as exc:
            self._malformed[name] = str(exc)
            return
        self._marks[name] = watermark
        if len(self._low) > 2 * len(self._marks) + 64:  # mostly dead entries: rebuild
            self._low = [(mark, n) for n, mark in self._marks.items()]
            self._high = [(-mark, n) for n, mark in self._marks.items()]
            heapq.heapify(self._low)
            heapq.heapify(self._high)
            return
        heapq.heappush(self._low, (watermark, name))
        heapq.heappush(self._high, (-watermark, name))

    def _drop_partition(self, name: str) -> None:
        self._raw.pop(name, None)
        self._marks.pop(name, None)
        self._malformed.pop(name, None)

    # -- reading ---------------------------------------------------------------------

    def _live(self, heap: list[tuple[int, str]], sign: int) -> tuple[int, str] | None:
        """The top live entry of `heap` (dead ones popped for good)."""
        while heap:
            mark, name = heap[0]
            if self._marks.get(name) == sign * mark:
                return heap[0]
            heapq.heappop(heap)
        return None

    def summary(self) -> PartitionSummary:
        """The partition summary `watermark.core.safe_epoch.judge` takes."""
        malformed = None
        if self._malformed:
            name = min(self._malformed)
            malformed = (name, self._malformed[name])
        top = self._live(self._high, -1)
        highest = None if top is None else (top[1], -top[0])
        bottom = self._live(self._low, 1)
        lowest = None if bottom is None else bottom[0]
        return PartitionSummary(len(self._raw), malformed, highest, lowest, self._pinning(lowest))

    def _pinning(self, lowest: int | None) -> tuple[PartitionRecord, ...]:
        """Up to PINNING_LIMIT records at the lowest M(p), in name order."""
        if lowest is None:
            return ()
        taken: list[tuple[int, str]] = []
        seen: set[str] = set()
        while len(taken) < PINNING_LIMIT:
            top = self._live(self._low, 1)
            if top is None or top[0] != lowest:
                break
            entry = heapq.heappop(self._low)
            if entry[1] not in seen:  # a name set twice to one M(p) has two live copies
                seen.add(entry[1])
                taken.append(entry)
        for entry in taken:
            heapq.heappush(self._low, entry)
        return tuple(PartitionRecord.decode(self._raw[name], partition=name) for _, name in taken)

    def view(self, *, with_partitions: bool = True) -> GcView:
        """The view a full read at `revision` would return (partitions only if asked)."""
        return GcView(
            revision=self.revision,
            cluster_epoch_raw=self._epoch,
            partitions=dict(self._raw) if with_partitions else {},
            paused=self._paused,
            paused_reason=self._paused_reason,
            binding_raw=self._binding,
            cluster_id=self.cluster_id,
            sweepers=dict(self._sweepers),
        )

    def safe_epoch(self) -> SafeEpoch:
        """M and the rest, by the rules of a full read."""
        return judge(self.view(with_partitions=False), self.summary())

    def matches(self, full: GcView) -> str | None:
        """None if a full read at this index's revision holds exactly what the index does;
        else what differs (for the report)."""
        ours = self.view()
        for label, mine, theirs in (
            ("cluster epoch", ours.cluster_epoch_raw, full.cluster_epoch_raw),
            ("pause marker", (ours.paused, ours.paused_reason), (full.paused, full.paused_reason)),
            ("binding", ours.binding_raw, full.binding_raw),
            ("sweeper announcements", ours.sweepers, full.sweepers),
        ):
            if mine != theirs:
                return f"{label} differs"
        if ours.partitions != full.partitions:
            names = sorted(set(ours.partitions).symmetric_difference(full.partitions)) or sorted(
                n for n in ours.partitions if ours.partitions[n] != full.partitions[n]
            )
            return f"{len(names)} partition records differ, e.g. {names[0]!r}"
        return None
