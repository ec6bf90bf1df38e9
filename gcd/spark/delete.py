"""Executors delete the eligible keys: DeleteObjects batches, paced, retried.

Design notes: docs/internals/spark.md, `gcd.spark.delete`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from gcd.observe.events import BatchAttempt, BatchOutcome, DeletionNotRecorded
from gcd.rules.versions import version_target
from gcd.spark.brake import BrakeClient
from gcd.spark.journal import SparkJournal, TaskJournal, task_sweeper
from gcd.storage.executor import ExecutorClient, ExecutorStore
from gcd.storage.ratelimit import TokenBucket
from gcd.storage.rows import Action, with_version_columns
from l0gc.errors import ConfigError

__all__ = ["DECISIONS_SCHEMA", "DeleteSettings", "apply_deletes"]

DECISIONS_SCHEMA = (
    "key string, version_id string, delete_marker boolean, epoch long, size long, "
    "action string, error string"
)
MAX_BATCH = 1000
LOCKED_CODES = frozenset({"AccessDenied"})
"""Per-version codes that mean "locked" on a bucket with Object Lock (the async
deleter's `gcd.sweep.deleter.LOCKED_CODES`, which executors do not import)."""

Row = tuple[str, str | None, bool, int | None, int, str, str | None]
"""(key, version_id, delete_marker, epoch, size, action, error): one decision."""
_Pending = tuple[str, str | None, bool, int | None, int, tuple[str, ...] | None]
"""A row to send: the decision's first five columns, and for a hide (an undo window,
`gcd.spark.undo`) the versions its marker hides (None: a plain delete)."""
_DECISION_COLUMNS = ("key", "version_id", "delete_marker", "epoch", "size", "action", "error")


@dataclass(frozen=True, slots=True)
class DeleteSettings:
    """How executors delete; `dry_run` defaults to True (nothing is deleted)."""

    target: ExecutorStore
    dry_run: bool = True
    threads: int = 4
    deletes_per_second: float | None = None
    batch_size: int = MAX_BATCH
    object_lock: bool = False
    """The bucket has Object Lock: a version refused with AccessDenied is `locked`."""
    brake_url: str | None = None
    """The driver's brake (`gcd.spark.brake`), asked before each batch; None: none."""
    journal: SparkJournal | None = None
    """Where each batch is journaled before it is sent (`gcd.spark.journal`); None: not."""

    @classmethod
    def for_job(
        cls,
        target: ExecutorStore,
        *,
        tasks: int,
        dry_run: bool = True,
        max_deletes_per_second: float | None = None,
        delete_concurrency: int = 8,
        batch_size: int = MAX_BATCH,
        object_lock: bool = False,
        brake_url: str | None = None,
        journal: SparkJournal | None = None,
    ) -> DeleteSettings:
        """The settings of each of `tasks` delete tasks sharing job-wide limits equally:
        rate / tasks keys per second, and concurrency // tasks requests (at least 1)."""
        if tasks < 1:
            raise ConfigError(f"delete tasks {tasks!r} must be >= 1")
        return cls(
            target=target,
            dry_run=dry_run,
            threads=max(1, delete_concurrency // tasks),
            deletes_per_second=None
            if max_deletes_per_second is None
            else (max_deletes_per_second / tasks),
            batch_size=batch_size,
            object_lock=object_lock,
            brake_url=brake_url,
            journal=journal,
        )

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise ConfigError(f"batch size {self.batch_size!r} must be 1-{MAX_BATCH}")
        if self.threads < 1:
            raise ConfigError(f"delete concurrency {self.threads!r} must be >= 1")
        if self.deletes_per_second is not None and not self.deletes_per_second > 0:
            msg = f"deletes per second {self.deletes_per_second!r} must be > 0; omit for no limit"
            raise ConfigError(msg)


class _Pacer:
    """A thread-safe wrapper over the token bucket (sync sleep)."""

    def __init__(self, rate: float | None) -> None:
        self._bucket = None if rate is None else TokenBucket(rate)
        self._lock = threading.Lock()

    def acquire(self, count: int) -> None:
        if self._bucket is None:
            return
        with self._lock:
            delay = self._bucket.reserve(count)
        if delay > 0:
            time.sleep(delay)


def _failed_action(settings: DeleteSettings, version_id: str | None, error: str) -> str:
    """`locked` for a version Object Lock refused, else `failed`."""
    code = error.split(":", 1)[0]
    locked = settings.object_lock and version_id is not None and code in LOCKED_CODES
    return str((Action.LOCKED if locked else Action.FAILED).value)


def _optional_int(value: object) -> int | None:
    """int(value), or None for None / NaN / pandas NA."""
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


def _text_or_none(value: object) -> str | None:
    """A version id: None for None / NaN / pandas NA."""
    return value if isinstance(value, str) else None


def _delete_partition(
    batches: Iterator[Any], settings: DeleteSettings, requests: Any
) -> Iterator[list[Row]]:
    """Decisions for one task's rows, in chunks (see module docs)."""
    pending: list[_Pending] = []
    in_flight: set[Future[list[Row]]] = set()
    pool: ThreadPoolExecutor | None = None
    client: ExecutorClient | None = None
    pacer = _Pacer(settings.deletes_per_second)
    count = (lambda: requests.add(1)) if requests is not None else (lambda: None)
    brake = None if settings.brake_url is None else BrakeClient(settings.brake_url)
    journal: TaskJournal | None = None

    def run_batch(rows: list[_Pending]) -> list[Row]:
        stop = None if brake is None else brake.check()
        if stop is not None:  # paused: this request and every later one are never sent
            return [(*row[:5], Action.SKIPPED_PAUSED.value, stop) for row in rows]
        targets = [_target(row) for row in rows]
        assert client is not None  # connected by `submit` before any batch
        attempt = None
        if journal is not None:
            attempt = _attempt(journal, rows)
            try:
                journal.before(attempt)
            except DeletionNotRecorded as exc:  # not journaled: never sent
                return [(*row[:5], Action.FAILED.value, f"NotJournaled: {exc}") for row in rows]
        markers: list[tuple[str, str]] = []
        result = client.delete_keys(
            targets, pace=pacer.acquire, on_request=count, on_markers=markers.extend
        )
        if journal is not None and attempt is not None:
            journal.after(_outcome(attempt, rows, targets, result, markers))
        decided: list[Row] = []
        for target, row in zip(targets, rows, strict=True):
            # A key is deleted only when its outcome says so; one without any is failed.
            error = result.get(target, "not reported by DeleteObjects")
            action = (
                (Action.DELETED if row[5] is None else Action.HIDDEN).value
                if error is None
                else _failed_action(settings, row[1], error)
            )
            decided.append((*row[:5], action, error))
        return decided

    def submit() -> Iterator[list[Row]]:
        nonlocal pool, client, journal
        if pool is None:
            client = settings.target.connect(pool=settings.threads)
            if settings.journal is not None:
                journal = settings.journal.task(client, _sweeper(settings.journal))
            pool = ThreadPoolExecutor(settings.threads, thread_name_prefix="l0gc-delete")
        in_flight.add(pool.submit(run_batch, list(pending)))
        pending.clear()
        while len(in_flight) >= 2 * settings.threads:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                in_flight.discard(future)
                yield future.result()

    try:
        for frame in batches:
            kept: list[Row] = []
            hides = frame["hides"].tolist() if "hides" in frame else [None] * len(frame)
            for key, version, marker, epoch, size, action, hidden in zip(
                frame["key"].tolist(),
                frame["version_id"].tolist(),
                frame["delete_marker"].tolist(),
                frame["epoch"].tolist(),
                frame["size"].tolist(),
                frame["action"].tolist(),
                hides,
                strict=True,
            ):
                hide = action == Action.HIDE.value
                row: _Pending = (
                    key,
                    _text_or_none(version),
                    str(marker) == "True",
                    _optional_int(epoch),
                    int(size),
                    tuple(str(v) for v in ([] if hidden is None else hidden)) if hide else None,
                )
                if action not in _SENT:
                    kept.append((*row[:5], action, None))
                elif settings.dry_run:
                    would = Action.WOULD_HIDE if hide else Action.WOULD_DELETE
                    kept.append((*row[:5], would.value, None))
                else:
                    pending.append(row)
                    if len(pending) >= settings.batch_size:
                        yield from submit()
            if kept:
                yield kept
        if pending:
            yield from submit()
        for future in list(in_flight):
            yield future.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if journal is not None:  # the last after records, and the task's audit anchor
        journal.close()


_SENT = frozenset({Action.DELETE.value, Action.HIDE.value})


def _target(row: _Pending) -> str:
    """What a row sends: the key and its version id, or the key alone for a hide."""
    return version_target(row[0], row[1] if row[5] is None else None)


def _sweeper(journal: SparkJournal) -> str:
    """This task attempt's journal name (`task_sweeper`), from Spark's TaskContext."""
    from pyspark import TaskContext  # noqa: PLC0415 - in the executor's Python worker

    context = TaskContext.get()
    application = journal.basis.round_id or "spark"
    if context is None:  # called outside a Spark task (tests)
        return task_sweeper(application, 0, 0)
    return task_sweeper(application, context.partitionId(), context.taskAttemptId())


def _attempt(journal: TaskJournal, rows: list[_Pending]) -> BatchAttempt:
    """The journal's view of one batch about to be sent (`gcd.observe.events`)."""
    request = journal.next_request()
    versions = tuple(row[1] if row[5] is None else None for row in rows)
    hides = tuple(row[5] or () for row in rows)
    return BatchAttempt(
        journal.journal.basis,
        tuple(row[0] for row in rows),
        tuple(-1 if row[3] is None else row[3] for row in rows),
        attempt=0,
        batch=request,
        request=request,
        version_ids=versions if any(v is not None for v in versions) else (),
        hides=hides if any(hides) else (),
    )


def _outcome(
    attempt: BatchAttempt,
    rows: list[_Pending],
    targets: list[str],
    result: dict[str, str | None],
    markers: list[tuple[str, str]],
) -> BatchOutcome:
    """What became of `attempt`'s keys, as the journal's after record tells it (with
    the delete markers its hides wrote: what `gcd restore` deletes)."""
    deleted: list[str] = []
    deleted_versions: list[str | None] = []
    failed: list[tuple[str, str]] = []
    for target, row in zip(targets, rows, strict=True):
        error = result.get(target, "NotReported: not reported by DeleteObjects")
        if error is None:
            deleted.append(row[0])
            deleted_versions.append(row[1] if row[5] is None else None)
        else:
            failed.append((row[0], error.split(":", 1)[0]))
    return BatchOutcome(
        attempt,
        deleted=tuple(deleted),
        failed=tuple(failed),
        deleted_version_ids=tuple(deleted_versions) if attempt.version_ids else (),
        markers=tuple(markers),
    )


def apply_deletes(classified: Any, settings: DeleteSettings, *, requests: Any = None) -> Any:
    """Classified rows -> decisions ``(key, version_id, delete_marker, epoch, size,
    action, error)``.

    `requests` is an optional Spark accumulator counting DeleteObjects calls. Spark
    merges a task's accumulator updates when the task succeeds (once per partition of
    the job's final stage, where the deletes run), so it counts the requests of the
    successful attempts; those of an attempt that failed are not counted.
    """

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd  # noqa: PLC0415

        for rows in _delete_partition(batches, settings, requests):
            frame = pd.DataFrame.from_records(rows, columns=list(_DECISION_COLUMNS))
            frame["epoch"] = frame["epoch"].astype("Int64")
            frame["delete_marker"] = frame["delete_marker"].astype(bool)
            yield frame

    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    source = with_version_columns(classified)
    if "hides" not in source.columns:
        source = source.withColumn("hides", F.lit(None).cast("array<string>"))
    columns = source.select(
        "key", "version_id", "delete_marker", "epoch", "size", "action", "hides"
    )
    if settings.dry_run:
        # Nothing to call: rename the action in SQL, without a trip through Python.
        eligible = F.col("action") == Action.DELETE.value
        hide = F.col("action") == Action.HIDE.value
        return columns.select(
            "key",
            "version_id",
            "delete_marker",
            "epoch",
            "size",
            F.when(eligible, Action.WOULD_DELETE.value)
            .when(hide, Action.WOULD_HIDE.value)
            .otherwise(F.col("action"))
            .alias("action"),
            F.lit(None).cast("string").alias("error"),
        )
    return columns.mapInPandas(run, DECISIONS_SCHEMA)
