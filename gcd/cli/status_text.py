"""`gcd status` as text: `render_text` draws a `StatusReport` for a person.

Pure (no etcd): the demo's live view and the tests call it on a report they built.
Design notes: docs/internals/cli.md, `gcd.cli.status`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from gcd.cli.output import human_age, utc_text
from gcd.status.report import PINNING_SHOWN, RUNBOOK, PartitionStatus, StatusReport
from l0gc.contract.namespace import validate_partition
from l0gc.contract.spark_job import SparkJob
from l0gc.display import printable
from l0gc.errors import ConfigError

__all__ = ["render_text"]


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
    if report.spark_job is not None:
        lines.append(f"spark job      {printable(_spark_job_line(report.spark_job, now))}")
    lines.append(f"partitions     {report.partition_count} registered")
    refs = report.references
    if refs is not None and refs["partitions"]:
        lines.append(
            f"references     {refs['partitions']} of {report.partition_count} partitions send "
            f"them; {refs['keys']:,} keys held"
        )
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
        if report.partition_count > len(report.pinning) == PINNING_SHOWN:
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


_WAITS = {
    "log_end": "its log end: its reconciler must send log_end_offset once asked "
    "(docs/operations.md#log-end-unknown)",
    "reconciler": "its reconciler: committed through offset {committed_offset}, reconciled "
    "through {reconciled_offset} (docs/operations.md#m-not-advancing)",
    "fences": "{fences} fence(s) in flight: an idle partition advances with none held",
    "fencing_violation": "an operator: frozen by a fencing violation "
    "(docs/operations.md#fencing-violation)",
}


def waiting_text(waiting: Mapping[str, Any], now: float) -> str:
    """One line: what the owner waits on, since when, and where the fix is."""
    on = str(waiting.get("on"))
    try:
        what = _WAITS[on].format(**waiting)
    except (KeyError, IndexError, ValueError):
        what = on
    since = waiting.get("since")
    at = utc_text(since) if isinstance(since, int | float) else None
    if at is None or not isinstance(since, int | float):
        return f"waiting for {what}"
    return f"waiting since {at} ({max(0.0, now - since):.0f} s) for {what}"


def _spark_job_line(doc: Mapping[str, Any], now: float) -> str:
    """The running Spark job: what, which application, since when, rate and progress."""
    if "error" in doc:
        return f"UNREADABLE record: {doc['error']}"
    job = SparkJob(**doc)
    return f"{job.describe()}, running {human_age(max(0.0, now - job.started_at))}"
