"""`gcd sweep`: one sweeper round, then exit.

Design notes: docs/internals/cli.md, `gcd.cli.sweep`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from gcd.cli.main import freeze_opened, load_frozen
from gcd.cli.options import (
    JOURNAL_OPTIONS,
    LAYOUT_OPTIONS,
    PRICE_OPTIONS,
    ROUND_OPTIONS,
    S3_OPTIONS,
    SWEEP_OPTIONS,
    layout_from_args,
    resolve,
)
from gcd.cli.output import ProgressLine, human_bytes, write_json
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, store_settings
from gcd.observe.report import PlanWriter, RoundCounts, RoundSummary
from gcd.rules.admission import UNREACHABLE
from gcd.rules.prices import RoundCost, prices_for, round_cost
from gcd.rules.versions import VersionMode
from gcd.storage.registry import BACKENDS
from l0gc import exitcodes
from l0gc.display import printable
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, add_etcd_arguments
from l0gc.logs import configure_logging
from l0gc.options import Option, add_config_option, add_options
from l0gc.process.signals import StopOnSignals, interrupt_on_second_ctrl_c

if TYPE_CHECKING:
    from gcd.service.runtime import SweepSettings

__all__ = [
    "COMMON_OPTIONS",
    "RUN_IMPORTS",
    "add_arguments",
    "add_round_arguments",
    "cost_line",
    "exit_code",
    "interrupted_document",
    "round_setup",
    "run",
    "runtime_modules",
    "text_summary",
]

log = structlog.get_logger("gcd.cli.sweep")

RUN_IMPORTS = ("gcd.service.runtime", "gcd.sweep.sweeper")
"""What `run` imports and `--help` does not (the sweep runtime: the sweeper, its journal,
its metrics): `gcd.cli.main` imports them at start-up once the arguments are read."""

COMMON_OPTIONS: tuple[Option, ...] = (
    *S3_OPTIONS,
    *AZURE_OPTIONS,
    *GCS_OPTIONS,
    *LAYOUT_OPTIONS,
    *ROUND_OPTIONS,
    *JOURNAL_OPTIONS,
    *PRICE_OPTIONS,
)


SWEEPER_ONLY = frozenset(
    option.flag
    for option in (*ROUND_OPTIONS, *JOURNAL_OPTIONS, *PRICE_OPTIONS)
    if option.flag not in ("--safe-epoch", "--grace", "--journal-dir", "--journal-prefix")
)
"""The round's flags that mean nothing to a command that only reads (`gcd explain`): it
accepts them (a config file or environment shared with the sweepers) without listing them."""
_READER_JOURNAL_HELP = {
    "--journal-dir": "read the deletion journal in this directory (the sweepers' "
    "--journal-dir): who deleted a key, when, and with which M",
    "--journal-prefix": "read the journal segments the sweepers shipped to this prefix of the "
    "bucket (their --journal-prefix); with --journal-dir both are read",
}


def add_round_arguments(parser: argparse.ArgumentParser, *, reader: bool = False) -> None:
    """The options every sweeping command takes: S3, layout, round, etcd, --config; a
    `reader` lists only those it uses (`SWEEPER_ONLY` are accepted, not listed)."""
    hidden = SWEEPER_ONLY if reader else frozenset()
    journal = (
        JOURNAL_OPTIONS
        if not reader
        else tuple(
            dataclasses.replace(o, help=_READER_JOURNAL_HELP.get(o.flag, o.help))
            for o in JOURNAL_OPTIONS
        )
    )
    add_config_option(parser)
    add_options(parser, S3_OPTIONS, "object store (AWS credentials: the standard chain)")
    add_options(parser, AZURE_OPTIONS, "Azure Blob Storage (--storage azure)")
    add_options(parser, GCS_OPTIONS, "Google Cloud Storage (--storage gcs --bucket NAME)")
    add_options(parser, LAYOUT_OPTIONS, "key layout")
    add_options(parser, ROUND_OPTIONS, "round", hidden=hidden)
    add_options(parser, journal, "deletion journal", hidden=hidden)
    add_options(parser, PRICE_OPTIONS, "prices (what GC costs and saves)", hidden=hidden)
    add_etcd_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd sweep` options."""
    add_round_arguments(parser)
    add_options(parser, SWEEP_OPTIONS, "dry run and output")


