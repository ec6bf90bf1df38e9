"""`gcd status`: where garbage collection stands, from one consistent etcd read.

Design notes: docs/internals/cli.md, `gcd.cli.status`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any

from gcd.cli.fleet import read_fleet
from gcd.cli.options import QUIET_LOG_LEVEL, resolve
from gcd.cli.output import write_json
from gcd.cli.status_owner import gone_owners
from gcd.cli.status_report import (
    PinningFold,
    StatusReport,
    build_report,
    is_empty,
    report_from_fold,
)
from gcd.cli.status_text import render_text
from gcd.service.reader import empty_namespace, open_reader
from l0gc import exitcodes
from l0gc.contract.kv import KV
from l0gc.contract.namespace import pause_at
from l0gc.errors import InvalidRecord
from l0gc.etcd.settings import EtcdSettings, add_etcd_arguments
from l0gc.etcd.store import WatermarkStore
from l0gc.logs import configure_logging
from l0gc.options import Option, add_config_option, add_options, boolean

if TYPE_CHECKING:  # aetcd: the reader opens it
    from l0gc.etcd.client import EtcdKV

__all__ = [
    "STATUS_OPTIONS",
    "add_arguments",
    "run",
]


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


async def _why(
    report: StatusReport, store: WatermarkStore, view: Any, now: float, *, explain: bool
) -> StatusReport:
    """The report with its "pinned longest" line, the cost lines and, with --why, the
    oldest kept key."""
    from gcd.cli.explain_text import render_text as explain_text  # noqa: PLC0415 - with --why
    from gcd.cli.status_why import pinned_longest, why  # noqa: PLC0415 - a few etcd reads

    pins = [(p.partition, p.watermark, p.owner) for p in report.pinning if p.watermark is not None]
    held = await pinned_longest(store, pins, now) if not report.blocked else None
    gone = await gone_owners(store, report.pinning, now)
    found = None
    if explain and not report.blocked:
        key, answer = await why(store, view.binding_raw)
        if key is not None and answer is not None:
            found = {**answer.explanations[0].to_dict(), "text": explain_text(answer)}
    costs = await _costs(store.kv, store.namespace, now)
    pinning = tuple(
        dataclasses.replace(p, owner_gone=True) if p.partition in gone else p
        for p in report.pinning
    )
    return dataclasses.replace(report, pinning=pinning, pinned_longest=held, why=found, costs=costs)


async def _costs(kv: KV, namespace: str, now: float) -> dict[str, Any] | None:
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
    async with open_reader(settings) as reader:
        kv, store = reader.etcd()
        now = time.time()
        report = await _report(store, kv, args, now)
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


async def _report(
    store: WatermarkStore, kv: EtcdKV, args: argparse.Namespace, now: float
) -> StatusReport:
    """Read the namespace (whole with --all, else folded as a daemon folds it) and build
    the report, with its extra lines (`_why`), on the reader's one etcd client."""
    fold = None
    if args.all:
        view = await store.read_gc_view()
        count = len(view.partitions)
    else:
        fold = PinningFold(store)
        await store.read_gc_into(fold)
        view, count = fold.index.view(), fold.index.summary().count
    marker = await kv.get(store.paused_key) if view.paused else None
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
    return await _why(report, store, view, now, explain=args.why)
