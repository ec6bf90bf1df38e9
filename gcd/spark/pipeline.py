"""One spark-sweep or spark-report job, given an admitted safe epoch M.

Design notes: docs/internals/spark.md, `gcd.spark.pipeline`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import structlog

from gcd.observe.events import DeleteBasis
from gcd.observe.report import RoundSummary
from gcd.rules.layout import KeyLayout
from gcd.spark.brake import DriverBrake
from gcd.spark.delete import DeleteSettings, apply_deletes
from gcd.spark.journal import SparkJournal
from gcd.spark.listing import list_objects
from gcd.spark.nesting import NestedClaims, find_nested_roots, keep_nested, probe_claims
from gcd.spark.report import ReportSettings, write_report
from gcd.spark.session import is_local_master, spark_session, task_slots
from gcd.spark.undo import JobUndo, plan_undo
from gcd.storage.backend import InventoryReport, StoreSettings
from gcd.storage.executor import ExecutorStore
from gcd.storage.registry import backend
from gcd.storage.rows import Action, classify, outcome_counts
from l0gc.contract.spark_job import SparkJob
from l0gc.errors import ConfigError

__all__ = [
    "JobConfig",
    "JobResult",
    "decisions_uri_problem",
    "execute",
    "job_progress",
    "run_job",
    "summary_from_counts",
    "write_json_file",
]

log = structlog.get_logger("gcd.spark")

RESUME: Final = (
    "after `gcd resume`, run the same command again: what this run deleted is gone from "
    "a listing, and an inventory's rows for it are answered 404 (deleted)"
)


@dataclass(frozen=True, slots=True)
class JobConfig:
    """The validated options of one spark-sweep / spark-report invocation."""

    command: str
    storage: StoreSettings
    """The store (`gcd.storage.backend`): its backend gives executors their target."""
    layout: KeyLayout
    inventory: str | None
    inventory_root: str | None
    list_tasks: int
    output: Path
    decisions_uri: str
    dry_run: bool
    master: str | None
    grace_s: float
    batch_size: int
    max_deletes_per_second: float | None
    delete_concurrency: int
    price_per_gb_month: float
    safe_epoch: int | None
    json: bool
    conf: Mapping[str, str] = field(default_factory=dict)
    """`--conf KEY=VALUE`: settings of the Spark session this command makes."""
    py_files: tuple[str, ...] = ()
    """`--py-files`: zips (e.g. `gcd spark-package`'s) shipped to the executors."""
    delete_tasks: int | None = None
    """`--delete-tasks`: partitions of the delete stage; None: the granted task slots."""
    version_mode: str = "reclaim"
    """`--versions`: "reclaim" or "markers-only" (as `gcd sweep`)."""
    versions: bool = False
    """List (or read from the inventory) every version and delete marker, and delete by
    version id: a versioned bucket with `--versions reclaim` (set by the CLI)."""
    object_lock: bool = False
    """The bucket has Object Lock: a version it refuses is `locked`, not an error."""
    store: dict[str, Any] | None = None
    """What the preflight detected (versioning, Object Lock), for the summary's `store`."""
    journal_prefix: str | None = None
    """`--journal-prefix`: the audit prefix every delete batch is journaled under first
    (`gcd.spark.journal`); None: no journal."""
    namespace: str | None = None
    """The etcd namespace the journal's segments name (None: no etcd)."""
    undo_window_s: float = 0.0
    """`--undo-window`: deletions stay reversible this long (needs `journal_prefix`)."""
    undo: JobUndo | None = None
    """The window's rule, decided on the driver (`gcd.spark.window`); None: no window."""
    rate: Mapping[str, Any] | None = None
    """How the job's rate was set from the namespace's budget (`gcd.spark.budget`)."""

    @property
    def sweep(self) -> bool:
        """True for spark-sweep, False for spark-report."""
        return self.command == "spark-sweep"

    @property
    def source(self) -> str:
        """Where the objects come from: "inventory" or "list"."""
        return "list" if self.inventory is None else "inventory"

    @property
    def bucket(self) -> str:
        """The bucket or container, as a binding names it."""
        return self.storage.target("").bucket

    @property
    def target(self) -> ExecutorStore:
        """The store as executors see it (`gcd.storage.executor`)."""
        return backend(self.storage.kind).executor_store(self.storage, versions=self.versions)


@dataclass(frozen=True, slots=True)
class JobResult:
    """The summary document, and the Spark failure if the job did not complete."""

    document: dict[str, Any]
    job_error: str | None = None


def summary_from_counts(
    counts: dict[str, tuple[int, int]],
    *,
    safe_epoch: int,
    cluster_epoch: int | None,
    dry_run: bool,
    list_requests: int,
    delete_requests: int,
    duration_s: float,
    nested: NestedClaims | None = None,
    kinds: dict[str, tuple[int, int]] | None = None,
    store: dict[str, Any] | None = None,
    brake: DriverBrake | None = None,
) -> dict[str, Any]:
    """`gcd sweep --json` fields (plus Spark extras) from per-action (objects, bytes);
    `kinds`: per action (versions, delete markers) of a versioned bucket's rows."""

    def objects(action: Action) -> int:
        return counts.get(action.value, (0, 0))[0]

    def size(action: Action) -> int:
        return counts.get(action.value, (0, 0))[1]

    eligible = (
        objects(Action.DELETED)
        + objects(Action.WOULD_DELETE)
        + objects(Action.FAILED)
        + objects(Action.LOCKED)
        + objects(Action.SKIPPED_PAUSED)
        + objects(Action.HIDDEN)
        + objects(Action.WOULD_HIDE)
    )
    deleted_kinds = (kinds or {}).get(Action.DELETED.value, (0, 0))
    kept = (
        Action.KEPT_NOT_ELIGIBLE,
        Action.KEPT_TOO_YOUNG,
        Action.KEPT_UNPARSABLE,
        Action.KEPT_NESTED_ROOT,
        Action.KEPT_UNDO,
        Action.KEPT_FOREIGN_MARKER,
    )
    nested = nested or NestedClaims({})
    summary = RoundSummary(
        safe_epoch=safe_epoch,
        cluster_epoch=cluster_epoch,
        dry_run=dry_run,
        listed=eligible + sum(objects(action) for action in kept),
        eligible=eligible,
        deleted=objects(Action.DELETED),
        deleted_bytes=size(Action.DELETED),
        skipped_not_eligible=objects(Action.KEPT_NOT_ELIGIBLE),
        skipped_young=objects(Action.KEPT_TOO_YOUNG),
        unparsable=objects(Action.KEPT_UNPARSABLE),
        errors=objects(Action.FAILED),
        list_requests=list_requests,
        delete_requests=delete_requests,
        duration_s=duration_s,
        skipped_nested=objects(Action.KEPT_NESTED_ROOT),
        nested_roots=tuple(sorted(nested.roots)),
        deleted_versions=deleted_kinds[0],
        deleted_markers=deleted_kinds[1],
        locked=objects(Action.LOCKED),
        skipped_paused=objects(Action.SKIPPED_PAUSED),
        markers_written=objects(Action.HIDDEN),
        blocked_reason=None if brake is None else brake.reason,
        store=store,
    ).to_dict()
    summary["outside_root"] = objects(Action.KEPT_OUTSIDE_ROOT)
    summary["would_delete"] = objects(Action.WOULD_DELETE)
    summary["would_delete_bytes"] = size(Action.WOULD_DELETE)
    summary["would_hide"] = objects(Action.WOULD_HIDE)
    summary["claim_probes"] = nested.probes
    summary["claim_probe_failures"] = list(nested.failed)
    return summary


def decisions_uri_problem(master: str, uri: str) -> str | None:
    """Why executors on `master` cannot write decisions to `uri` for the driver to read
    back, or None. A plain path is on each machine's own disk; a URI (hdfs://, s3a://,
    file:// for a volume mounted at the same path on every node) is shared."""
    if is_local_master(master) or "://" in uri:
        return None
    return (
        f"--decisions-uri {uri!r} is a path on this machine, but master {master} runs the "
        "executors on other machines: each would write its part of decisions/ to its own "
        "disk and the summary read back here would be wrong. Give a location every node "
        "shares: --decisions-uri hdfs:///l0gc/decisions/RUN, s3a://BUCKET/PREFIX, or "
        "file:///PATH on a volume mounted at the same path on every node"
    )


def _source(
    spark: Any, job: JobConfig, skip_above: int | None, requests: Any, tasks: int | None
) -> Any:
    """The objects; with `tasks` (a deleting sweep) in exactly that many partitions."""
    if job.inventory is not None:
        report = InventoryReport(job.inventory, job.inventory_root)
        frame = backend(job.storage.kind).read_inventory(
            spark, job.storage, report, versions=job.versions
        )
    if job.inventory is not None:
        # gzip CSV files are not splittable: spread the rows over the cluster's cores.
        wanted = tasks or spark.sparkContext.defaultParallelism
        files = frame.rdd.getNumPartitions()  # a file scan: planning only, no job
        if files < wanted:
            frame = frame.repartition(wanted)
        elif tasks is not None and files > tasks:
            frame = frame.coalesce(tasks)  # no shuffle: a retry re-reads the same files
        return frame
    frame = list_objects(
        spark,
        job.target,
        job.layout,
        task_count=job.list_tasks,
        skip_above_epoch=skip_above,
        requests=requests,
    )
    # A retried delete task must not re-list (its deleted keys would be gone from the
    # decisions): listed rows cross a shuffle, and the deletes read its output.
    return frame if tasks is None else frame.repartition(tasks)


def write_json_file(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)


def _nested(
    spark: Any, job: JobConfig, classified: Any, *, deleting: bool
) -> tuple[Any, NestedClaims]:
    """The claims below the root (collected before any delete) and the rows they keep;
    a job that deletes also probes the bucket for claims its rows may not show."""
    root = job.layout.root
    found = find_nested_roots(classified, root)
    if deleting:
        probes = spark.sparkContext.accumulator(0)
        nested = probe_claims(
            classified,
            root,
            job.target,
            found,
            every_directory=job.inventory is not None,
            requests=probes,
        )
    else:
        nested = NestedClaims(found)
    for nested_root, claim in sorted(nested.roots.items()):
        log.error("spark.nested_root", nested_root=nested_root, claim=claim, root=root)
    for directory in nested.failed:
        log.warning("spark.claim_probe_failed", directory=directory, root=root)
    return keep_nested(classified, nested.kept, root), nested


def _journal(
    job: JobConfig, basis: DeleteBasis, application: str, report_url: str | None
) -> SparkJournal | None:
    """Where the delete tasks journal (None: `--journal-prefix` not given); the job's
    round is ``{application}.{6 hex digits}``."""
    if job.journal_prefix is None:
        return None
    target = job.storage.target(job.layout.root)
    header = (
        ("application", application),
        ("namespace", job.namespace),
        ("bucket", target.bucket),
        ("root", target.root),
        ("endpoint_url", target.endpoint_url),
        ("kind", target.kind),
    )
    # One application may run several jobs (a notebook, spark-submit of a script): the
    # round names this one.
    round_id = f"{application}.{secrets.token_hex(3)}"
    round_basis = dataclasses.replace(basis, round_id=round_id)
    return SparkJournal(job.journal_prefix, round_basis, header, report_url)


def _sweep(
    spark: Any,
    job: JobConfig,
    classified: Any,
    tasks: int | None,
    *,
    brake_url: str | None,
    journal: SparkJournal | None,
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]], int]:
    """Delete (or not) and write the decisions; per-action (objects, bytes) and
    (versions, markers), and DeleteObjects calls."""
    settings = DeleteSettings.for_job(
        job.target,
        tasks=tasks or 1,
        dry_run=job.dry_run,
        max_deletes_per_second=job.max_deletes_per_second,
        delete_concurrency=job.delete_concurrency,
        batch_size=job.batch_size,
        object_lock=job.object_lock,
        brake_url=brake_url,
        journal=journal,
    )
    delete_requests = spark.sparkContext.accumulator(0)
    decisions = apply_deletes(classified, settings, requests=delete_requests)
    decisions.write.mode("overwrite").parquet(job.decisions_uri)  # the one action: deletes
    rows = outcome_counts(spark.read.parquet(job.decisions_uri)).collect()
    counts = {row["action"]: (int(row["objects"]), int(row["bytes"])) for row in rows}
    kinds = {row["action"]: (int(row["versions"]), int(row["markers"])) for row in rows}
    return counts, kinds, int(delete_requests.value)


