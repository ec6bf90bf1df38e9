"""`gcd spark-sweep` and `gcd spark-report`: the PySpark pipeline (see docs/spark.md).

Design notes: docs/internals/cli.md, `gcd.cli.spark`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog

from gcd.cli.options import (
    LAYOUT_OPTIONS,
    ROUND_OPTIONS,
    S3_OPTIONS,
    layout_from_args,
    resolve,
)
from gcd.cli.output import human_bytes, write_json
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, store_settings
from gcd.journal.anchor import anchoring
from gcd.journal.records import check_audit_prefix
from gcd.observe.events import DeleteBasis
from gcd.observe.report import RoundSummary
from gcd.rules.admission import RoundAdmission, SafetyGate
from gcd.rules.references import MAX_CONFLICTS_SHOWN, Conflict, conflicts, pause_reason
from gcd.rules.versions import VersionMode
from gcd.service.reader import Reader, open_reader
from gcd.spark.announce import JobRunning, announced_job
from gcd.spark.brake import DriverBrake
from gcd.spark.budget import read_budget
from gcd.spark.pausing import following
from gcd.spark.pipeline import (
    JobConfig,
    decisions_uri_problem,
    job_progress,
    run_job,
    write_json_file,
)
from gcd.spark.report import DEFAULT_PRICE_PER_GB_MONTH
from gcd.spark.session import PYSPARK_MISSING, parse_conf, parse_py_files, require_pyspark
from gcd.spark.versioning import plan_versions
from gcd.spark.window import plan_window
from gcd.storage.objectstore import StoreFeatures
from gcd.storage.registry import backend, preflight_store
from gcd.sweep.brake import PauseSource
from gcd.sweep.safety import read_admission
from gcd.sweep.shards import new_sweeper_id
from l0gc import exitcodes
from l0gc.contract.spark_job import SparkJob
from l0gc.display import printable
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, add_etcd_arguments
from l0gc.logs import configure_logging
from l0gc.options import (
    CommandParser,
    Option,
    add_config_option,
    add_options,
    boolean,
    integer,
    positive_number,
    text,
)

__all__ = ["CONF_OPTION", "REPORT_OPTIONS", "SPARK_OPTIONS", "add_arguments", "run", "summary_line"]

log = structlog.get_logger("gcd.spark")

_SHARED = tuple(
    o
    for o in ROUND_OPTIONS
    if o.flag
    in {"--safe-epoch", "--grace", "--batch-size", "--versions", "--log-level", "--undo-window"}
)
SPARK_OPTIONS: tuple[Option, ...] = (
    Option(
        "--inventory",
        text,
        None,
        "S3 Inventory manifest.json to read the objects from "
        "(CSV, ORC or Parquet report; all versions on a versioned bucket; with --storage "
        "azure an Azure Blob Inventory RULE-manifest.json, CSV or Parquet; or use --list)",
        "PATH",
    ),
    Option(
        "--inventory-root",
        text,
        None,
        "where the inventory's destination bucket is "
        "copied (local dir or hdfs:// ...); default: found next to the manifest",
        "DIR",
    ),
    Option(
        "--list",
        boolean,
        False,
        "list the bucket with ListObjectsV2 on the executors "
        "(ListObjectVersions on a versioned bucket with --versions reclaim; List Blobs "
        "with --storage azure) instead of reading an inventory",
        switch=True,
    ),
    Option(
        "--list-tasks",
        integer(1),
        100,
        "listing tasks the 000-999 prefixes are split into (default 100)",
        "N",
    ),
    Option(
        "--output",
        text,
        None,
        "directory for summary.json and decisions/ (sweep) or the report files (required)",
        "DIR",
    ),
    Option(
        "--decisions-uri",
        text,
        None,
        "where executors write decisions/ (default "
        "DIR/decisions; with a master that is not local a plain path is refused: give "
        "a location every node shares, e.g. hdfs://..., s3a://..., file:///shared/...)",
        "URI",
    ),
    Option("--dry-run", boolean, False, "delete nothing; decisions say would_delete", switch=True),
    Option(
        "--master",
        text,
        None,
        "Spark master (default: spark-submit's --master when run by spark-submit, else local[*])",
        "URL",
    ),
    Option(
        "--py-files",
        parse_py_files,
        None,
        "comma-separated .zip/.py files shipped to "
        "the executors and put on their path, e.g. the zip of `gcd spark-package` "
        "(default: none)",
        "FILES",
    ),
    Option(
        "--max-deletes-per-second",
        positive_number,
        None,
        "deleted keys per second for the WHOLE JOB, split equally between the delete "
        "tasks (token buckets; default unlimited)",
        "RATE",
    ),
    Option(
        "--delete-concurrency",
        integer(1),
        8,
        "DeleteObjects requests in flight for the whole job, split between the delete "
        "tasks, at least one each (default 8)",
        "N",
    ),
    Option(
        "--delete-tasks",
        integer(1),
        None,
        "partitions of the delete stage, each with its share of the limits (default: "
        "the task slots Spark granted when the sweep starts)",
        "N",
    ),
    Option(
        "--price-per-gb-month",
        positive_number,
        DEFAULT_PRICE_PER_GB_MONTH,
        "storage price in USD per GB-month for the garbage cost estimate "
        f"(default {DEFAULT_PRICE_PER_GB_MONTH}, S3 Standard)",
        "USD",
    ),
    Option(
        "--journal-prefix",
        text,
        None,
        "journal every delete batch under this prefix of the bucket before it is sent "
        "(outside --root; the executors' role needs PutObject there; `gcd journal verify`, "
        "`gcd explain` and `gcd restore` read it; default: no journal)",
        "PREFIX",
    ),
    Option("--json", boolean, False, "print the summary as JSON on stdout", switch=True),
)
CONF_OPTION = Option(
    "--conf",
    parse_conf,
    None,
    "a setting of the Spark session this command makes, "
    "repeatable, as spark-submit's --conf: spark.pyspark.python names the executors' "
    "Python (env: one KEY=VALUE per line; config file: a [conf] table; default: none)",
    "KEY=VALUE",
)
_DELETE_ONLY = {
    "--dry-run",
    "--batch-size",
    "--decisions-uri",
    "--max-deletes-per-second",
    "--delete-concurrency",
    "--delete-tasks",
    "--journal-prefix",
}
_REPORT_SHARED = tuple(o for o in _SHARED if o.flag not in _DELETE_ONLY)
REPORT_OPTIONS: tuple[Option, ...] = tuple(o for o in SPARK_OPTIONS if o.flag not in _DELETE_ONLY)
"""spark-report's own options: SPARK_OPTIONS without the ones that only matter to deletes."""


