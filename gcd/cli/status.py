"""`gcd status`: where garbage collection stands, from one consistent etcd read.

    gcd status [--all] [--json] [--etcd HOST:PORT --namespace /l0gc/prod ...]

Shows the cluster epoch, the global safe epoch M and the lag between them, whether GC
is paused (and why, since when) or blocked (why, and which partition), and the
partitions that pin M: those with the lowest M(p), with owner and the age of their
last update. `--all` lists every partition. Everything comes from ONE range read of
the namespace (one etcd revision), the same read the sweepers make. Without `--all` the
read is folded page by page as a daemon folds it (`PinningFold`: the sweepers' compact
index plus the few records at the lowest M(p)), so a namespace of a million partition
records is never held whole (bench/RESULTS.md, section 27).

Exit codes: 0 normally (also while paused), 3 when sweepers delete nothing: M is
undefined (blocked), or they refuse (the binding is unreadable or names another etcd
cluster, or the running sweepers disagree on shards), 4 when etcd cannot be read, 2 for bad flags
and for a namespace under which nothing at all is stored ("is --namespace right?": a
typo must not be answered with advice to create state there). A namespace that is not
bound yet is a setup step, not a fault: "gc waiting", exit 0.

The publisher fleet (`gcd.cli.fleet`): the live `watermark serve --replicated` replicas
(address, lease remaining, partitions held, claims in handover), the ticker leader, and
each partition's owner as it is now; a record's owner that is no longer a live replica
is shown as gone.

A "pinned longest" line names the pinning partition at its M(p) the longest, since when,
and its owner; `--why` explains the oldest kept key (`gcd.cli.status_why`).

`build_report` and `render_text` are pure, so the demo's live view and tests use them
without etcd.

Whatever etcd holds, status reports it and exits: a malformed record (too deep, NaN,
duplicate keys...) is shown as MALFORMED with the reason, an unreadable pause marker
still shows GC paused, and a pause time that is not a sane date shows as unknown.
It also shows the namespace's binding (`watermark namespace bind`; the claim in the
bucket is checked by the sweepers and `watermark namespace show`) and the running
sweepers' shards, with any disagreement. Strings from etcd are printed with
non-printables escaped (`printable`); `--json` is always valid JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from gcd.cli.fleet import FleetStatus, read_fleet
from gcd.cli.options import QUIET_LOG_LEVEL, resolve
from gcd.cli.output import human_age, utc_text, write_json
from gcd.cli.status_owner import gone_owners, waiting_text
from gcd.sweep.runtime import empty_namespace
from gcd.sweep.shards import ShardAnnouncement, fleet_problem
from watermark import exitcodes
from watermark.core.binding import Binding
from watermark.core.contract import partition_order, pause_at, validate_partition
from watermark.core.display import printable
from watermark.core.record import PartitionRecord
from watermark.core.safe_epoch import GcView, SafeEpoch, compute_safe_epoch
from watermark.errors import ConfigError, InvalidRecord
from watermark.etcd.follow import empty_index
from watermark.etcd.settings import EtcdSettings, add_etcd_arguments, open_kv
from watermark.etcd.store import WatermarkStore
from watermark.logs import configure_logging
from watermark.options import Option, add_config_option, add_options, boolean

__all__ = [
    "STATUS_OPTIONS",
    "STATUS_VERSION",
    "PartitionStatus",
    "PinningFold",
    "StatusReport",
    "add_arguments",
    "build_report",
    "is_empty",
    "render_text",
    "report_from_fold",
    "run",
]

STATUS_VERSION: Final = 1
_PINNING_SHOWN: Final = 10
RUNBOOK: Final = "docs/operations.md"

STATUS_OPTIONS: tuple[Option, ...] = (
    Option("--all", boolean, False, "list every partition, not only those pinning M", switch=True),
    Option(
        "--json", boolean, False, "print the status as one JSON document on stdout", switch=True
    ),
    Option(
        "--why",
        boolean,
        False,
        "also explain the oldest kept key (`gcd explain` on the "
        "lowest epoch above M, looked for under the bound S3 root)",
        switch=True,
    ),
    QUIET_LOG_LEVEL,
)


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
    """What its owner waits on, as its record says (`watermark.core.record`)."""


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
    """The publisher fleet (`gcd.cli.fleet.FleetStatus.to_dict`), None when not read."""
    pinned_longest: dict[str, Any] | None = None
    """The pinning partition at its M(p) the longest (`gcd.cli.status_why`), None: unknown."""
    why: dict[str, Any] | None = None
    """With --why: `gcd explain` of the oldest kept key (its JSON object), else None."""
    costs: dict[str, Any] | None = None
    """The sweepers' last 24 h: requests, dollars, bytes reclaimed (`gcd.rules.usage`)."""

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
    """A `watermark.core.kv.RangeFold` for `gcd status` without `--all`: the sweepers'
    compact index (`watermark.core.gcindex.GcIndex`, one int per record: M(p) and a
    digest) plus the raw records of the partitions at the lowest M(p) read so far, at
    most `_PINNING_SHOWN` of them in `partition_order` (pages come in etcd's key order,
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
            if len(self.kept) > 2 * _PINNING_SHOWN:
                first = sorted(self.kept, key=partition_order)[:_PINNING_SHOWN]
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
            pinning = [p for p in valid if p.watermark == lowest][:_PINNING_SHOWN]
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


def _undo_line(store: Mapping[str, Any]) -> str:
    """A sweeper's undo window and what its last round left pending reclaim."""
    oldest = store.get("undo_oldest_pending")
    return (
        f"{printable(str(store['undo_window']))} ({printable(str(store.get('undo_rule')))}),"
        f" pending {printable(str(store.get('undo_pending')))}"
        + ("" if oldest is None else f", oldest {printable(str(oldest))}")
    )


