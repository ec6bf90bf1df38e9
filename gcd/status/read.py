"""`gcd status`'s reads: the namespace, the fleet and the extra lines, on one etcd client.

Design notes: docs/internals/status.md, `gcd.status.read`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gcd.explainer.answer import ExplainReport
from gcd.rules.usage import Usage, day_cost
from gcd.service.reader import empty_namespace
from gcd.status.fleet import LeaseReader, read_fleet
from gcd.status.owner import gone_owners
from gcd.status.report import PinningFold, StatusReport, build_report, is_empty, report_from_fold
from gcd.status.why import pinned_longest, why
from gcd.sweep.usage import usage_prefix
from l0gc.contract.kv import KV
from l0gc.contract.namespace import pause_at
from l0gc.contract.spark_job import SparkJob, spark_job_key
from l0gc.errors import InvalidRecord
from l0gc.etcd.store import WatermarkStore

__all__ = ["read_status"]


async def read_status(
    store: WatermarkStore,
    kv: LeaseReader,
    now: float,
    *,
    include_all: bool,
    explain: Callable[[ExplainReport], str] | None,
) -> StatusReport:
    """Read the namespace (whole with `include_all`, else folded as a daemon folds it) and
    build the report, with its extra lines; `explain` (--why) renders the oldest kept
    key's answer. NamespaceNotFound when nothing of the namespace is in etcd."""
    fold = None
    if include_all:
        view = await store.read_gc_view()
        count = len(view.partitions)
    else:
        fold = PinningFold(store)
        await store.read_gc_into(fold)
        view, count = fold.index.view(), fold.index.summary().count
    marker = await store.kv.get(store.paused_key) if view.paused else None
    fleet = await read_fleet(kv, store.namespace, view.revision)
    if is_empty(view, fleet, partition_count=count):
        raise empty_namespace(store.namespace)
    paused_at = pause_at(None if marker is None else marker.value)
    if fold is None:
        report = build_report(
            view, store.namespace, now, include_all=True, paused_at=paused_at, fleet=fleet
        )
    else:
        report = report_from_fold(fold, store.namespace, now, paused_at=paused_at, fleet=fleet)
    return await _extra_lines(report, store, view, now, explain=explain)


async def _extra_lines(
    report: StatusReport,
    store: WatermarkStore,
    view: Any,
    now: float,
    *,
    explain: Callable[[ExplainReport], str] | None,
) -> StatusReport:
    """The report with its "pinned longest" line, owners gone, the cost lines and, with
    `explain`, the oldest kept key."""
    pins = [(p.partition, p.watermark, p.owner) for p in report.pinning if p.watermark is not None]
    held = await pinned_longest(store, pins, now) if not report.blocked else None
    gone = await gone_owners(store, report.pinning, now)
    found = None
    if explain is not None and not report.blocked:
        key, answer = await why(store, view.binding_raw)
        if key is not None and answer is not None:
            found = {**answer.explanations[0].to_dict(), "text": explain(answer)}
    costs = await _costs(store.kv, store.namespace, now)
    pinning = tuple(
        dataclasses.replace(p, owner_gone=True) if p.partition in gone else p
        for p in report.pinning
    )
    job = await _spark_job(store.kv, store.namespace)
    return dataclasses.replace(
        report, pinning=pinning, pinned_longest=held, why=found, costs=costs, spark_job=job
    )


async def _spark_job(kv: KV, namespace: str) -> dict[str, Any] | None:
    """The running Spark job's record (`l0gc.contract.spark_job`), None without one."""
    found = await kv.get(spark_job_key(namespace))
    if found is None:
        return None
    try:
        return dataclasses.asdict(SparkJob.decode(found.value))
    except ValueError as exc:
        return {"error": str(exc)}


async def _costs(kv: KV, namespace: str, now: float) -> dict[str, Any] | None:
    """The shards' usage records of the last day, costed (`gcd.rules.usage`)."""
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
