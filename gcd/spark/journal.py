"""A Spark job's deletion journal: each delete task's records, written to the audit
prefix before its DeleteObjects is sent. Imports nothing an executor lacks.

Design notes: docs/internals/spark.md, `gcd.spark.journal`.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from gcd.journal.chain import Chain, after_doc, before_doc
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis, DeletionNotRecorded
from gcd.storage.executor import ExecutorClient
from l0gc.contract.journal_anchor import JournalAnchor, audit_anchor_name
from l0gc.errors import StorageError

__all__ = ["SparkJournal", "TaskJournal", "task_sweeper"]

ANCHOR_PATH: Final = "/anchor"
"""Where, under the driver's brake URL, a task reports its chain's end."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def task_sweeper(application: str, partition: int, task_attempt: int) -> str:
    """The journal name of one task attempt: ``spark-{application}-p{partition}-t{attempt}``
    (Spark's task attempt id is unique in the application: a retried or speculative copy
    of a task writes its own chain, never another's)."""
    return f"spark-{_UNSAFE.sub('_', application)}-p{partition}-t{task_attempt}"


@dataclass(frozen=True, slots=True)
class SparkJournal:
    """Where a job's delete tasks journal, and under which admission (picklable)."""

    prefix: str
    """The audit prefix (`gcd.journal.records.check_audit_prefix`), no trailing slash."""
    basis: DeleteBasis
    """The job's admission; its `round_id` is the job's round, ``{application}.{6 hex}``."""
    header: tuple[tuple[str, Any], ...]
    """The segment record's fields: application, namespace, bucket, root, endpoint_url,
    kind."""
    report_url: str | None = None
    """The driver's brake URL: each segment's end is reported there, for etcd."""

    def task(self, client: ExecutorClient, sweeper: str) -> TaskJournal:
        """The journal of one task attempt, writing through `client`."""
        return TaskJournal(self, client, sweeper)


@dataclass(eq=False)
class TaskJournal:
    """One task attempt's chain (a `gcd.observe.events.DeleteSink`).

    `before` writes one segment object, ``{prefix}/journal-{sweeper}-{n}.jsonl``: a segment
    record, the after records of the requests answered since the last segment, and the
    before record of the request about to be sent. Only once it is stored may the request
    go (else DeletionNotRecorded, and the chain is as it was). `close` stores the last
    after records and the task's audit anchor.
    """

    journal: SparkJournal
    client: ExecutorClient
    sweeper: str
    clock: Callable[[], float] = time.time
    segments: int = 0
    _chain: Chain = field(init=False)
    _pending: list[tuple[dict[str, Any], float]] = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _last: str = field(default="", init=False)
    _requests: int = field(default=0, init=False)
    _pool: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._chain = Chain(self.sweeper)

    def next_request(self) -> int:
        """The next request number of this task (pairs a before with its after)."""
        with self._lock:
            self._requests += 1
            return self._requests

    def before(self, attempt: BatchAttempt) -> None:
        """Store the segment that ends with `attempt`'s before record."""
        with self._lock:
            try:
                self._store([*self._pending, (before_doc(attempt), self.clock())])
            except StorageError as exc:
                raise DeletionNotRecorded(
                    f"journal segment not stored under {self.journal.prefix}/ ({exc}); "
                    f"{len(attempt.keys)} keys not deleted: check the role's PutObject there"
                ) from exc
            self._pending.clear()

    def after(self, outcome: BatchOutcome) -> None:
        """Keep `outcome`'s after record for the next segment."""
        with self._lock:
            self._pending.append((after_doc(outcome), self.clock()))

    def close(self) -> JournalAnchor | None:
        """Store the after records left and the audit anchor; the chain's end (None: no
        record). A failure is raised: the task's deletions are done, their outcome is
        only in its decisions."""
        with self._lock:
            if self._pending:
                self._store(list(self._pending))
                self._pending.clear()
            end = self._end()
            if end is not None:
                name = f"{self.journal.prefix}/{audit_anchor_name(self.sweeper)}"
                self.client.put_object(name, end.encode())
            return end

    def _end(self) -> JournalAnchor | None:
        if not self._chain.seq:
            return None
        chain = self._chain
        return JournalAnchor(self.sweeper, chain.seq, chain.prev, self._last, self.clock())

    def _store(self, docs: list[tuple[dict[str, Any], float]]) -> None:
        """One segment of `docs`; the chain moves on only once it is stored."""
        chain = dataclasses.replace(self._chain)
        number = self.segments + 1
        name = f"journal-{self.sweeper}-{number:06d}.jsonl"
        head = {"type": "segment", "segment": number, **dict(self.journal.header)}
        lines = [chain.line(head, docs[0][1] if docs else self.clock())]
        lines += [chain.line(dict(doc), at) for doc, at in docs]
        self.client.put_object(f"{self.journal.prefix}/{name}", b"\n".join(lines) + b"\n")
        self._chain, self.segments, self._last = chain, number, name
        self._report()

    def _report(self) -> None:
        """Tell the driver where the chain ends (best effort: the audit anchor stays)."""
        url = self.journal.report_url
        end = self._end()
        if url is None or end is None:
            return
        import urllib3  # noqa: PLC0415 - executor-side dependency (boto3's)

        self._pool = self._pool or urllib3.PoolManager(maxsize=1)
        try:
            self._pool.request(
                "POST",
                url + ANCHOR_PATH,
                body=end.encode(),
                headers={"Content-Type": "application/json"},
                timeout=urllib3.Timeout(total=5.0),
                retries=False,
            )
        except (urllib3.exceptions.HTTPError, OSError):
            return