def _held(spark: Any, job: JobConfig) -> tuple[int, int, int]:
    """(keys, bytes) the undo window holds after the job (hidden by it, or hidden
    before and younger than the window), and keys under another writer's marker."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    frame = spark.read.parquet(job.decisions_uri)
    held = F.col("action").isin(Action.HIDDEN.value, Action.KEPT_UNDO.value)
    foreign = F.col("action") == Action.KEPT_FOREIGN_MARKER.value
    data = held & ~F.col("delete_marker")
    row = frame.agg(
        F.countDistinct(F.when(held, F.col("key"))).alias("keys"),
        F.coalesce(F.sum(F.when(data, F.col("size"))), F.lit(0)).alias("bytes"),
        F.countDistinct(F.when(foreign, F.col("key"))).alias("foreign"),
    ).first()
    return int(row["keys"]), int(row["bytes"]), int(row["foreign"])


def execute(
    job: JobConfig,
    basis: DeleteBasis,
    started: float,
    brake: DriverBrake | None = None,
) -> JobResult:
    """Run the job with the admission `basis` (M); write its outputs; return the summary.
    With `brake` (etcd given), executors stop deleting once it engages (`gcd pause`)."""
    safe_epoch, cluster_epoch = basis.safe_epoch, basis.cluster_epoch
    now_s = time.time()
    log.info(
        "spark.round_started",
        command=job.command,
        source=job.source,
        safe_epoch=safe_epoch,
        cluster_epoch=cluster_epoch,
        dry_run=job.dry_run,
    )
    with spark_session(
        job.master, app_name=f"l0gc {job.command}", conf=job.conf, py_files=job.py_files
    ) as spark:
        problem = decisions_uri_problem(spark.sparkContext.master, job.decisions_uri)
        if job.sweep and problem is not None:
            raise ConfigError(problem)
        list_requests = spark.sparkContext.accumulator(0)
        limit = safe_epoch if job.undo is None else job.undo.limit(safe_epoch)
        skip_above = limit if job.sweep else None
        deleting = job.sweep and not job.dry_run
        tasks = (job.delete_tasks or task_slots(spark)) if deleting else None
        brake_url = None if brake is None or not deleting else brake.serve(_driver_host(spark))
        application = str(spark.sparkContext.applicationId)
        journal = _journal(job, basis, application, brake_url) if deleting else None
        from pyspark import StorageLevel  # noqa: PLC0415

        nested = NestedClaims({})
        cached = None
        try:
            source = _source(spark, job, skip_above, list_requests, tasks)
            classified = classify(source, job.layout, limit, now_s, job.grace_s)
            # List (or read) and classify once: the claims, probes and deletes read these.
            cached = classified.persist(StorageLevel.MEMORY_AND_DISK)
            classified, nested = _nested(spark, job, cached, deleting=deleting)
            if job.sweep and job.undo is not None and job.undo.rule == "hide-then-reclaim":
                classified = plan_undo(classified, job.undo.ledger, now_s, job.undo.window_s)
            if not job.sweep:
                settings = ReportSettings(
                    safe_epoch=safe_epoch,
                    cluster_epoch=cluster_epoch,
                    now_s=now_s,
                    grace_s=job.grace_s,
                    price_per_gb_month=job.price_per_gb_month,
                    source=job.source,
                    nested_roots=tuple(sorted(nested.roots)),
                    versions=job.versions,
                )
                document = write_report(classified, job.output, settings)
                log.info(
                    "spark.report_written",
                    output=str(job.output),
                    garbage_objects=document["garbage_objects"],
                )
                return JobResult(document)
            counts, kinds, delete_count = _sweep(
                spark, job, classified, tasks, brake_url=brake_url, journal=journal
            )
            held = _held(spark, job) if job.undo is not None else (0, 0, 0)
            job_error = None
        except Exception as exc:
            if not _is_spark_failure(exc):
                raise
            log.error("spark.job_failed", command=job.command, error=str(exc)[:2000])
            counts, kinds, delete_count, job_error = {}, {}, 0, _first_line(exc)
            held = (0, 0, 0)
            if not job.sweep:
                return JobResult({"version": 1, "safe_epoch": safe_epoch}, job_error)
        finally:
            if cached is not None:
                cached.unpersist()
        list_count = int(list_requests.value)
    document = summary_from_counts(
        counts,
        safe_epoch=safe_epoch,
        cluster_epoch=cluster_epoch,
        dry_run=job.dry_run,
        list_requests=list_count,
        delete_requests=delete_count,
        duration_s=time.monotonic() - started,
        nested=nested,
        kinds=kinds,
        store=job.store,
        brake=brake,
    )
    if brake is not None and brake.reason is not None:
        document["stopped"] = {
            "reason": brake.reason,
            "at": brake.stopped_at,
            "skipped_paused": document["skipped_paused"],
            "resume": RESUME,
        }
    if job.undo is not None:
        document["undo"] = job.undo.report(*held)
    if job.rate is not None:
        document["rate"] = dict(job.rate)
    document["source"] = job.source
    document["application"] = application
    if journal is not None:
        document["journal"] = {
            "prefix": journal.prefix,
            "round": journal.basis.round_id,
            "chains": None if brake is None else len(brake.chains),
        }
    document["decisions"] = job.decisions_uri
    document["delete_tasks"] = tasks
    if job_error is not None:
        document["job_error"] = job_error
    write_json_file(job.output / "summary.json", document)
    log.info(
        "spark.round_finished",
        **{
            k: document[k]
            for k in (
                "listed",
                "eligible",
                "deleted",
                "errors",
                "would_delete",
                "outside_root",
                "skipped_nested",
                "nested_roots",
            )
        },
    )
    return JobResult(document, job_error)


async def run_job(
    job: JobConfig, basis: DeleteBasis, started: float, brake: DriverBrake | None
) -> JobResult:
    """`execute` in a worker thread, so the event loop goes on following the pause key
    (`gcd.spark.pausing`) on the reader's etcd client; cancelled (SIGINT), it cancels
    the Spark jobs and waits for `execute` to end."""
    running = asyncio.ensure_future(asyncio.to_thread(execute, job, basis, started, brake))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        _cancel_spark_jobs()
        await asyncio.wait([running])
        raise


def _cancel_spark_jobs() -> None:
    from pyspark import SparkContext  # noqa: PLC0415

    context = SparkContext._active_spark_context
    if context is not None:
        context.cancelAllJobs()


def job_progress(job: SparkJob) -> SparkJob | None:
    """`job` with its Spark application id and the running stages' task counts (the
    `gcd status` line of a running job); None before a Spark context runs."""
    from pyspark import SparkContext  # noqa: PLC0415

    context = SparkContext._active_spark_context
    if context is None:
        return None
    tracker = context.statusTracker()
    stages = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
    running = [stage for stage in stages if stage is not None]
    return dataclasses.replace(
        job,
        application_id=str(context.applicationId),
        tasks_done=sum(int(stage.numCompletedTasks) for stage in running),
        tasks=sum(int(stage.numTasks) for stage in running),
    )


def _driver_host(spark: Any) -> str:
    """Where executors reach the driver (`spark.driver.bindAddress`, else `.host`)."""
    conf = spark.sparkContext.getConf()
    return str(conf.get("spark.driver.bindAddress", None) or conf.get("spark.driver.host"))


def _is_spark_failure(exc: Exception) -> bool:
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415

    return isinstance(exc, PySparkException | Py4JError)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if "Error" in line or "Exception" in line:
            return line.strip()[:500]
    return text.splitlines()[0][:500] if text else type(exc).__name__