def round_setup(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> SweepSettings:
    """Build and check the settings from resolved options; ConfigError says what is wrong."""
    from gcd.service.runtime import JournalSettings, SweepSettings  # noqa: PLC0415 - RUN_IMPORTS
    from gcd.sweep.sweeper import RoundConfig  # noqa: PLC0415

    env = os.environ if environ is None else environ
    store = store_settings(args, max_pool_connections=args.concurrency + args.list_concurrency + 4)
    config = RoundConfig(
        layout=layout_from_args(args),
        grace_s=args.grace,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        list_concurrency=args.list_concurrency,
        max_deletes_per_second=args.max_deletes_per_second,
        max_deletes=args.max_deletes,
        shard_index=args.shard_index,
        shard_count=args.shard_count,
        dry_run=bool(getattr(args, "dry_run", False)),
        skip_ahead=not args.full_listing,
        versions=VersionMode(args.versions),
        unordered_listing=args.listing == "unordered",
        round_deadline_s=args.round_deadline,
        request_deadline_s=args.request_deadline,
        max_pages_per_prefix=args.max_pages_per_prefix,
        undo_window_s=args.undo_window,
    )
    if args.undo_window and args.journal_dir is None and not config.dry_run:
        raise ConfigError(
            f"--undo-window {args.undo_window:g}s needs --journal-dir DIR: the "
            "journal names the delete markers l0gc wrote, which `gcd restore` "
            "deletes and later rounds reclaim"
        )
    etcd_given = args.etcd is not None or bool(env.get("L0GC_ETCD"))
    # Without --safe-epoch, M comes from etcd: no endpoint at all is a usage error (exit 2),
    # not a silent wait on 127.0.0.1:2379.
    needs_etcd = etcd_given or args.safe_epoch is None
    etcd = EtcdSettings.from_args(args, env, required=True) if needs_etcd else None
    journal = JournalSettings(
        directory=args.journal_dir,
        prefix=args.journal_prefix,
        max_bytes=args.journal_max_bytes,
        max_age_s=args.journal_max_age,
        keep_local=args.journal_keep_local,
        retention_s=args.journal_retention,
    )
    prices = prices_for(
        store.kind,
        list_per_1000=args.price_list,
        delete_per_1000=args.price_delete,
        storage_gb_month=args.price_storage,
    )
    return SweepSettings(config, store, etcd, args.safe_epoch, args.shard_ttl, journal, prices)


def runtime_modules(setup: SweepSettings) -> tuple[str, ...]:
    """What opening `setup`'s runtime imports when it first uses them: its store's backend
    (with its SDK: aiobotocore and aiohttp for S3), etcd's client (gRPC) when etcd is
    used, the journal's anchor keeper with a journal. `load_frozen` imports them at
    start-up (an import left out here is only slower)."""
    store = BACKENDS.get(setup.store.kind)
    etcd = "l0gc.etcd.client" if setup.etcd is not None else None
    journal = "gcd.journal.anchor" if setup.journal.directory is not None else None
    return tuple(name for name in (store, etcd, journal) if name is not None)


def exit_code(summary: RoundSummary, *, paused_ok: bool = False) -> int:
    """0 ok, 1 some deletes failed, 3 blocked or paused (0 when paused with `paused_ok`),
    4 when etcd could not be read at all (`gcd.rules.admission.unreachable`)."""
    if paused_ok and summary.outcome == "paused":
        return exitcodes.OK
    if summary.blocked_reason is not None and summary.blocked_reason.startswith(UNREACHABLE):
        return exitcodes.ETCD_UNREACHABLE
    if summary.blocked_reason is not None:
        return exitcodes.BLOCKED
    return exitcodes.PARTIAL_FAILURE if summary.errors else exitcodes.OK


def interrupted_document(summary: RoundSummary, signal_name: str) -> dict[str, Any]:
    """The `--json` output of a round stopped by a signal: the summary of what it did,
    with "error": "interrupted" and the signal."""
    fields = summary.to_dict()
    return {
        "version": fields.pop("version"),
        "error": "interrupted",
        "signal": signal_name,
        **fields,
    }


def _counted(summary: RoundSummary) -> RoundCounts:
    """The summary's totals as progress counters (for the progress line's last refresh)."""
    fields = summary.to_dict()
    return RoundCounts(**{name: fields[name] for name in RoundCounts().summary_fields()})


def text_summary(summary: RoundSummary, *, interrupted_by: str | None = None) -> str:
    """The round summary for people (stdout without --json)."""
    fields = summary.to_dict()
    deleted = f"{summary.deleted:,} objects ({human_bytes(summary.deleted_bytes)})"
    if interrupted_by is not None:
        head = f"interrupted by {interrupted_by} after deleting {deleted}; the rest waits"
    elif summary.blocked_reason is not None:
        head = f"{summary.outcome}, nothing deleted: {printable(summary.blocked_reason)}"
    elif summary.dry_run:
        head = f"dry run: would delete {summary.eligible:,} objects, deleted nothing"
    elif summary.markers_written:  # an undo window: hidden, not gone (issue 55)
        head = (
            f"hid {summary.markers_written:,} objects behind delete markers (their bytes "
            f"are kept for the undo window: `gcd restore` brings them back); freed "
            f"{summary.deleted - summary.markers_written:,} versions and markers "
            f"({human_bytes(summary.deleted_bytes)})"
        )
    else:
        head = f"deleted {deleted}"
    if summary.safe_epoch is not None:
        m = f"{summary.safe_epoch}"
    elif summary.blocked_reason is not None:  # read or not, a blocked round uses no M
        m = f"not applied ({summary.outcome}: `gcd status` shows the M etcd holds)"
    else:
        m = "unknown"
    if summary.cluster_epoch is not None:
        m += f" (cluster epoch {summary.cluster_epoch})"
    lines = [f"gcd sweep: {head}", f"  M          {m}; took {summary.duration_s:.1f} s"]
    if summary.blocked_reason is not None and not summary.listed:
        return "\n".join(lines) + "\n"
    kept = [
        (
            f"{summary.skipped_not_eligible:,} live (epoch > M; keys skip-ahead did not list "
            "are not counted)"
        ),
        f"{summary.skipped_young:,} too young (grace period)",
        f"{summary.unparsable:,} unparsable",
    ]
    for name, what in (
        ("skipped_paused", "not sent (paused)"),
        ("unsafe_keys", "unsafe"),
        ("locked", "versions locked (Object Lock)"),
    ):
        if fields.get(name):
            kept.append(f"{fields[name]:,} {what}")
    requests = f"{summary.list_requests:,} LIST, {summary.delete_requests:,} DeleteObjects"
    listed = f"  listed     {summary.listed:,} objects; eligible {summary.eligible:,}"
    if summary.undo is not None:  # per version, and a key's plan selects (issue 55)
        listed = (
            f"  listed     {summary.listed:,} versions and delete markers; eligible "
            f"{summary.eligible:,} (each a key to hide, or a version or marker past "
            "the undo window)"
        )
        pending = summary.undo.get("pending_keys")
        if pending:
            kept.append(f"{pending:,} keys waiting for the undo window")
    lines += [
        listed,
        f"  deleted    {deleted}"
        + (
            f", of them {summary.deleted_versions:,} versions and {summary.deleted_markers:,} "
            "delete markers"
            if summary.deleted_versions or summary.deleted_markers
            else ""
        )
        + (
            f", of them {summary.markers_written:,} only hidden (a delete marker written, "
            "no byte freed)"
            if summary.markers_written
            else ""
        ),
        f"  kept       {', '.join(kept)}",
        f"  errors     {summary.errors:,}",
        f"  requests   {requests}",
    ]
    return "\n".join(lines) + "\n"


def cost_line(cost: RoundCost) -> str:
    """The summary's cost line: requests in dollars, storage reclaimed per month."""
    per = "-" if cost.lists_per_deleted is None else f"{cost.lists_per_deleted:.4f}"
    return (
        f"  cost       ${cost.requests_usd:.6f} in requests ({cost.prices.store} prices); "
        f"reclaims ${cost.reclaimed_usd_per_month:.6f}/month of storage; {per} LISTs "
        "per deleted object\n"
    )


async def run(args: argparse.Namespace) -> int:
    """One round; see the module docstring."""
    from gcd.service.runtime import SweepRuntime  # noqa: PLC0415 - RUN_IMPORTS

    resolve(args, (*COMMON_OPTIONS, *SWEEP_OPTIONS))
    configure_logging(args.log_level)
    setup = round_setup(args)
    load_frozen(*runtime_modules(setup))
    plan = PlanWriter(Path(args.plan_out)) if args.plan_out else None
    try:
        async with SweepRuntime.open(
            setup, plan=plan, preflight=True, check_namespace=True, metrics=False
        ) as runtime:
            freeze_opened()
            sweeper = runtime.sweeper
            # The sweeper forgets its live counters when the round ends; the progress
            # line's last refresh shows the round's totals instead.
            totals: list[RoundCounts] = []
            signals = StopOnSignals(
                sweeper.stop,
                again=interrupt_on_second_ctrl_c,
                on_signal=lambda n: log.info("sweep.stopping", signal=n.name),
            )
            with signals.installed():
                async with ProgressLine(lambda: sweeper.counts or (totals[0] if totals else None)):
                    result = await runtime.run_round()
                    totals.append(_counted(result.summary))
    finally:
        if plan is not None:
            plan.close()
    summary = result.summary
    if signals.first is not None:
        sys.stderr.write(
            f"gcd sweep: interrupted by {signals.first}: requests in flight finished, "
            f"{summary.deleted:,} objects deleted; the rest waits for the next run\n"
        )
    cost = round_cost(
        summary.list_requests,
        summary.delete_requests,
        summary.deleted,
        summary.deleted_bytes,
        setup.price_table,
    )
    if args.json:
        document = summary.to_dict()
        if signals.first is not None:
            document = interrupted_document(summary, signals.first)
        write_json({**document, "cost": cost.to_dict()})
    else:
        sys.stdout.write(text_summary(summary, interrupted_by=signals.first))
        if summary.list_requests or summary.delete_requests:
            sys.stdout.write(cost_line(cost))
    if signals.first is not None:
        return exitcodes.INTERRUPTED
    return exit_code(summary, paused_ok=args.paused_ok)
