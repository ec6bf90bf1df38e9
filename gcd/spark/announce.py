"""A deleting Spark job holds ``{ns}/jobs/spark`` while it runs: a second one refuses,
and `gcd status` shows it (`l0gc.contract.spark_job`).

Design notes: docs/internals/spark.md, `gcd.spark.announce`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import structlog

from l0gc.contract.kv import KV, Compare, Put
from l0gc.contract.spark_job import SparkJob, spark_job_key
from l0gc.errors import L0gcError
from l0gc.etcd.session import LeaseSession

__all__ = ["DEFAULT_TTL_S", "JobRunning", "announced_job"]

log = structlog.get_logger("gcd.spark")

DEFAULT_TTL_S = 15


@dataclass(eq=False, repr=False)
class JobRunning(L0gcError):
    """Another Spark job holds the namespace (`key`): this one must not start."""

    other: str
    key: str

    def __str__(self) -> str:
        return (
            f"another Spark job is sweeping this namespace: {self.other}; wait for it to "
            "end (gcd status shows it), or stop it; its entry goes with its driver's lease "
            f"(one left without a lease stays: `etcdctl del {self.key}` once no job runs)"
        )


@contextlib.asynccontextmanager
async def announced_job(
    kv: KV,
    namespace: str,
    job: SparkJob,
    *,
    progress: Callable[[], SparkJob | None] = lambda: None,
    ttl_s: int = DEFAULT_TTL_S,
) -> AsyncIterator[None]:
    """Hold the namespace's Spark job key while the block runs (JobRunning when another
    job holds it); `progress()`, looked at every `ttl_s / 3` s in a worker thread, is the
    record as it should read now (None: unchanged). The key goes on exit (the lease is
    revoked); etcd failing meanwhile is logged, never raised: the job only deletes what
    M allows, whoever else runs."""
    key = spark_job_key(namespace)
    session = LeaseSession(kv, ttl_s)
    lease = await session.keep()
    taken = await kv.txn([Compare(key, 0)], [Put(key, job.encode(), lease)])
    if not taken.succeeded:
        await session.revoke()
        found = await kv.get(key)
        if found is None:  # gone since: its driver just ended; a retry is the caller's call
            raise JobRunning("one that ended just now; run the command again", key)
        try:
            raise JobRunning(SparkJob.decode(found.value).describe(), key)
        except ValueError as exc:
            raise JobRunning(f"an unreadable record at {key} ({exc})", key) from None
    log.info("spark.job_announced", key=key, job_id=job.job_id)
    written, leased, owned = [job], [lease], [True]

    async def read_progress() -> SparkJob:
        try:
            return await asyncio.to_thread(progress) or written[0]
        except Exception as exc:  # noqa: BLE001 - best effort: the lease must still be kept
            log.debug("spark.job_progress_unread", error=repr(exc)[:300])
            return written[0]

    async def refresh() -> None:
        try:
            held = await session.keep()
            now = await read_progress()
            if held != leased[0] or not owned[0]:  # the key went with a lease that ran out
                again = await kv.txn([Compare(key, 0)], [Put(key, now.encode(), held)])
                if owned[0] and not again.succeeded:
                    log.warning("spark.job_key_taken", key=key, detail="another job started")
                leased[0], written[0], owned[0] = held, now, again.succeeded
            elif now != written[0]:
                await kv.txn([], [Put(key, now.encode(), held)])
                written[0] = now
        except (L0gcError, OSError) as exc:
            log.warning("spark.job_announce_failed", error=str(exc))

    async with session.running(refresh, every_s=ttl_s / 3):
        yield
