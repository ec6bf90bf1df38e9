"""The global safe epoch M, computed from one consistent read of etcd (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.safe_epoch`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import Reference, References, merge
from l0gc.errors import InvalidRecord

__all__ = [
    "PINNING_LIMIT",
    "GcView",
    "PartitionSummary",
    "PinningPartition",
    "SafeEpoch",
    "cluster_id_text",
    "compute_safe_epoch",
    "judge",
    "parse_cluster_epoch",
    "references_in",
    "summarize",
]

_PINNING_LIMIT = 10


def cluster_id_text(raw: int) -> str | None:
    """etcd's cluster id as `GcView.cluster_id` shows it (0: the client cannot tell)."""
    return None if raw == 0 else f"{raw:016x}"


class PinningPartition(NamedTuple):
    """A partition whose M(p) is the minimum: it pins M (what an operator looks at)."""

    partition: str
    watermark: int


@dataclass(frozen=True, slots=True)
class GcView:
    """Everything the sweeper needs from etcd, read at one revision."""

    revision: int
    cluster_epoch_raw: bytes | None
    partitions: Mapping[str, bytes]
    paused: bool = False
    paused_reason: str | None = None
    binding_raw: bytes | None = None
    """`{ns}/binding` (`l0gc.contract.binding`), None when the namespace is not bound."""
    cluster_id: str | None = None
    """The etcd cluster the view was read from, None when the client cannot tell."""
    sweepers: Mapping[str, bytes] = field(default_factory=dict)
    """`{ns}/sweepers/{id}` announcements of running sweepers, by id."""


@dataclass(frozen=True, slots=True)
class SafeEpoch:
    """The outcome of a safe-epoch read: M, or why there is none."""

    revision: int
    cluster_epoch: int | None
    safe_epoch: int | None
    partition_count: int
    pinning: tuple[PinningPartition, ...] = ()
    blocked_reason: str | None = None
    blocked_partition: str | None = None
    paused: bool = False
    paused_reason: str | None = None
    refused_reason: str | None = None
    """Why deletion is refused whatever M is: the namespace is not bound to the storage the
    sweeper is pointed at, or sweepers disagree on shards (set by `gcd.sweep.binding`)."""
    references: Mapping[str, Reference] = field(default_factory=dict)
    """Every key an unreleased entry references, read at `revision` (docs/references.md)."""
    referencing: int = 0
    """How many partitions' writers send references."""

    @property
    def defined(self) -> bool:
        """True when M is known and deletion may proceed (pause is a separate matter)."""
        return self.safe_epoch is not None


MAX_CLUSTER_EPOCH = 2**63 - 1
"""The highest cluster epoch (int64); `watermark epoch advance` refuses to go past it."""


def parse_cluster_epoch(raw: bytes | None) -> int:
    """Decode the `{ns}/epoch` value; raise InvalidRecord naming the bad value."""
    if raw is None:
        raise InvalidRecord(
            "cluster epoch key is missing: is --namespace right? (a namespace in use always "
            "has one; only a new namespace starts without it, until its first `watermark "
            "epoch advance`)"
        )
    text = raw.decode("ascii", errors="replace")
    if not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0"):
        raise InvalidRecord(f"cluster epoch value {text!r} is not a non-negative decimal")
    value = int(text)
    if value > MAX_CLUSTER_EPOCH:
        raise InvalidRecord(
            f"cluster epoch value {text!r} overflows int64 (at most {MAX_CLUSTER_EPOCH}); "
            "l0gc never writes such a value: put the epoch back with `etcdctl put` to the "
            "highest value any partition has seen plus one"
        )
    return value


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """What the rules need from the partition records: the full read computes it with one
    scan (`summarize`), `l0gc.contract.gcindex` keeps it up to date event by event."""

    count: int
    malformed: tuple[str, str] | None = None
    """(name, reason) of the lowest-sorting malformed record, if any."""
    highest: tuple[str, int] | None = None
    """(name, M(p)) of the highest M(p) (the lowest-sorting name among equals)."""
    lowest: int | None = None
    pinning: tuple[PinningPartition, ...] = ()
    """Up to `PINNING_LIMIT` partitions whose M(p) is `lowest`, in name order."""
    references: Mapping[str, Reference] = field(default_factory=dict)
    """Every referenced key (`l0gc.contract.references.merge`)."""
    referencing: int = 0
    """Records that carry references (their writers send them)."""


