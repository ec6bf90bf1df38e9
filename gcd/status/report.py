"""What `gcd status` reports, as data: a `StatusReport` built from one etcd read.

`build_report` (a whole read) and `PinningFold` (page by page, as a daemon folds it) are
pure, so the demo's live view and tests use them without etcd.
Design notes: docs/internals/status.md, `gcd.status.report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final

from gcd.status.fleet import FleetStatus
from gcd.sweep.shards import ShardAnnouncement, fleet_problem
from l0gc.contract.binding import Binding
from l0gc.contract.namespace import partition_order
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import GcView, SafeEpoch, compute_safe_epoch
from l0gc.errors import InvalidRecord
from l0gc.etcd.follow import empty_index
from l0gc.etcd.store import WatermarkStore

__all__ = [
    "PINNING_SHOWN",
    "RUNBOOK",
    "STATUS_VERSION",
    "PartitionStatus",
    "PinningFold",
    "StatusReport",
    "build_report",
    "is_empty",
    "report_from_fold",
]

STATUS_VERSION: Final = 1
PINNING_SHOWN: Final = 10
RUNBOOK: Final = "docs/operations.md"


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition as the sweepers see it; `error` is set when its record is malformed."""

    partition: str
    watermark: int | None = None
    lag_epochs: int | None = None
    owner: str | None = None
    owner_epoch: int | None = None
    window: tuple[int | None, int | None] | None = None
    created_epoch: int | None = None
    updated_at: float | None = None
    age_s: float | None = None
    error: str | None = None
    owner_now: str | None = None
    """The live replica holding the partition's claim (replicated publishers only)."""
    owner_gone: bool = False
    """The record's owner is no longer a live replica (its last writer died or left), or,
    for a partition behind the cluster epoch, no running process holds it."""
    waiting: dict[str, Any] | None = None
    """What its owner waits on, as its record says (`l0gc.contract.record`)."""


@dataclass(frozen=True, slots=True)
class StatusReport:
    """`gcd status` output (the `--json` document, fields in order)."""

    version: int
    namespace: str
    revision: int
    cluster_epoch: int | None
    safe_epoch: int | None
    lag_epochs: int | None
    blocked: bool
    blocked_reason: str | None
    blocked_partition: str | None
    paused: bool
    paused_reason: str | None
    paused_at: float | None
    partition_count: int
    pinning: tuple[PartitionStatus, ...]
    partitions: tuple[PartitionStatus, ...] | None = None
    binding: dict[str, Any] | None = None
    """The storage the namespace is bound to, or None when unbound (`binding_problem`)."""
    binding_problem: str | None = None
    sweepers: tuple[dict[str, Any], ...] = ()
    """The running sweepers' shard announcements."""
    shard_problem: str | None = None
    refused: bool = False
    """Sweepers refuse to delete whatever M is: the binding or the shards are wrong."""
    unbound: bool = False
    """Not bound yet (a setup step, exit 0): sweepers delete nothing until it is."""
    fleet: dict[str, Any] | None = None
    """The publisher fleet (`gcd.status.fleet.FleetStatus.to_dict`), None when not read."""
    pinned_longest: dict[str, Any] | None = None
    """The pinning partition at its M(p) the longest (`gcd.status.why`), None: unknown."""
    why: dict[str, Any] | None = None
    """With --why: `gcd explain` of the oldest kept key (its JSON object), else None."""
    costs: dict[str, Any] | None = None
    """The sweepers' last 24 h: requests, dollars, bytes reclaimed (`gcd.rules.usage`)."""
    spark_job: dict[str, Any] | None = None
    """The Spark job running on the namespace (`l0gc.contract.spark_job`; an unreadable
    record: ``{"error": ...}``), None when there is none."""
    references: dict[str, int] | None = None
    """``{"partitions": how many partitions' writers send references, "keys": keys
    held referenced}`` (docs/references.md)."""

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        doc = asdict(self)
        if self.partitions is None:
            del doc["partitions"]
        return doc


