"""`gcd scrub`: HEAD every referenced key, say who deleted the missing ones, find stranded
and unparsable keys and partitions that never report; once, or every DURATION with
/metrics. The run is `gcd.scrub.run.Scrubber`; what each finding means: docs/scrub.md.

Exit codes: 0 nothing missing, 1 a referenced key is missing (deleted by l0gc, or behind
its back), 2 usage, 4 etcd unreachable. `--every` runs until SIGTERM/SIGINT and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gcd.cli.options import resolve
from gcd.cli.output import human_bytes, write_json
from gcd.cli.sweep import COMMON_OPTIONS, add_round_arguments, round_setup
from gcd.scrub.findings import Cause, MissingKey
from gcd.scrub.metrics import ScrubMetrics
from gcd.scrub.report import NO_PARTITION_COMPONENT, ScrubReport
from gcd.scrub.run import Scrubber, ScrubSettings
from gcd.service.reader import open_reader
from l0gc import exitcodes
from l0gc.display import printable
from l0gc.errors import ConfigError, L0gcError
from l0gc.etcd.settings import EtcdSettings
from l0gc.logs import configure_logging
from l0gc.options import (
    Option,
    add_options,
    boolean,
    duration,
    integer,
    positive_duration,
    positive_number,
    text,
)
from l0gc.process.signals import StopOnSignals

__all__ = [
    "SCRUB_OPTIONS",
    "add_arguments",
    "exit_code",
    "metrics_server",
    "render_text",
    "run",
    "scrub_forever",
]

log = structlog.get_logger("gcd.cli.scrub")

SCRUB_OPTIONS: tuple[Option, ...] = (
    Option(
        "--every",
        positive_duration,
        None,
        "run again every DURATION until SIGTERM, serving /metrics (default: run once)",
        "DURATION",
    ),
    Option(
        "--max-requests-per-second",
        positive_number,
        50.0,
        "HEAD and LIST requests per second at most, all together (default 50)",
        "RATE",
    ),
    Option(
        "--head-deadline",
        positive_duration,
        10.0,
        "total time one HEAD may take; past it the key is unknown, re-checked, never "
        "missing (default 10s)",
        "DURATION",
    ),
    Option("--head-concurrency", integer(1, 256), 8, "HEADs in flight at most (default 8)", "N"),
    Option(
        "--stranded-after",
        positive_duration,
        3600.0,
        "a key at or below the M of this long ago (M's history), still listed, is "
        "stranded garbage (default 1h)",
        "DURATION",
    ),
    Option(
        "--silent-after",
        duration,
        3600.0,
        "a partition pinning M whose record has not moved this long never reports (default 1h)",
        "DURATION",
    ),
    Option("--examples", integer(0, 1000), 10, "example keys shown per finding (default 10)", "N"),
    Option(
        "--skip-listing",
        boolean,
        False,
        "HEAD the referenced keys only: no listing of the root, so no stranded or unparsable keys",
        switch=True,
    ),
    Option(
        "--json",
        boolean,
        False,
        "print each run as one JSON document (docs/scrub.md#json)",
        switch=True,
    ),
    Option("--metrics-host", text, "127.0.0.1", "address of /metrics with --every", "HOST"),
    Option(
        "--metrics-port",
        integer(0, 65535),
        None,
        "serve /metrics and /healthz on this port with --every (0: any free port; default: none)",
        "PORT",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd scrub` options: the store, layout, journal and etcd of `gcd sweep` (the
    sweeping ones accepted, not listed), then its own."""
    add_round_arguments(parser, reader=True)
    add_options(parser, SCRUB_OPTIONS, "scrub")


def exit_code(report: ScrubReport) -> int:
    """1 when a referenced key is missing, whoever deleted it; else 0."""
    return exitcodes.PARTIAL_FAILURE if report.missing else exitcodes.OK


def _missing_line(found: MissingKey) -> str:
    ref = found.reference
    head = (
        f"MISSING     {printable(ref.key)}  (partition {ref.partition} offset {ref.offset}, "
        f"epoch {found.epoch if found.epoch is not None else '?'})\n"
    )
    if found.cause is Cause.DELETED_BY_L0GC and found.deletion is not None:
        done = found.deletion
        return head + (
            f"            DELETED BY L0GC: {done.outcome} by {done.sender}, round "
            f"{done.round or '?'}, at {done.when}, M then {done.safe_epoch}: a bug, "
            "page someone (gcd explain KEY tells the whole story)\n"
        )
    if found.cause is Cause.ABSENT_FROM_JOURNAL:
        return head + (
            "            ABSENT FROM THE JOURNAL: deleted behind l0gc's back (a lifecycle "
            "rule, a person, another tool), or by a sweeper whose journal was not given\n"
        )
    return head + (
        "            journal not read: give --journal-dir/--journal-prefix to know who deleted it\n"
    )


