"""Deleting one batch of keys reliably: pacing, retries, and per-key accounting.

A batch goes out as one DeleteObjects request (Quiet=false). What comes back is
sorted three ways: deleted keys are counted (with their bytes and epochs); per-key
failures with a transient code (InternalError, SlowDown, ServiceUnavailable...) are
sent again, alone, after a jittered backoff; permanent ones (AccessDenied...) are
counted as errors and logged. Keys the answer does not mention are sent again too
(deleting an absent key succeeds, so a retry is always safe). A failure of the whole
request is retried when its code is transient.

Every request first pays the token bucket (one token per key) and then takes an
in-flight slot from the AIMD limiter; throttled answers (SlowDown, 503), whole or per
key, cut the limiter. The limiter and bucket are shared by all deleter tasks, and
persist across the daemon's rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from gcd.errors import StorageError
from gcd.metrics import SweeperMetrics
from gcd.objectstore import ObjectStore
from gcd.ratelimit import AimdLimiter, TokenBucket
from gcd.report import RoundCounts
from gcd.retry import Retrier

__all__ = ["THROTTLE_CODES", "BatchDeleter", "Candidate"]

log = structlog.get_logger("gcd.deleter")

THROTTLE_CODES = frozenset(
    {"SlowDown", "503", "ServiceUnavailable", "Throttling", "ThrottlingException",
     "RequestLimitExceeded"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Candidate:
    """A key selected for deletion, with what the accounting needs."""

    key: str
    size: int
    epoch: int


class BatchDeleter:
    """Deletes batches through `store`, sharing one limiter and one token bucket."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        concurrency: int,
        retrier: Retrier,
        metrics: SweeperMetrics,
        stop: asyncio.Event,
        max_deletes_per_second: float | None = None,
        burst: int = 1000,
    ) -> None:
        self.store = store
        self.retrier = retrier
        self.metrics = metrics
        self.stop = stop
        self.limiter = AimdLimiter(concurrency)
        rate = max_deletes_per_second
        self.bucket = TokenBucket(rate, max(rate, burst)) if rate else None

    async def delete(self, batch: Sequence[Candidate], counts: RoundCounts) -> int | None:
        """Delete `batch`, updating `counts`; return the highest epoch deleted, if any."""
        by_key = {candidate.key: candidate for candidate in batch}
        pending = list(by_key)
        highest: int | None = None
        attempt = 0
        while pending:
            if attempt and self.stop.is_set():
                self._abandon(pending, counts)
                break
            if self.bucket is not None:
                await self.bucket.acquire(len(pending))
            slot = await self.limiter.acquire()
            counts.delete_requests += 1
            self.metrics.delete_requests.inc()
            failure: tuple[str, str] | None
            try:
                result = await self.store.delete_batch(pending)
            except StorageError as exc:
                await self.limiter.release(slot, throttled=exc.code in THROTTLE_CODES, ok=False)
                self.metrics.delete_error(exc.code)
                failure, retry_all = (exc.code, str(exc)), exc.retryable
            else:
                retry = [f for f in result.errors if f.retryable]
                throttled = any(f.code in THROTTLE_CODES for f in retry)
                await self.limiter.release(slot, throttled=throttled, ok=not retry)
                top = self._account(result.deleted, by_key, counts)
                if top is not None and (highest is None or top > highest):
                    highest = top
                for bad in result.errors:
                    self.metrics.delete_error(bad.code)
                    if not bad.retryable:
                        log.error("sweep.key_delete_failed", key=bad.key, code=bad.code,
                                  message=bad.message)  # fmt: skip
                        counts.errors += 1
                answered = set(result.deleted) | {f.key for f in result.errors}
                pending = [f.key for f in retry] + [k for k in pending if k not in answered]
                failure = (retry[0].code, retry[0].message) if retry else None
                retry_all = True
            if not pending:
                break
            if retry_all and self.stop.is_set():
                self._abandon(pending, counts)
                break
            if retry_all and self.retrier.can_retry(attempt):
                log.info("sweep.delete_retry", keys=len(pending), attempt=attempt,
                         code=failure[0] if failure else None)  # fmt: skip
                await self.retrier.wait(attempt)
                attempt += 1
                continue
            code, message = failure or ("Unknown", "the answer did not mention these keys")
            log.error("sweep.delete_failed", keys=len(pending), code=code, error=message,
                      first_key=pending[0])  # fmt: skip
            counts.errors += len(pending)
            break
        return highest

    @staticmethod
    def _abandon(pending: Sequence[str], counts: RoundCounts) -> None:
        # Shutting down: not an error, the next round lists these keys again.
        log.info("sweep.delete_abandoned", keys=len(pending))
        counts.abandoned += len(pending)

    def _account(
        self, deleted: Sequence[str], by_key: dict[str, Candidate], counts: RoundCounts
    ) -> int | None:
        count = size = 0
        highest: int | None = None
        for key in deleted:
            candidate = by_key.get(key)
            if candidate is None:
                continue
            count += 1
            size += candidate.size
            if highest is None or candidate.epoch > highest:
                highest = candidate.epoch
        counts.deleted += count
        counts.deleted_bytes += size
        self.metrics.deleted_objects.inc(count)
        self.metrics.deleted_bytes.inc(size)
        return highest