def _tables(command: str) -> tuple[tuple[Option, ...], tuple[Option, ...]]:
    """(round options, spark options) of `command`."""
    if command == "spark-report":
        return _REPORT_SHARED, REPORT_OPTIONS
    return _SHARED, SPARK_OPTIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of spark-sweep / spark-report (shared flags, etcd, Spark); the parser's
    prog ("gcd spark-report") says which, and spark-report gets no delete options."""
    shared, spark = _tables(parser.prog.rsplit(" ", 1)[-1])
    add_config_option(parser)
    add_options(parser, S3_OPTIONS, "bucket")
    add_options(parser, AZURE_OPTIONS, "storage")
    add_options(parser, GCS_OPTIONS, "storage")
    add_options(parser, LAYOUT_OPTIONS, "key layout")
    add_options(parser, shared, "round")
    add_options(parser, spark, "spark")
    if isinstance(parser, CommandParser):  # repeatable, so added by hand; resolved as any
        parser.options.append(CONF_OPTION)
    parser.add_argument_group("spark session").add_argument(
        CONF_OPTION.flag,
        action="append",
        metavar=CONF_OPTION.metavar,
        default=None,
        help=CONF_OPTION.help_text,
    )
    add_etcd_arguments(parser)


def parse_run(args: argparse.Namespace) -> JobConfig:
    """Resolve flags > env > config > defaults and validate them (ConfigError)."""
    command = str(getattr(args, "command", "spark-sweep"))
    shared, spark = _tables(command)
    resolve(
        args,
        (*S3_OPTIONS, *AZURE_OPTIONS, *GCS_OPTIONS, *LAYOUT_OPTIONS, *shared, *spark, CONF_OPTION),
    )
    # --store URL, --storage azure|gcs (the container or bucket: `gcd.storage.azure.executor`,
    # `gcd.storage.gcs.spark`) or S3's flags; ConfigError for a store's flag without its kind
    store = store_settings(args, no_bucket="--bucket is required (env L0GC_BUCKET)")
    for option in (*_SHARED, *SPARK_OPTIONS):  # a report's delete settings: the defaults
        if not hasattr(args, option.dest):
            setattr(args, option.dest, option.default)
    if args.output is None:
        raise ConfigError("--output DIR is required (env L0GC_OUTPUT)")
    if (args.inventory is None) == (not args.list):
        raise ConfigError("give exactly one source: --inventory manifest.json or --list")
    if args.batch_size > 1000:
        raise ConfigError(f"--batch-size {args.batch_size} must be 1-1000")
    output = Path(args.output)
    layout = layout_from_args(args)
    prefix = args.journal_prefix
    journal_prefix = None if prefix is None else check_audit_prefix(prefix, layout.root)
    window = float(args.undo_window or 0.0)  # the flag, L0GC_UNDO_WINDOW or the config file
    if window and journal_prefix is None and command == "spark-sweep":
        raise ConfigError(
            f"--undo-window {window:g}s needs --journal-prefix PREFIX: the journal names "
            "the delete markers l0gc wrote and is what `gcd restore` reads; give one "
            "outside --root, e.g. --journal-prefix l0gc-audit/journal"
        )
    decisions_uri = args.decisions_uri or str(output.resolve() / "decisions")
    problem = None if args.master is None else decisions_uri_problem(args.master, decisions_uri)
    if command == "spark-sweep" and problem is not None:
        raise ConfigError(problem)
    return JobConfig(
        command=command,
        storage=store,
        layout=layout,
        inventory=args.inventory,
        inventory_root=args.inventory_root,
        list_tasks=args.list_tasks,
        output=output,
        decisions_uri=decisions_uri,
        dry_run=bool(args.dry_run),
        master=args.master,
        grace_s=args.grace,
        batch_size=args.batch_size,
        max_deletes_per_second=args.max_deletes_per_second,
        delete_concurrency=args.delete_concurrency,
        price_per_gb_month=args.price_per_gb_month,
        safe_epoch=args.safe_epoch,
        json=bool(args.json),
        conf=args.conf or {},
        py_files=args.py_files or (),
        delete_tasks=args.delete_tasks,
        version_mode=args.versions,
        journal_prefix=journal_prefix,
        undo_window_s=window,
    )


@contextlib.asynccontextmanager
async def admitted(
    args: argparse.Namespace, override: int | None
) -> AsyncIterator[tuple[RoundAdmission, Reader | None]]:
    """M from ONE etcd read through the sweeper's safety rails, as `gcd sweep` does, and
    the reader whose etcd client the job goes on using (the pause key it follows, the
    job's announcement), open while the block runs (None: no etcd).

    etcd is read when configured (flag, env or config file) or when there is no
    `--safe-epoch`; an unreachable etcd blocks (the rails say why). With etcd the binding
    is checked, which reads the root's claims from the store (a GET and a LIST: read
    access on the driver); with `--safe-epoch` alone no store client is made at all.
    """
    etcd_given = args.etcd is not None or bool(os.environ.get("L0GC_ETCD"))
    etcd = EtcdSettings.from_args(args) if etcd_given or override is None else None
    if etcd is None:  # M given, no binding to check: the store is not even opened
        yield await read_admission(SafetyGate(), None, override=override), None
        return
    async with open_reader(etcd, store_settings(args), args.root) as reader:
        yield await read_admission(SafetyGate(), reader.source, override=override), reader


def summary_line(config: JobConfig, document: dict[str, Any]) -> str:
    """The one line for people (stdout without --json); sizes in binary units."""
    stopped = document.get("stopped")
    if stopped:
        reason = printable(str(stopped["reason"]))  # from etcd
        line = (
            f"{config.command}: stopped mid-job: {reason}; deleted={document['deleted']:,} "
            f"({human_bytes(document['deleted_bytes'])}), not sent={stopped['skipped_paused']:,}; "
            f"{stopped['resume']} -> {config.output}"
        )
    elif document.get("blocked_reason"):
        reason = printable(str(document["blocked_reason"]))  # names, owners: from etcd
        line = f"{config.command}: blocked, nothing deleted: {reason}"
    elif "job_error" in document or ("objects" not in document and not config.sweep):
        line = f"{config.command}: the Spark job failed; see the error below"
    elif config.sweep:
        verb = "would delete" if config.dry_run else "deleted"
        count = document["would_delete"] if config.dry_run else document["deleted"]
        size = document["would_delete_bytes"] if config.dry_run else document["deleted_bytes"]
        line = (
            f"{config.command}: M={document['safe_epoch']} listed={document['listed']:,} "
            f"eligible={document['eligible']:,} {verb}={count:,} ({human_bytes(size)}) "
            f"errors={document['errors']:,} unparsable={document['unparsable']:,} "
            + (
                f"versions={document['deleted_versions']:,} "
                f"markers={document['deleted_markers']:,} locked={document['locked']:,} "
                if config.versions
                else ""
            )
            + f"-> {config.output}"
        )
    else:
        line = (
            f"{config.command}: M={document['safe_epoch']} objects={document['objects']:,} "
            f"({human_bytes(document['bytes'])}) garbage={document['garbage_objects']:,} "
            f"({human_bytes(document['garbage_bytes'])}: deletable now "
            f"{human_bytes(document['eligible_bytes'])}, too young "
            f"{human_bytes(document['in_grace_bytes'])}) costing "
            f"{document['garbage_monthly_cost_usd']:,.2f} USD/month -> {config.output}"
        )
    nested = document.get("nested_roots") or ()
    if nested:  # another namespace's roots inside this one: kept, and worth a look
        line += "; kept under other namespaces' roots: " + ", ".join(
            printable(str(root)) for root in nested
        )
    return line


def with_version_plan(config: JobConfig, features: StoreFeatures | None) -> JobConfig:
    """`config` with what the job does about versions (`gcd.spark.versioning`)."""
    has_versions = config.inventory is not None and backend(config.storage.kind).inventory_versions(
        config.storage, config.inventory
    )
    plan = plan_versions(
        mode=VersionMode(config.version_mode),
        features=features,
        source=config.source,
        inventory_has_versions=has_versions,
        deleting=config.sweep and not config.dry_run,
        bucket=config.bucket,
        inventory=config.inventory,
    )
    return dataclasses.replace(
        config, versions=plan.versions, object_lock=plan.object_lock, store=plan.store
    )


def _announce(config: JobConfig, document: dict[str, Any]) -> None:
    if config.json:
        write_json(document)
        return
    sys.stdout.write(summary_line(config, document) + "\n")


async def run(args: argparse.Namespace) -> int:
    """Run spark-sweep or spark-report; an exit code from `l0gc.exitcodes`."""
    try:
        require_pyspark()
    except ConfigError:
        sys.stderr.write(f"gcd {getattr(args, 'command', 'spark')}: error: {PYSPARK_MISSING}\n")
        return exitcodes.USAGE
    config = parse_run(args)
    configure_logging(args.log_level)
    started = time.monotonic()
    features = None  # Azure, GCS: live objects only, no versioning read
    if config.source == "list" or (config.sweep and not config.dry_run):
        features = await preflight_store(store_settings(args), config.layout.listing_root)
    config = with_version_plan(config, features)
    async with admitted(args, config.safe_epoch) as (admission, reader):
        epoch = admission.cluster_epoch
        if not admission.allowed:
            return _blocked(config, str(admission.blocked_reason), epoch, started)
        basis = DeleteBasis.of(admission, override=config.safe_epoch is not None)
        deleting = None if not config.sweep or config.dry_run else reader
        found = conflicts(basis.references, config.layout, basis.safe_epoch)
        if found:
            return await _conflicted(
                config,
                found,
                safe_epoch=basis.safe_epoch,
                deleting=deleting,
                cluster_epoch=epoch,
                started=started,
            )
        if reader is not None:
            config = dataclasses.replace(config, namespace=reader.etcd()[1].namespace)
        if config.sweep and not config.dry_run:
            config = await _with_window(config, features, reader, basis.safe_epoch)
        if deleting is not None:
            config = await _with_budget(config, deleting)
        try:
            async with (
                _announced(deleting, config),
                following(_source(deleting)) as brake,
                _anchored(deleting, config, brake),
            ):
                result = await run_job(config, basis, started, brake)
        except JobRunning as exc:
            return _blocked(config, str(exc), epoch, started)
    _announce(config, result.document)
    if result.job_error is not None:
        sys.stderr.write(f"gcd {config.command}: error: {result.job_error}\n")
        return exitcodes.PARTIAL_FAILURE
    if result.document.get("blocked_reason"):  # paused mid-job: `stopped` says where
        return exitcodes.BLOCKED
    return exitcodes.PARTIAL_FAILURE if result.document.get("errors") else exitcodes.OK


async def _with_window(
    config: JobConfig, features: StoreFeatures | None, reader: Reader | None, safe_epoch: int
) -> JobConfig:
    """`config` with its undo window's rule (`gcd.spark.window`), when it has a window."""
    if not config.undo_window_s or config.journal_prefix is None:
        return config
    etcd = None
    if reader is not None:
        kv, store = reader.etcd()
        etcd = (kv, store.namespace)
    undo = await plan_window(
        window_s=config.undo_window_s,
        settings=config.storage,
        root=config.layout.root,
        features=features,
        versions_listed=config.versions,
        journal_prefix=config.journal_prefix,
        etcd=etcd,
        safe_epoch=safe_epoch,
    )
    log.info(
        "spark.undo_window", rule=undo.rule, window_s=undo.window_s, limit=undo.limit(safe_epoch)
    )
    return dataclasses.replace(config, undo=undo)


