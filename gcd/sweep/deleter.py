"""Deleting one batch of keys reliably: pacing, retries, the brake, poison keys, accounting.

Design notes: docs/internals/sweep.md, `gcd.sweep.deleter`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import structlog

from gcd.observe.events import (
    BatchAttempt,
    BatchOutcome,
    DeleteBasis,
    DeleteSink,
    DeletionNotRecorded,
    emit_after,
    emit_before,
)
from gcd.observe.hooks import hook_of
from gcd.observe.report import RoundCounts
from gcd.observe.telemetry import (
    DEFAULT_HOOK,
    DELETE_SENT,
    DELETER_EVENTS,
    UNSAFE_KEY_KEPT,
    VERSION_LOCKED,
    DefaultHook,
    DeleteFailed,
    DeletesBraked,
    ObjectsDeleted,
)
from gcd.rules.candidate import Candidate
from gcd.rules.triage import (
    KEY_FAULT_CODES,
    THROTTLE_CODES,
    RequestFailure,
    Triage,
    request_failure,
    triage,
)
from gcd.rules.versions import split_target
from gcd.rules.xmlkeys import xml_unsafe_reason
from gcd.storage.objectstore import DeleteResult, KeyFailure, ObjectStore
from gcd.storage.ratelimit import AimdLimiter, TokenBucket
from gcd.storage.retry import Retrier, deadline
from gcd.sweep.brake import OPEN, Brake
from l0gc.errors import StorageError
from l0gc.events import Emitter, Hooks

if TYPE_CHECKING:
    from gcd.observe.metrics import SweeperMetrics

__all__ = ["MAX_BISECT_REQUESTS", "MAX_POISON_NAMED", "MAX_UNPROVEN", "BatchDeleter"]

log = structlog.get_logger("gcd.deleter")

MAX_UNPROVEN: Final = 4
"""Single keys failing alone, with no request of the batch answered, before giving up."""
MAX_BISECT_REQUESTS: Final = 64
"""Extra requests bisection may send for one batch (two per split)."""
MAX_POISON_NAMED: Final = 100
"""Poison keys a round names in its report (the rest only counted)."""
MAX_REMEMBERED: Final = 10_000
LOCKED_CODES: Final = frozenset({"AccessDenied"})
"""Per-version codes that mean "locked" on a bucket with Object Lock."""
MAX_LOCKED_NOTED: Final = 1_000
"""Locked versions remembered per round for the round's report (the rest only counted)."""


@dataclass(slots=True)
class _Part:
    """Keys that go out in one request: a batch, a retry of some of it, or a half."""

    keys: list[str]
    attempt: int = 0


@dataclass(slots=True)
class _Batch:
    """One `delete` call: its candidates and what its requests found out."""

    by_key: dict[str, Candidate]
    counts: RoundCounts
    stack: list[_Part] = field(default_factory=list)
    highest: int | None = None
    answered: bool = False
    """True once a request of this batch got an answer: the request path works."""
    suspects: list[tuple[str, str, str]] = field(default_factory=list)
    """(key, code, message) of single keys whose request failed as a whole."""
    sent: int = 0
    halves: int = 0
    """Requests added by bisection (bounded by `MAX_BISECT_REQUESTS`)."""
    basis: DeleteBasis | None = None
    """The admission the round deletes under (for the sinks)."""
    number: int = 0
    plain: bool = False
    """Every candidate a current key, hiding nothing: no version, marker, hidden version,
    generation or reclaim (the common batch; its requests and answers are handled a
    request at a time, not a key at a time)."""

    def remaining(self) -> list[str]:
        """Every key still waiting in the stack (which is emptied)."""
        keys = [key for part in self.stack for key in part.keys]
        self.stack.clear()
        return keys