def _partition(name: str, raw: bytes, cluster_epoch: int | None, now: float) -> PartitionStatus:
    try:
        record = PartitionRecord.decode(raw, partition=name)
    except InvalidRecord as exc:
        return PartitionStatus(partition=name, error=str(exc))
    return PartitionStatus(
        partition=name,
        watermark=record.watermark,
        lag_epochs=None if cluster_epoch is None else cluster_epoch - record.watermark,
        owner=record.owner,
        owner_epoch=record.owner_epoch,
        window=record.window,
        created_epoch=record.created_epoch,
        updated_at=record.updated_at,
        age_s=None if record.updated_at is None else round(max(0.0, now - record.updated_at), 3),
        waiting=record.waiting,
    )


class PinningFold:
    """A `l0gc.contract.kv.RangeFold` for `gcd status` without `--all`: the sweepers'
    compact index (`l0gc.contract.gcindex.GcIndex`, one int per record: M(p) and a
    digest) plus the raw records of the partitions at the lowest M(p) read so far, at
    most `PINNING_SHOWN` of them in `partition_order` (pages come in etcd's key order,
    which is not that one). A read that starts again starts the fold again."""

    def __init__(self, store: WatermarkStore) -> None:
        self.index = empty_index(store)
        self._prefix = store.partitions_prefix
        self.lowest: int | None = None
        self.kept: dict[str, bytes] = {}

    def start(self, revision: int, cluster_id: int) -> None:
        """The read (re)starts at `revision`: forget what was held."""
        self.index.start(revision, cluster_id)
        self.lowest, self.kept = None, {}

    def add(self, items: Iterable[tuple[str, bytes]]) -> None:
        """The next page of the read."""
        page = list(items)
        self.index.add(page)
        prefix = self._prefix
        for key, raw in page:
            if not key.startswith(prefix):
                continue
            name = key[len(prefix) :]
            watermark = self.index.watermark_of(name)
            if watermark is None or (self.lowest is not None and watermark > self.lowest):
                continue
            if self.lowest is None or watermark < self.lowest:
                self.lowest, self.kept = watermark, {}
            self.kept[name] = raw
            if len(self.kept) > 2 * PINNING_SHOWN:
                first = sorted(self.kept, key=partition_order)[:PINNING_SHOWN]
                self.kept = {n: self.kept[n] for n in first}


def build_report(
    view: GcView,
    namespace: str,
    now: float,
    *,
    include_all: bool = False,
    paused_at: float | None = None,
    fleet: FleetStatus | None = None,
) -> StatusReport:
    """The status from one `GcView` read at wall-clock time `now` (pure)."""
    safe = compute_safe_epoch(view)
    partitions = [
        _partition(n, view.partitions[n], safe.cluster_epoch, now)
        for n in sorted(view.partitions, key=partition_order)
    ]  # orders/2 < orders/10
    return _report(
        view,
        safe,
        partitions,
        len(partitions),
        namespace,
        include_all=include_all,
        paused_at=paused_at,
        fleet=fleet,
    )


def report_from_fold(
    fold: PinningFold,
    namespace: str,
    now: float,
    *,
    paused_at: float | None = None,
    fleet: FleetStatus | None = None,
) -> StatusReport:
    """`build_report` of the same read, from its fold (no `--all`: only the records that
    can pin M were kept)."""
    safe = fold.index.safe_epoch()
    shown = [
        _partition(n, fold.kept[n], safe.cluster_epoch, now)
        for n in sorted(fold.kept, key=partition_order)
    ]
    return _report(
        fold.index.view(),
        safe,
        shown,
        fold.index.summary().count,
        namespace,
        include_all=False,
        paused_at=paused_at,
        fleet=fleet,
    )