async def _with_budget(config: JobConfig, reader: Reader) -> JobConfig:
    """`config` with the rate it takes over from the namespace's daemons (`gcd.spark.budget`)."""
    kv, store = reader.etcd()
    budget = await read_budget(kv, store.sweepers_prefix, config.max_deletes_per_second)
    log.info("spark.rate", **budget.to_dict())
    return dataclasses.replace(config, max_deletes_per_second=budget.rate, rate=budget.to_dict())


@contextlib.asynccontextmanager
async def _anchored(
    reader: Reader | None, config: JobConfig, brake: DriverBrake | None
) -> AsyncIterator[None]:
    """While a journaled job runs, its delete tasks' chains are anchored in etcd as they
    report them to the driver (`gcd.journal.anchor.anchoring`)."""
    if reader is None or brake is None or config.journal_prefix is None:
        yield
        return
    kv, store = reader.etcd()
    async with anchoring(kv, store.namespace, brake.chain_ends):
        yield


def _source(reader: Reader | None) -> PauseSource | None:
    """The pause key a job that deletes follows (None: no etcd, or nothing to stop)."""
    return None if reader is None else reader.source


@contextlib.asynccontextmanager
async def _announced(reader: Reader | None, config: JobConfig) -> AsyncIterator[None]:
    """A job that deletes (`reader` given) holds the namespace's Spark job key
    (`gcd.spark.announce`) while it runs; JobRunning when another job does."""
    if reader is None:
        yield
        return
    kv, store = reader.etcd()
    job = SparkJob(
        new_sweeper_id(), config.command, round(time.time(), 3), config.max_deletes_per_second
    )
    async with announced_job(kv, store.namespace, job, progress=lambda: job_progress(job)):
        yield