class BatchDeleter:
    """Deletes batches through `store`, sharing one limiter and one token bucket."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        concurrency: int,
        retrier: Retrier,
        metrics: SweeperMetrics | None = None,
        stop: asyncio.Event,
        max_deletes_per_second: float | None = None,
        burst: int = 1000,
        brake: Brake = OPEN,
        sinks: Sequence[DeleteSink] = (),
        request_deadline_s: float = 120.0,
        hook: Hooks | DefaultHook = DEFAULT_HOOK,
    ) -> None:
        self.store = store
        self.request_deadline_s = request_deadline_s
        self.sinks = tuple(sinks)
        self._batch_numbers = itertools.count(1)
        self._request_numbers = itertools.count(1)
        self.retrier = retrier
        self.metrics, hooks = hook_of(metrics, hook)
        """The metrics `hook` feeds by default (the deleter itself only emits events)."""
        self._emit = Emitter(hooks, DELETER_EVENTS)
        self.stop = stop
        self.brake = brake
        self.limiter = AimdLimiter(concurrency)
        rate = max_deletes_per_second
        self.bucket = TokenBucket(rate, max(rate, burst)) if rate else None
        self.object_lock = False
        """True when the bucket has Object Lock (the sweeper sets it every round)."""
        self.poison: dict[str, str] = {}
        """Keys found poison by bisection (key -> code); never sent again by this process."""
        self._reported: set[str] = set()

    async def delete(
        self, batch: Sequence[Candidate], counts: RoundCounts, basis: DeleteBasis | None = None
    ) -> int | None:
        """Delete `batch` under `basis`, updating `counts`; return the highest epoch deleted."""
        run = _Batch(
            {candidate.target: candidate for candidate in batch},
            counts,
            basis=basis,
            number=next(self._batch_numbers),
            plain=not any(
                c.version_id is not None or c.marker or c.hides or c.reclaim or c.generation
                for c in batch
            ),
        )
        if run.plain and not self.poison and xml_unsafe_reason("\n".join(run.by_key)) is None:
            sendable = list(run.by_key)  # nothing to screen: one look at the whole batch
        else:
            sendable = [
                target
                for target, candidate in run.by_key.items()
                if not self._screened(target, candidate.key, counts)
            ]
        if sendable:
            run.stack.append(_Part(sendable))
        while run.stack:
            part = run.stack.pop()
            if run.sent and self.stop.is_set():
                self._abandon([*part.keys, *run.remaining()], counts)
                break
            if not await self._send(part, run):
                break
            if run.suspects and not run.answered and len(run.suspects) >= MAX_UNPROVEN:
                self._give_up(run)
        self._settle_suspects(run)
        return run.highest

    def _screened(self, target: str, key: str, counts: RoundCounts) -> bool:
        """True (and counted) for a key that must not be sent: XML-unsafe (NUL included,
        so a key never reads as a version target) or known poison."""
        why = xml_unsafe_reason(key)
        if why is None and target in self.poison:
            self._poison(target, self.poison[target], counts)
            return True
        if why is None:
            return False
        self._unsafe(key, why, counts)
        return True

    def _poison(self, target: str, code: str, counts: RoundCounts) -> None:
        """A poison key kept: counted as unsafe, named once per round."""
        why = f"a DeleteObjects request with it alone failed with {code}"
        if target not in counts.poison_keys and len(counts.poison_keys) < MAX_POISON_NAMED:
            counts.poison_keys.append(target)
            log.warning("sweep.poison_key", key=target, code=code, kept=True)
        self._unsafe(split_target(target)[0], why, counts)

    def _unsafe(self, key: str, why: str, counts: RoundCounts) -> None:
        counts.unsafe_keys += 1
        self._emit(UNSAFE_KEY_KEPT)
        if key not in self._reported:
            if len(self._reported) < MAX_REMEMBERED:
                self._reported.add(key)
            log.warning("sweep.unsafe_key", key=key, reason=why, kept=True)

    async def _send(self, part: _Part, run: _Batch) -> bool:
        """One DeleteObjects request for `part`; False when the brake stopped the batch."""
        if self.brake.engaged is not None:
            self._braked([*part.keys, *run.remaining()], run.counts)
            return False
        if self.bucket is not None:
            await self.bucket.acquire(len(part.keys))
        slot = await self.limiter.acquire()
        if await self.brake.check() is not None:
            await self.limiter.release(slot, ok=False)
            self._braked([*part.keys, *run.remaining()], run.counts)
            return False
        by_key = run.by_key
        if run.plain:  # targets are keys: nothing to split, no version, nothing hidden
            named: list[tuple[str, str | None]] = []  # read only when versions are named
            versions: tuple[str | None, ...] = ()
            keys = tuple(part.keys)
            hides: tuple[tuple[str, ...], ...] = ()
        else:
            named = [split_target(target) for target in part.keys]  # the only split per key
            versions = tuple(version for _, version in named)
            if not any(versions):
                versions = ()
            keys = tuple(key for key, _ in named)
            hides = _hides(by_key[key] for key in part.keys)
        attempt = BatchAttempt(
            run.basis,
            keys,
            tuple(by_key[key].epoch for key in part.keys),
            part.attempt,
            run.number,
            next(self._request_numbers),
            versions,
            hides,
        )
        try:
            emit_before(self.sinks, attempt)
        except DeletionNotRecorded as exc:
            await self.limiter.release(slot, ok=False)
            self._failed([*part.keys, *run.remaining()], "NotRecorded", str(exc), run.counts)
            return False
        run.sent += 1
        run.counts.delete_requests += 1
        self._emit(DELETE_SENT)
        try:
            async with deadline(self.request_deadline_s, "DeleteObjects"):
                whole = await self.store.delete_batch(part.keys)
            result = _sent_only(whole, part.keys)
        except StorageError as exc:
            emit_after(self.sinks, BatchOutcome(attempt, request_error=exc.code))
            await self.limiter.release(slot, throttled=exc.code in THROTTLE_CODES, ok=False)
            self._emit(DeleteFailed(exc.code))
            await self._failed_whole(part, exc, run)
            return True
        # Each target was split once above; `_sent_only` keeps only targets sent.
        if versions:
            split = dict(zip(part.keys, named, strict=True))
            gone = [split[target] for target in result.deleted]
            gone_keys = tuple(key for key, _ in gone)
            gone_versions = tuple(version for _, version in gone)
            failed = tuple((split[failure.key][0], failure.code) for failure in result.errors)
        else:
            gone_keys, gone_versions = result.deleted, ()
            failed = tuple((failure.key, failure.code) for failure in result.errors)
        emit_after(
            self.sinks,
            BatchOutcome(
                attempt,
                gone_keys,
                failed,
                deleted_version_ids=gone_versions if any(gone_versions) else (),
                markers=result.markers,
            ),
        )
        answer = triage(part.keys, result.deleted, result.errors)
        retry = answer.retry_failures
        throttled = any(f.code in THROTTLE_CODES for f in retry)
        await self.limiter.release(slot, throttled=throttled, ok=not retry)
        run.answered = True
        await self._answered(part, result, answer, run)
        return True

    async def _failed_whole(self, part: _Part, exc: StorageError, run: _Batch) -> None:
        """The whole request failed: retry, bisect, suspect the one key, or count errors."""
        action = request_failure(
            exc.code,
            exc.retryable,
            len(part.keys),
            retries_left=self.retrier.can_retry(part.attempt),
        )
        if action is RequestFailure.RETRY:
            await self._retry(part.keys, part.attempt, exc.code, str(exc), run)
        elif action is RequestFailure.SPLIT and run.halves + 2 > MAX_BISECT_REQUESTS:
            log.error(
                "sweep.delete_bisect_abandoned",
                keys=len(part.keys),
                code=exc.code,
                extra_requests=run.halves,
            )
            self._failed([*part.keys, *run.remaining()], exc.code, str(exc), run.counts)
        elif action is RequestFailure.SPLIT:
            middle = len(part.keys) // 2
            run.halves += 2
            log.info("sweep.delete_bisect", keys=len(part.keys), code=exc.code)
            run.stack += [
                _Part(part.keys[middle:], part.attempt),
                _Part(part.keys[:middle], part.attempt),
            ]
        elif action is RequestFailure.SUSPECT:
            run.suspects.append((part.keys[0], exc.code, str(exc)))
        else:
            self._failed(part.keys, exc.code, str(exc), run.counts)

    async def _answered(
        self, part: _Part, result: DeleteResult, answer: Triage[KeyFailure], run: _Batch
    ) -> None:
        """Account a triaged answer; send again what failed transiently or was not mentioned."""
        marked = {key for key, _ in result.markers}
        account = self._account_plain if run.plain else self._account
        top = account(answer.deleted, run.by_key, run.counts, marked)
        if top is not None and (run.highest is None or top > run.highest):
            run.highest = top
        for bad in result.errors:
            self._emit(DeleteFailed(bad.code))
        for bad in answer.failed:
            if self.object_lock and bad.code in LOCKED_CODES and split_target(bad.key)[1]:
                self._locked(bad.key, run.counts)
                continue
            log.error("sweep.key_delete_failed", key=bad.key, code=bad.code, message=bad.message)
            run.counts.errors += 1
        if answer.retry:
            retry = answer.retry_failures
            code, message = (
                (retry[0].code, retry[0].message)
                if retry
                else ("Unknown", "the answer did not mention these keys")
            )
            await self._retry(list(answer.retry), part.attempt, code, message, run)

    async def _retry(
        self, keys: list[str], attempt: int, code: str, message: str, run: _Batch
    ) -> None:
        """Queue `keys` again after a backoff, or give up on them (stop, attempts spent)."""
        if self.stop.is_set():
            self._abandon(keys, run.counts)
        elif self.retrier.can_retry(attempt):
            log.info("sweep.delete_retry", keys=len(keys), attempt=attempt, code=code)
            await self.retrier.wait(attempt)
            run.stack.append(_Part(keys, attempt + 1))
        else:
            self._failed(keys, code, message, run.counts)

    def _give_up(self, run: _Batch) -> None:
        """Halves keep failing whole and nothing was answered: not the keys' fault."""
        code, message = run.suspects[0][1], run.suspects[0][2]
        keys = [key for key, _, _ in run.suspects] + run.remaining()
        run.suspects.clear()
        log.error(
            "sweep.delete_bisect_abandoned",
            keys=len(keys),
            code=code,
            single_key_failures=MAX_UNPROVEN,
        )
        self._failed(keys, code, message, run.counts)

    def _settle_suspects(self, run: _Batch) -> None:
        """Single keys that failed alone: poison if the batch proved the path works."""
        if not run.suspects:
            return
        if not run.answered:
            code, message = run.suspects[0][1], run.suspects[0][2]
            self._failed([key for key, _, _ in run.suspects], code, message, run.counts)
            return
        for key, code, message in run.suspects:
            # A 500 alone may be a storm that happened to hit this key's request, not the
            # key: remembering it would keep the key forever. Only a refusal the key
            # causes (SPLIT_CODES) is remembered; a 500 key is bisected out again next round.
            if len(self.poison) < MAX_REMEMBERED and code not in KEY_FAULT_CODES:
                self.poison[key] = code
            log.info("sweep.poison_key_answer", key=key, code=code, message=message)
            self._poison(key, code, run.counts)

    def _locked(self, target: str, counts: RoundCounts) -> None:
        """A version Object Lock keeps: counted, noted for the round's report, kept."""
        counts.locked += 1
        self._emit(VERSION_LOCKED)
        if len(counts.locked_targets) < MAX_LOCKED_NOTED:
            counts.locked_targets.append(target)

    def _failed(self, keys: Sequence[str], code: str, message: str, counts: RoundCounts) -> None:
        log.error(
            "sweep.delete_failed", keys=len(keys), code=code, error=message, first_key=keys[0]
        )
        counts.errors += len(keys)

    def _braked(self, keys: Sequence[str], counts: RoundCounts) -> None:
        # Not an error: the round ends; keys wait for the round after the pause.
        if keys:
            log.info("sweep.delete_skipped", keys=len(keys), reason=self.brake.engaged)
            counts.skipped_paused += len(keys)
            self._emit(DeletesBraked(len(keys)))

    @staticmethod
    def _abandon(pending: Sequence[str], counts: RoundCounts) -> None:
        # Shutting down: not an error, the next round lists these keys again.
        if pending:
            log.info("sweep.delete_abandoned", keys=len(pending))
            counts.abandoned += len(pending)

    def _account_plain(
        self,
        deleted: Sequence[str],
        by_key: dict[str, Candidate],
        counts: RoundCounts,
        _marked: set[str],
    ) -> int | None:
        """`_account` for a plain batch (`_Batch.plain`): its candidates' sizes and
        epochs, a request at a time."""
        gone = [candidate for key in deleted if (candidate := by_key.get(key)) is not None]
        size = sum(candidate.size for candidate in gone)
        counts.deleted += len(gone)
        counts.deleted_bytes += size
        self._emit(ObjectsDeleted(len(gone), size, 0, 0, 0, 0))
        return max((candidate.epoch for candidate in gone), default=None)

    def _account(
        self,
        deleted: Sequence[str],
        by_key: dict[str, Candidate],
        counts: RoundCounts,
        marked: set[str],
    ) -> int | None:
        count = size = versions = markers = hidden = reclaimed = 0
        highest: int | None = None
        for key in deleted:
            candidate = by_key.get(key)
            if candidate is None:
                continue
            count += 1
            if not candidate.hides:
                size += candidate.size
            elif key in marked:
                hidden += 1  # a delete marker written: no byte freed
            else:  # the store wrote no marker: the key may be gone for good (issue 51)
                log.error(
                    "undo.hide_without_marker",
                    key=key,
                    hides=candidate.hides,
                    fix="the store answered a hide without a delete marker version: "
                    "check the bucket's versioning; the key may not be "
                    "restorable",
                )
            reclaimed += candidate.reclaim
            if candidate.marker:
                markers += 1
            elif candidate.version_id is not None:
                versions += 1
            if highest is None or candidate.epoch > highest:
                highest = candidate.epoch
        counts.deleted += count
        counts.deleted_bytes += size
        counts.deleted_versions += versions
        counts.deleted_markers += markers
        counts.markers_written += hidden
        counts.versions_reclaimed += reclaimed
        self._emit(ObjectsDeleted(count, size, versions, markers, hidden, reclaimed))
        return highest


def _sent_only(result: DeleteResult, sent: Sequence[str]) -> DeleteResult:
    """`result` without the entries naming keys that were not sent (logged): a store
    that answers so is broken, and such a key is neither deleted nor failed here."""
    asked = set(sent)
    stray = [key for key in result.deleted if key not in asked]
    stray += [failure.key for failure in result.errors if failure.key not in asked]
    if not stray:
        return result
    log.error("sweep.unsent_keys_in_answer", keys=len(stray), first_key=stray[0], recorded=False)
    return DeleteResult(
        tuple(key for key in result.deleted if key in asked),
        tuple(f for f in result.errors if f.key in asked),
        tuple(m for m in result.markers if m[0] in asked),
    )


def _hides(candidates: Iterable[Candidate]) -> tuple[tuple[str, ...], ...]:
    """Each candidate's hidden versions, in order; () when no candidate hides any."""
    hides = tuple(
        candidate.hides or ((candidate.generation,) if candidate.generation else ())
        for candidate in candidates
    )
    return hides if any(hides) else ()