def references_in(name: str, raw: bytes) -> References | None:
    """The references of a record already checked by `PartitionRecord.watermark_of`
    (a byte search first: most records carry none)."""
    if b'"references"' not in raw:
        return None
    return PartitionRecord.references_of(raw, partition=name)


PINNING_LIMIT = _PINNING_LIMIT


def summarize(partitions: Mapping[str, bytes]) -> PartitionSummary:
    """One pass over the raw records in name order.

    Every record is checked as `PartitionRecord.decode` checks it, but none is built
    into a record: holding 100k decoded records (tracker dicts and all) made the cyclic
    GC traverse an ever larger heap, half the time of a 100k-record read. The sort is
    cheap: names arrive in key order from etcd, and sorting a sorted list is linear."""
    malformed: tuple[str, str] | None = None
    highest: tuple[str, int] | None = None
    lowest: int | None = None
    lowest_names: list[str] = []
    refs: dict[str, References] = {}
    for name in sorted(partitions):
        try:
            watermark = PartitionRecord.watermark_of(partitions[name], partition=name)
        except InvalidRecord as exc:
            if malformed is None:
                malformed = (name, str(exc))
            continue
        held = references_in(name, partitions[name])
        if held is not None:
            refs[name] = held
        if highest is None or watermark > highest[1]:
            highest = (name, watermark)
        if lowest is None or watermark < lowest:
            lowest = watermark
            lowest_names = [name]
        elif watermark == lowest and len(lowest_names) < _PINNING_LIMIT:
            lowest_names.append(name)
    pinning: tuple[PinningPartition, ...] = ()
    if lowest is not None:
        pinning = tuple(PinningPartition(name, lowest) for name in lowest_names)
    return PartitionSummary(
        len(partitions), malformed, highest, lowest, pinning, merge(refs), len(refs)
    )


def compute_safe_epoch(view: GcView) -> SafeEpoch:
    """Global M from one view; undefined (with reason) on anything missing or malformed."""
    return judge(view, summarize(view.partitions))


def judge(view: GcView, summary: PartitionSummary) -> SafeEpoch:
    """The rules (see the module docstring) over `view`'s epoch and pause marker and the
    summary of its partition records. A malformed record blocks before an M(p) at or
    above the cluster epoch does."""
    count = summary.count

    def blocked(reason: str, partition: str | None = None, epoch: int | None = None) -> SafeEpoch:
        return SafeEpoch(
            revision=view.revision,
            cluster_epoch=epoch,
            safe_epoch=None,
            partition_count=count,
            blocked_reason=reason,
            blocked_partition=partition,
            paused=view.paused,
            paused_reason=view.paused_reason,
        )

    try:
        cluster_epoch = parse_cluster_epoch(view.cluster_epoch_raw)
    except InvalidRecord as exc:
        return blocked(str(exc))
    if summary.malformed is not None:
        name, reason = summary.malformed
        return blocked(f"malformed partition record: {reason}", name, cluster_epoch)
    if summary.highest is not None and summary.highest[1] >= cluster_epoch:
        name, watermark = summary.highest
        return blocked(
            f"partition {name!r} publishes M(p) = {watermark}, at or above the cluster "
            f"epoch {cluster_epoch}: no object of an epoch that is still being written "
            "can be garbage, so its publisher is broken or the epoch key was rewound "
            "(docs/operations.md#gc-blocked)",
            name,
            cluster_epoch,
        )
    safe = cluster_epoch - 1 if summary.lowest is None else summary.lowest
    return SafeEpoch(
        revision=view.revision,
        cluster_epoch=cluster_epoch,
        safe_epoch=safe,
        partition_count=count,
        pinning=summary.pinning if summary.lowest is not None else (),
        paused=view.paused,
        paused_reason=view.paused_reason,
        references=summary.references,
        referencing=summary.referencing,
    )