async def _conflicted(
    config: JobConfig,
    found: list[Conflict],
    *,
    safe_epoch: int,
    deleting: Reader | None,
    cluster_epoch: int | None,
    started: float,
) -> int:
    """M is past a key a partition still references: no job; a deleting one pauses GC
    in the namespace, as a sweeper's round does (`gcd.rules.references`)."""
    reason = pause_reason(found[0], len(found), safe_epoch)
    for conflict in found:
        log.error("spark.reference_conflict", **conflict.fields(safe_epoch))
    if deleting is not None and deleting.source is not None:
        await deleting.source.set_paused(reason)
        reason = f"paused: {reason}"
    keys = tuple(c.reference.key for c in found[:MAX_CONFLICTS_SHOWN])
    return _blocked(config, reason, cluster_epoch, started, conflicts=(len(found), keys))


def _blocked(
    config: JobConfig,
    reason: str,
    cluster_epoch: int | None,
    started: float,
    *,
    conflicts: tuple[int, tuple[str, ...]] = (0, ()),
) -> int:
    """Write and print the summary of a job that did not start; exit 3."""
    log.warning(
        "spark.round_blocked", command=config.command, reason=reason, cluster_epoch=cluster_epoch
    )
    blocked = RoundSummary(
        cluster_epoch=cluster_epoch,
        dry_run=config.dry_run,
        duration_s=time.monotonic() - started,
        blocked_reason=reason,
        reference_conflicts=conflicts[0],
        conflicting_keys=conflicts[1],
    ).to_dict()
    blocked["source"] = config.source
    name = "summary.json" if config.sweep else "report.json"
    write_json_file(config.output / name, blocked)
    _announce(config, blocked)
    return exitcodes.BLOCKED