def render_text(report: ScrubReport) -> str:
    """The report for people: one headline, then one block per kind of finding."""
    counts = [
        (len(report.deleted_by_l0gc), "deleted by l0gc (page someone)"),
        (len(report.missing) - len(report.deleted_by_l0gc), "missing otherwise"),
        (len(report.unknown), "unknown (re-check)"),
        (report.stranded, "stranded"),
        (report.unparsable, "unparsable"),
        (len(report.silent), "silent partitions"),
        (len(report.invalid), "unreadable records"),
    ]
    said = ", ".join(f"{n:,} {what}" for n, what in counts if n)
    headline = (
        f"gcd scrub: {'clean' if report.healthy else 'FOUND ' + said}  "
        f"({report.store}, namespace {report.namespace}, {report.duration_s:.1f} s)"
    )
    references = (
        f"  references  {report.referenced:,} keys of {report.referencing} of "
        f"{report.partitions} partitions HEADed: {report.present:,} present "
        f"({report.head_requests:,} HEAD requests)"
    )
    lines = [headline, references]
    listing = report.listing
    if listing is not None:
        lines.append(
            f"  listing     {listing.listed:,} keys ({human_bytes(listing.listed_bytes)}) in "
            f"{report.list_requests:,} LIST requests"
        )
    if report.stranded_note is not None:
        lines.append(f"  stranded    {report.stranded_note}")
    elif report.stranded_rule is not None:
        rule = report.stranded_rule
        lines.append(
            f"  stranded    keys of epoch <= {rule.threshold} written before "
            f"{rule.after_s:g}s ago (M then {rule.m_then})"
        )
    lines.append(f"  prefixes    {NO_PARTITION_COMPONENT}")
    out = "\n".join(lines) + "\n"
    for found in report.missing:
        out += _missing_line(found)
    for unknown in report.unknown:
        out += (
            f"UNKNOWN     {printable(unknown.reference.key)}  ({unknown.code}: "
            f"{printable(unknown.detail)}): not counted missing; re-checked next run\n"
        )
    if listing is not None and listing.stranded:
        out += (
            f"STRANDED    {listing.stranded:,} keys ({human_bytes(listing.stranded_bytes)}) "
            "garbage for --stranded-after and still there; lowest epochs:\n"
        )
        out += "".join(
            f"            {printable(k.key)}  epoch {k.epoch}  {human_bytes(k.size)}\n"
            for k in listing.oldest_stranded
        )
    if listing is not None and listing.unparsable:
        out += (
            f"UNPARSABLE  {listing.unparsable:,} keys ({human_bytes(listing.unparsable_bytes)}) "
            "under the root that the key layout does not parse (never deleted); e.g.:\n"
        )
        out += "".join(f"            {printable(k.key)}\n" for k in listing.unparsable_examples)
    for silent in report.silent:
        out += f"SILENT      {silent.partition}  {silent.reason}: {printable(silent.detail)}\n"
    for name, error in report.invalid:
        out += f"UNREADABLE  {name}  {printable(error)}\n"
    return out


def _settings(args: argparse.Namespace) -> ScrubSettings:
    return ScrubSettings(
        max_requests_per_second=args.max_requests_per_second,
        head_deadline_s=args.head_deadline,
        concurrency=args.head_concurrency,
        stranded_after_s=args.stranded_after,
        silent_after_s=args.silent_after,
        examples=args.examples,
        listing=not args.skip_listing,
    )


@contextlib.asynccontextmanager
async def metrics_server(registry: CollectorRegistry, host: str, port: int) -> AsyncIterator[int]:
    """/metrics and /healthz on `host`:`port` while the block runs; yields the bound port."""

    async def metrics(_request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror}); pick another "
                "--metrics-port or --metrics-host"
            ) from exc
        yield runner.addresses[0][1] if runner.addresses else port
    finally:
        await runner.cleanup()


async def scrub_forever(
    scrubber: Scrubber,
    every_s: float,
    metrics: ScrubMetrics,
    stop: asyncio.Event,
    on_report: Callable[[ScrubReport], object],
) -> None:
    """Run, report, wait `every_s` (or until `stop`), again; a run that fails on etcd or
    the store is logged and counted, and the next one tries again."""
    while not stop.is_set():
        try:
            report = await scrubber.run()
        except L0gcError as exc:
            metrics.failed_runs.inc()
            log.warning("scrub.run_failed", error=str(exc))
        else:
            metrics.observe(report)
            log.info(
                "scrub.run_finished",
                missing=len(report.missing),
                deleted_by_l0gc=len(report.deleted_by_l0gc),
                unknown=len(report.unknown),
                stranded=report.stranded,
                unparsable=report.unparsable,
                silent=len(report.silent),
                head_requests=report.head_requests,
                list_requests=report.list_requests,
            )
            on_report(report)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


async def run(args: argparse.Namespace) -> int:
    """Scrub once (or every --every); see the module docstring."""
    resolve(args, (*COMMON_OPTIONS, *SCRUB_OPTIONS))
    configure_logging(args.log_level or ("info" if args.every else "warning"))
    setup = round_setup(args)
    etcd = setup.etcd or EtcdSettings.from_args(args, required=True)
    layout = setup.round.layout
    settings = _settings(args)

    def show(report: ScrubReport) -> None:
        if args.json:
            write_json(report.to_dict())
        else:
            sys.stdout.write(render_text(report))
            sys.stdout.flush()

    async with open_reader(etcd, setup.store, layout.root, check_namespace=True) as reader:
        _, watermarks = reader.etcd()
        objects = reader.bucket()
        scrubber = Scrubber(
            watermarks,
            objects,
            layout,
            store_name=setup.store.target(layout.root).describe(),
            journal=setup.journal.segments(objects, layout.root),
            settings=settings,
        )
        if args.every is None:
            report = await scrubber.run()
            show(report)
            return exit_code(report)
        metrics = ScrubMetrics()
        stop = asyncio.Event()
        signals = StopOnSignals(stop, on_signal=lambda n: log.info("scrub.stopping", signal=n.name))
        async with contextlib.AsyncExitStack() as stack:
            if args.metrics_port is not None:
                port = await stack.enter_async_context(
                    metrics_server(metrics.registry, args.metrics_host, args.metrics_port)
                )
                log.info("scrub.metrics_listening", host=args.metrics_host, port=port)
            with signals.installed():
                await scrub_forever(scrubber, args.every, metrics, stop, show)
    return exitcodes.OK