def _store_line(store: Mapping[str, Any]) -> str:
    """What a sweeper detected about its bucket, in one line."""
    lock, batch = store.get("object_lock"), store.get("batch_delete")
    lock_text = "unknown" if lock is None else ("on" if lock else "off")
    batch_text = "not tried yet" if batch is None else ("yes" if batch else "NO (single deletes)")
    return (
        f"versioning {printable(str(store.get('versioning')))}, object lock {lock_text}, "
        f"listing {printable(str(store.get('listing')))}, batch delete {batch_text}"
    )


def _owner(p: PartitionStatus) -> str:
    recorded = "-" if p.owner is None else f"{printable(p.owner)} #{p.owner_epoch}"
    if p.owner_now is not None and p.owner_now != p.owner:
        return f"{printable(p.owner_now)} (record: {recorded})"
    if p.owner_now is None and p.owner_gone:
        return f"none now (record: {recorded}, gone)"
    return recorded


def _left(seconds: int | None) -> str:
    return "unknown" if seconds is None else f"{seconds}s left"


def _fleet_lines(fleet: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    leader = fleet["ticker_leader"]
    if leader is not None:
        lines.append(
            f"ticker         leader {printable(leader)}  "
            f"(lease {_left(fleet['ticker_lease_remaining_s'])})"
        )
    elif fleet["replicas"]:
        lines.append("ticker         NO LEADER: the cluster epoch does not advance")
    replicas = fleet["replicas"]
    if replicas or fleet["problems"]:
        lines.append(f"replicas       {len(replicas)} live")
    for r in replicas:
        moving = r["handing_over"]
        handover = "-" if not moving else f"{len(moving)}: {', '.join(map(printable, moving[:5]))}"
        if len(moving) > 5:
            handover += ", ..."
        lines.append(
            f"  {printable(r['member']):<13}{printable(r['address'])}  lease "
            f"{_left(r['lease_remaining_s'])}  holds {r['holds']} of "
            f"{printable(r['partitions'])}  handing over {handover}"
        )
    if fleet["unclaimed"]:
        names = ", ".join(map(printable, fleet["unclaimed"][:5]))
        more = ", ..." if len(fleet["unclaimed"]) > 5 else ""
        lines.append(
            f"unclaimed      {len(fleet['unclaimed'])} without a live owner now: {names}{more}"
        )
    lines.extend(f"replica record UNREADABLE: {printable(p)}" for p in fleet["problems"][:5])
    return lines


def _cost_lines(costs: dict[str, Any]) -> list[str]:
    asked = costs["requests"]
    per = costs["lists_per_deleted"]
    per_text = "-" if per is None else f"{per:.4f}"
    gib = costs["deleted_bytes"] / 1024**3
    requests = (
        f"requests/day   {asked['list']:,} LIST, {asked['delete']:,} DeleteObjects = "
        f"${costs['requests_usd']:.6f}/day ({printable(costs['prices']['store'])} "
        f"prices); {per_text} LISTs per deleted object"
    )
    reclaimed = (
        f"reclaimed/day  {costs['deleted']:,} objects, {gib:.6f} GiB = "
        f"${costs['reclaimed_usd_per_month']:.6f}/month of storage"
    )
    return [requests, reclaimed]


def _window(p: PartitionStatus) -> str:
    if p.window is None or p.window == (None, None):
        return "[]"
    return f"[{p.window[0]}, {p.window[1]}]"


def _deregister_args(name: str) -> str:
    """How `watermark partition deregister` names this record: as itself when it is a
    valid partition name, else by its bytes in hex (control characters, non-UTF-8)."""
    try:
        return shlex.quote(validate_partition(name))
    except ConfigError:
        return "--name-hex " + name.encode("utf-8", "surrogateescape").hex()


def render_text(report: StatusReport, now: float) -> str:
    """The report for people."""
    lines = [f"namespace      {report.namespace}  (etcd revision {report.revision})"]
    lines.append(f"cluster epoch  {'-' if report.cluster_epoch is None else report.cluster_epoch}")
    if report.blocked:
        lines.append("global M       UNDEFINED: sweepers delete nothing (fail closed)")
        lines.append(f"blocked        {printable(report.blocked_reason or '')}")
        if report.blocked_partition is not None:
            lines.append(
                f"               fix: partition gone -> watermark partition deregister "
                f"{_deregister_args(report.blocked_partition)}"
            )
            lines.append(
                f"                    partition live -> repair its record, see {RUNBOOK}#gc-blocked"
            )
    else:
        unit = "epoch" if report.lag_epochs == 1 else "epochs"
        lines.append(f"global M       {report.safe_epoch}  (lag {report.lag_epochs} {unit})")
    if report.paused:
        since = " since an unknown time"
        if report.paused_at is not None:
            age = human_age(max(0.0, now - report.paused_at))
            since = f" since {utc_text(report.paused_at)} ({age})"
        lines.append(f"gc             PAUSED{since}: {printable(report.paused_reason or '')}")
        lines.append("               resume with: gcd resume")
    elif report.blocked:
        lines.append("gc             blocked")
    elif report.refused:
        lines.append(
            "gc             REFUSED: sweepers delete nothing until the binding or "
            "shard problem below is fixed"
        )
    elif report.unbound:
        lines.append("gc             waiting: sweepers delete nothing until the namespace is bound")
    else:
        lines.append("gc             running")
    if report.binding is not None:
        lines.append(
            f"bound to       {printable(report.binding['describe'])}  (claim checked by "
            "sweepers and `watermark namespace show`)"
        )
    if report.binding_problem is not None:
        lines.append(f"binding        {printable(report.binding_problem)}")
    if report.sweepers:
        shards = ", ".join(
            f"{printable(w['sweeper_id'])} "
            + ("?" if "error" in w else f"{w['shard_index']}/{w['shard_count']}")
            for w in report.sweepers
        )
        lines.append(f"sweepers       {len(report.sweepers)} running: {shards}")
        seen = {_store_line(w["store"]) for w in report.sweepers if w.get("store")}
        lines.extend(f"store          {line}" for line in sorted(seen))
        windowed = [w for w in report.sweepers if (w.get("store") or {}).get("undo_window")]
        lines.extend(
            f"undo window    {printable(w['sweeper_id'])}: {_undo_line(w['store'])}"
            for w in windowed
        )
        lines.extend(
            f"last round     {printable(w['sweeper_id'])}: {printable(problem)}"
            for w in report.sweepers
            for problem in w.get("problems", ())
        )
    if report.shard_problem is not None:
        lines.append(f"shards         DISAGREE: {printable(report.shard_problem)}")
    if report.fleet is not None:
        lines.extend(_fleet_lines(report.fleet))
    lines.append(f"partitions     {report.partition_count} registered")
    if report.pinning:
        label = "pinning M" if not report.blocked else "lowest M(p)"
        for index, p in enumerate(report.pinning):
            head = f"{label:<15}" if index == 0 else " " * 15
            lines.append(
                f"{head}{printable(p.partition)}  M(p) {p.watermark}  owner {_owner(p)}  "
                f"window {_window(p)}  updated {human_age(p.age_s)}"
            )
            if p.waiting is not None and not p.owner_gone:
                lines.append(" " * 17 + printable(waiting_text(p.waiting, now)))
        if report.partition_count > len(report.pinning) == _PINNING_SHOWN:
            lines.append(" " * 15 + "(first 10 shown; --all lists every partition)")
    elif not report.blocked:
        lines.append("pinning M      none: every partition is ahead, M = cluster epoch - 1")
    if report.pinned_longest is not None:
        held = report.pinned_longest
        at = utc_text(held["since"]) or "an unreadable time"
        owner = "-" if held["owner"] is None else printable(held["owner"])
        lines.append(
            f"pinned longest {printable(held['partition'])}  M(p) {held['watermark']} "
            f"since {at} ({human_age(held['for_s'])})  owner {owner}"
        )
    if report.costs is not None:
        lines.extend(_cost_lines(report.costs))
    if report.partitions is not None:
        lines.append("")
        lines.append(
            f"{'PARTITION':<24} {'M(p)':>8} {'LAG':>5}  {'WINDOW':<20} {'OWNER':<28} UPDATED"
        )
        for p in report.partitions:
            name = printable(p.partition)
            if p.error is not None:
                lines.append(f"{name:<24} {'-':>8} {'-':>5}  MALFORMED: {printable(p.error)}")
                continue
            lag = "-" if p.lag_epochs is None else str(p.lag_epochs)
            lines.append(
                f"{name:<24} {p.watermark:>8} {lag:>5}  {_window(p):<20} "
                f"{_owner(p):<28} {human_age(p.age_s)}"
            )
    return "\n".join(lines) + "\n"


async def _why(
    report: StatusReport, settings: EtcdSettings, view: Any, now: float, *, explain: bool
) -> StatusReport:
    """The report with its "pinned longest" line, the cost lines and, with --why, the
    oldest kept key."""
    from gcd.cli.explain_text import render_text as explain_text  # noqa: PLC0415 - with --why
    from gcd.cli.status_why import pinned_longest, why  # noqa: PLC0415 - a few etcd reads

    kv = await open_kv(settings)
    try:
        store = WatermarkStore(kv, settings.namespace)
        pins = [
            (p.partition, p.watermark, p.owner) for p in report.pinning if p.watermark is not None
        ]
        held = await pinned_longest(store, pins, now) if not report.blocked else None
        gone = await gone_owners(store, report.pinning, now)
        found = None
        if explain and not report.blocked:
            key, answer = await why(store, view.binding_raw)
            if key is not None and answer is not None:
                found = {**answer.explanations[0].to_dict(), "text": explain_text(answer)}
        costs = await _costs(kv, settings.namespace, now)
    finally:
        await kv.close()
    pinning = tuple(
        dataclasses.replace(p, owner_gone=True) if p.partition in gone else p
        for p in report.pinning
    )
    return dataclasses.replace(report, pinning=pinning, pinned_longest=held, why=found, costs=costs)


async def _costs(kv: Any, namespace: str, now: float) -> dict[str, Any] | None:
    """The shards' usage records of the last day, costed (`gcd.rules.usage`)."""
    from gcd.rules.usage import Usage, day_cost  # noqa: PLC0415
    from gcd.sweep.usage import usage_prefix  # noqa: PLC0415

    records = {}
    for item in (await kv.range_prefix(usage_prefix(namespace))).items:
        try:
            records[item.key] = Usage.decode(item.value, item.key)
        except InvalidRecord:
            continue  # a damaged record only costs its shard's line
    cost = day_cost(records, now)
    if cost is None:
        return None
    return {**cost.to_dict(), "deleted": cost.deleted, "deleted_bytes": cost.deleted_bytes}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd status` options."""
    add_config_option(parser)
    add_options(parser, STATUS_OPTIONS, "output")
    add_etcd_arguments(parser)


async def run(args: argparse.Namespace) -> int:
    """Read etcd once, report; 3 when blocked."""
    resolve(args, STATUS_OPTIONS)
    configure_logging(args.log_level)
    settings = EtcdSettings.from_args(args)
    kv = await open_kv(settings)
    try:
        store = WatermarkStore(kv, settings.namespace)
        fold = None
        if args.all:
            view = await store.read_gc_view()
            count = len(view.partitions)
        else:
            fold = PinningFold(store)
            await store.read_gc_into(fold)
            view, count = fold.index.view(), fold.index.summary().count
        marker = await kv.get(store.paused_key) if view.paused else None
        fleet = await read_fleet(kv, settings.namespace, view.revision)
    finally:
        await kv.close()
    if is_empty(view, fleet, partition_count=count):
        raise empty_namespace(settings.namespace)
    now = time.time()
    paused_at = pause_at(None if marker is None else marker.value)
    if fold is None:
        report = build_report(
            view, settings.namespace, now, include_all=True, paused_at=paused_at, fleet=fleet
        )
    else:
        report = report_from_fold(fold, settings.namespace, now, paused_at=paused_at, fleet=fleet)
    report = await _why(report, settings, view, now, explain=args.why)
    if args.json:
        document = report.to_dict()
        if document["why"] is not None:
            document["why"].pop("text", None)
        write_json(document)
    else:
        sys.stdout.write(render_text(report, now))
        if report.why is not None:
            sys.stdout.write("\nwhy            the oldest kept key:\n" + report.why["text"])
        elif args.why:
            sys.stdout.write("\nwhy            no key above M is kept\n")
    return exitcodes.BLOCKED if report.blocked or report.refused else exitcodes.OK