def _report(
    view: GcView,
    safe: SafeEpoch,
    partitions: list[PartitionStatus],
    count: int,
    namespace: str,
    *,
    include_all: bool,
    paused_at: float | None,
    fleet: FleetStatus | None,
) -> StatusReport:
    cluster = safe.cluster_epoch
    if fleet is not None and fleet.replicated:
        live = {r.member for r in fleet.replicas}
        partitions = [
            dataclasses.replace(
                p,
                owner_now=fleet.owner_now.get(p.partition),
                owner_gone=p.owner is not None and p.owner not in live,
            )
            for p in partitions
        ]
    valid = [p for p in partitions if p.watermark is not None]
    pinning: list[PartitionStatus] = []
    if valid:
        lowest = min(p.watermark for p in valid if p.watermark is not None)
        if safe.safe_epoch is None or lowest <= safe.safe_epoch:
            pinning = [p for p in valid if p.watermark == lowest][:PINNING_SHOWN]
    lag = None if cluster is None or safe.safe_epoch is None else cluster - safe.safe_epoch
    reason = safe.blocked_reason
    bound = _binding(view, namespace)
    shards = fleet_problem(view.sweepers)
    return StatusReport(
        version=STATUS_VERSION,
        namespace=namespace,
        revision=view.revision,
        cluster_epoch=cluster,
        safe_epoch=safe.safe_epoch,
        lag_epochs=lag,
        blocked=not safe.defined,
        blocked_reason=reason,
        blocked_partition=safe.blocked_partition,
        paused=view.paused,
        paused_reason=view.paused_reason,
        paused_at=paused_at,
        partition_count=count,
        pinning=tuple(pinning),
        partitions=tuple(partitions) if include_all else None,
        **bound,
        sweepers=tuple(_sweepers(view)),
        shard_problem=shards,
        refused=shards is not None
        or (view.binding_raw is not None and bound["binding_problem"] is not None),
        unbound=view.binding_raw is None,
        fleet=None if fleet is None else fleet.to_dict(),
        references={"partitions": safe.referencing, "keys": len(safe.references)},
    )


def is_empty(
    view: GcView, fleet: FleetStatus | None = None, *, partition_count: int | None = None
) -> bool:
    """True when nothing at all is stored under the namespace (a typo, most likely);
    `partition_count` for a view read without its records (a fold)."""
    fleet_empty = fleet is None or (not fleet.replicated and fleet.ticker_leader is None)
    records = len(view.partitions) if partition_count is None else partition_count
    return (
        view.cluster_epoch_raw is None
        and not records
        and view.binding_raw is None
        and not view.paused
        and not view.sweepers
        and fleet_empty
    )


def _binding(view: GcView, namespace: str) -> dict[str, Any]:
    if view.binding_raw is None:
        unbound = (
            f"not bound: sweepers delete nothing until `watermark namespace bind "
            f"--bucket B --root R` binds {namespace} to its storage"
        )
        return {"binding": None, "binding_problem": unbound}
    try:
        binding = Binding.decode(view.binding_raw)
    except InvalidRecord as exc:
        return {"binding": None, "binding_problem": f"unreadable binding: {exc}"}
    doc = {
        "target": binding.target.to_doc(),
        "describe": binding.target.describe(),
        "binding_id": binding.binding_id,
        "etcd_cluster_id": binding.cluster_id,
    }
    problem: str | None = None
    if view.cluster_id is not None and binding.cluster_id != view.cluster_id:
        problem = (
            f"bound in etcd cluster {binding.cluster_id}, but this is etcd cluster "
            f"{view.cluster_id}: sweepers delete nothing until it is re-bound"
        )
    return {"binding": doc, "binding_problem": problem}


def _sweepers(view: GcView) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for sweeper_id, raw in sorted(view.sweepers.items()):
        try:
            one = ShardAnnouncement.decode(raw)
        except ValueError as exc:
            found.append({"sweeper_id": sweeper_id, "error": str(exc)})
            continue
        found.append(
            {
                "sweeper_id": one.sweeper_id,
                "shard_index": one.shard_index,
                "shard_count": one.shard_count,
                "started_at": one.started_at,
                "store": None if one.store is None else dict(one.store),
                "problems": list(one.problems),
            }
        )
    return found
