"""One sweeper round: admit it, list the assigned prefixes, decide, delete in batches.

Design notes: docs/internals/sweep.md, `gcd.sweep.sweeper`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from gcd.observe.events import DeleteBasis, DeleteSink
from gcd.observe.hooks import hook_of
from gcd.observe.report import PlanWriter, RoundCounts, RoundResult, RoundSummary
from gcd.observe.telemetry import (
    DEFAULT_HOOK,
    SWEEPER_EVENTS,
    AdmissionShown,
    DefaultHook,
    ReferenceConflictFound,
    RoundFinished,
    RoundNotListed,
    UndoWindowSet,
)
from gcd.rules.admission import RoundAdmission, SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.cursor import directory_prefixes
from gcd.rules.layout import KeyLayout, listing_prefixes
from gcd.rules.listguard import DEFAULT_MAX_PAGES
from gcd.rules.references import MAX_CONFLICTS_SHOWN, Conflict, conflicts, pause_reason
from gcd.rules.undo import undo_rule
from gcd.rules.versions import VersionMode
from gcd.storage.objectstore import DetectingStore, ObjectStore, SoftDeleteStore, VersionedStore
from gcd.storage.retry import REQUEST_DEADLINE_S, Retrier
from gcd.sweep.brake import OPEN, Brake
from gcd.sweep.deleter import BatchDeleter
from gcd.sweep.findings import locked_report, store_report, undo_report
from gcd.sweep.listing import RoundLister
from gcd.sweep.nesting import NestedRoots
from gcd.sweep.pages import PageDecider
from gcd.sweep.roundstate import BatchQueue, RoundState
from gcd.sweep.safety import WatermarkSource, read_admission
from gcd.undo.window import KeyGroups, UndoKeeper
from l0gc.errors import ConfigError, L0gcError
from l0gc.events import Emitter, Hooks

if TYPE_CHECKING:
    from gcd.observe.metrics import SweeperMetrics

__all__ = ["RoundConfig", "Sweeper", "run_round", "split_prefixes"]

log = structlog.get_logger("gcd.sweeper")

ROUND_DEADLINE_S = 1800.0
"""Default `--round-deadline`: listing ends 30 min into a round, whatever the store does."""


@dataclass(frozen=True, slots=True)
class RoundConfig:
    """How a round lists and deletes (validated; the CLI maps flags onto it)."""

    layout: KeyLayout = field(default_factory=KeyLayout.default)
    grace_s: float = 600.0
    batch_size: int = 1000
    concurrency: int = 8
    list_concurrency: int = 4
    max_deletes_per_second: float | None = None
    max_deletes: int | None = None
    shard_index: int = 0
    shard_count: int = 1
    dry_run: bool = False
    page_size: int = 1000
    skip_ahead: bool = True  # False lists every key (the full-listing baseline)
    versions: VersionMode = VersionMode.RECLAIM
    unordered_listing: bool = False  # the store lists out of order: no skip, no StartAfter
    backoff: Backoff = field(default_factory=Backoff)
    round_deadline_s: float = ROUND_DEADLINE_S
    """Listing stops this long after the round started (`--round-deadline`)."""
    request_deadline_s: float = REQUEST_DEADLINE_S
    """Total time one LIST or DeleteObjects request may take, answer read in full."""
    max_pages_per_prefix: int = DEFAULT_MAX_PAGES
    undo_window_s: float = 0.0
    """`--undo-window`: deletions stay reversible this long (`gcd.rules.undo`); 0: final."""

    def __post_init__(self) -> None:
        checks = (
            (self.grace_s >= 0, f"grace {self.grace_s!r} s must be >= 0"),
            (1 <= self.batch_size <= 1000, f"batch size {self.batch_size!r} must be 1-1000"),
            (1 <= self.concurrency <= 1024, f"concurrency {self.concurrency!r} must be 1-1024"),
            (
                1 <= self.list_concurrency <= 256,
                f"list concurrency {self.list_concurrency!r} must be 1-256",
            ),
            (
                self.max_deletes_per_second is None or self.max_deletes_per_second > 0,
                f"max deletes per second {self.max_deletes_per_second!r} must be > 0",
            ),
            (
                self.max_deletes is None or self.max_deletes >= 1,
                f"max deletes {self.max_deletes!r} must be >= 1",
            ),
            (1 <= self.page_size <= 1000, f"page size {self.page_size!r} must be 1-1000"),
            (self.round_deadline_s > 0, f"round deadline {self.round_deadline_s!r} s must be > 0"),
            (
                self.request_deadline_s > 0,
                f"request deadline {self.request_deadline_s!r} s must be > 0",
            ),
            (self.undo_window_s >= 0, f"undo window {self.undo_window_s!r} s must be >= 0"),
            (
                self.max_pages_per_prefix >= 1,
                f"max pages per prefix {self.max_pages_per_prefix!r} must be >= 1",
            ),
        )
        for ok, problem in checks:
            if not ok:
                raise ConfigError(f"{problem}; fix the flag, env var or config key")
        self.prefixes()  # validates the shard against the layout

    def prefixes(self, *, unordered: bool = False) -> list[str]:
        """This shard's listing prefixes, split so listers can run concurrently.

        Splitting "{root}/" into "{root}/0" ... "{root}/9" means keys beside the
        000-999 directories (e.g. "{root}/README") are not listed, so not counted as
        unparsable; with `list_concurrency` 1 the root is listed whole.
        """
        base = listing_prefixes(self.layout, self.shard_index, self.shard_count)
        if unordered and self.layout.has_prefix:
            return directory_prefixes(base, self.layout.listing_root)
        if not self.layout.has_prefix:
            return base
        return split_prefixes(base, self.layout.listing_root, self.list_concurrency)


def split_prefixes(prefixes: list[str], root: str, want: int) -> list[str]:
    """Refine decimal listing prefixes into their ten children until there are `want`."""
    while len(prefixes) < want and all(len(p) - len(root) < 3 for p in prefixes):
        prefixes = [p + digit for p in prefixes for digit in "0123456789"]
    return prefixes


class Sweeper:
    """Runs rounds against one object store; keeps AIMD state between rounds.

    `hook` receives the engine's events (`gcd.observe.telemetry`); by default the hook of
    `metrics` (a fresh `SweeperMetrics` when not given), None for no hook at all (and no
    metrics unless given: `gcd.observe.hooks.hook_of`).
    """

    def __init__(
        self,
        store: ObjectStore,
        config: RoundConfig,
        *,
        metrics: SweeperMetrics | None = None,
        plan: PlanWriter | None = None,
        retrier: Retrier | None = None,
        stop: asyncio.Event | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        brake: Brake = OPEN,
        sinks: Sequence[DeleteSink] = (),
        undo: UndoKeeper | None = None,
        sweeper_id: str | None = None,
        hook: Hooks | DefaultHook = DEFAULT_HOOK,
    ) -> None:
        self.store = store
        self.undo = undo if config.undo_window_s > 0 else None
        self._said_suspended = False
        if self.undo is not None:
            sinks = (*sinks, self.undo.ledger)
        self._rounds = itertools.count(1)
        self.sweeper_id = sweeper_id
        self.config = config
        self.metrics, self.hook = hook_of(metrics, hook)
        """What `hook` feeds by default (None: no metrics; the sweeper itself only emits
        events), and where the events of this sweeper, its deleter and its daemon go."""
        self._emit = Emitter(self.hook, SWEEPER_EVENTS)
        self.plan = plan
        self.retrier = retrier if retrier is not None else Retrier(config.backoff)
        self.stop = stop if stop is not None else asyncio.Event()
        self.clock = clock
        self.monotonic = monotonic
        """Times the listing (how many listers pay, `gcd.rules.listgrowth`); a simulation
        passes its virtual clock, so a seed replays the same listers."""
        self.brake = brake
        self.deleter = BatchDeleter(
            store,
            concurrency=config.concurrency,
            retrier=self.retrier,
            metrics=self.metrics,
            stop=self.stop,
            max_deletes_per_second=config.max_deletes_per_second,
            burst=config.batch_size,
            brake=brake,
            sinks=sinks,
            request_deadline_s=config.request_deadline_s,
            hook=self.hook,
        )
        self._emit(UndoWindowSet(config.undo_window_s))
        self.current: RoundState | None = None
        """The round in progress, for progress displays."""
        self.after_round: Callable[[RoundSummary], Awaitable[None]] | None = None
        """Awaited with each admitted round's summary (`gcd.sweep.usage`); never raises."""
        self.last_summary: RoundSummary | None = None
        """The summary of the last round that ran (None before the first)."""

    @property
    def counts(self) -> RoundCounts | None:
        """Live counters of the round in progress (None between rounds)."""
        return self.current.counts if self.current is not None else None

    async def sweep(
        self,
        safe_epoch: int,
        cluster_epoch: int | None,
        *,
        basis: DeleteBasis | None = None,
        ceiling: int | None = None,
    ) -> RoundResult:
        """List and delete everything at or below `safe_epoch`; never raises StorageError.

        `basis` is the admission behind `safe_epoch` (etcd revision, pinning partitions),
        handed to the deleter's sinks with every request. With an undo window, `ceiling`
        is the delayed M a store without versions deletes up to (None: no history yet).
        """
        started = time.monotonic()
        round_id = f"{self.sweeper_id or 'sweeper'}.{next(self._rounds)}"
        basis = basis or DeleteBasis(safe_epoch, cluster_epoch, None)
        found = conflicts(basis.references, self.config.layout, safe_epoch)
        if found:
            return await self._conflicted(found, safe_epoch, cluster_epoch, round_id)
        run = RoundState(safe_epoch, dataclasses.replace(basis, round_id=round_id))
        await self._detect(run)
        self._undo_rule(run, ceiling)
        queue: BatchQueue = asyncio.Queue(self.config.concurrency * 2)
        decider = PageDecider(
            run, queue, self.config, clock=self.clock, plan=self.plan, emit=self._emit
        )
        lister = RoundLister(
            run,
            queue,
            self.store,
            self.config,
            decider,
            retrier=self.retrier,
            stop=self.stop,
            brake=self.brake,
            emit=self._emit,
            monotonic=self.monotonic,
        )
        ordered = not run.unordered
        run.nested = NestedRoots(
            self.config.layout.root, lister.exists if ordered else lister.stored, ordered=ordered
        )
        self.current = run
        self.brake.reset()
        log.info(
            "sweep.round_started",
            safe_epoch=safe_epoch,
            cluster_epoch=cluster_epoch,
            dry_run=self.config.dry_run,
            prefixes=len(run.prefixes),
            versioned=run.versioned,
            skip_ahead=run.skip_ahead,
        )
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self.config.concurrency):
                    group.create_task(self._delete_worker(queue, run))
                group.create_task(lister.produce())
        except BaseExceptionGroup as failed:
            raise _first(failed) from None
        finally:
            self.current = None
        counts = run.counts
        braked = self.brake.engaged
        reasons, earliest = await locked_report(self.store, counts)
        undo = (
            None if self.undo is None else undo_report(run, self.config.undo_window_s, self._emit)
        )
        summary = RoundSummary(
            safe_epoch=safe_epoch,
            cluster_epoch=cluster_epoch,
            dry_run=self.config.dry_run,
            duration_s=round(time.monotonic() - started, 3),
            blocked_reason=braked,
            locked_reasons=reasons,
            locked_earliest_retain_until=earliest,
            store=store_report(self.store, run, unordered_listing=self.config.unordered_listing),
            nested_roots=tuple(sorted(run.nested.found)),
            deadline_exceeded=run.deadline_hit,
            round=round_id,
            undo=undo,
            **counts.summary_fields(),
        )
        complete = not (
            run.capped
            or run.incomplete
            or counts.errors
            or counts.abandoned
            or self.stop.is_set()
            or braked
        )
        self._record(summary, run.max_deleted_epoch)
        if self.after_round is not None:
            await self.after_round(summary)
        return RoundResult(summary, run.young_ready_at_s, complete, run.max_deleted_epoch)

    async def _conflicted(
        self, found: list[Conflict], safe_epoch: int, cluster_epoch: int | None, round_id: str
    ) -> RoundResult:
        """M is past a key a partition still references: pause GC (here and, through the
        fleet brake, everywhere) before listing anything; the round deletes nothing. A
        dry run changes nothing, the pause key included: it reports the conflict."""
        for conflict in found:
            ref = conflict.reference
            self._emit(
                ReferenceConflictFound(
                    ref.partition, ref.offset, ref.key, conflict.epoch, safe_epoch
                )
            )
            log.error("sweep.reference_conflict", **conflict.fields(safe_epoch))
        reason = pause_reason(found[0], len(found), safe_epoch)
        if not self.config.dry_run:
            self.brake.reset()
            await self.brake.pause(reason)
        summary = RoundSummary(
            safe_epoch=None,
            cluster_epoch=cluster_epoch,
            dry_run=self.config.dry_run,
            blocked_reason=reason if self.config.dry_run else f"paused: {reason}",
            round=round_id,
            reference_conflicts=len(found),
            conflicting_keys=tuple(c.reference.key for c in found[:MAX_CONFLICTS_SHOWN]),
        )
        self._emit(AdmissionShown(None, cluster_epoch, blocked=False, paused=True))
        self._emit(RoundNotListed(summary.outcome))
        self.last_summary = summary
        return RoundResult(summary, complete=False)

    async def _detect(self, run: RoundState) -> None:
        """What the store is, for this round: versioned, locked, listing in order."""
        config = self.config
        features = await self.store.detect() if isinstance(self.store, DetectingStore) else None
        unordered = config.unordered_listing or (
            features is not None and not features.ordered_listing
        )
        run.features = features
        run.versioned = (
            features is not None
            and features.versioned
            and config.versions is VersionMode.RECLAIM
            and isinstance(self.store, VersionedStore)
        )
        run.unordered = unordered
        run.skip_ahead = config.skip_ahead and not unordered
        run.prefixes = config.prefixes(unordered=unordered)
        self.deleter.object_lock = bool(features is not None and features.object_lock)
        if self.undo is not None and isinstance(self.store, SoftDeleteStore):
            run.soft_delete_s = await self.undo.retention(self.store)

    def _undo_rule(self, run: RoundState, ceiling: int | None) -> None:
        """Which undo rule this round follows (`gcd.rules.undo`), now the store is known.

        Suspended versioning gets the delayed M: there a delete without a version id
        writes a marker with version id "null" that *replaces* the key's "null" data
        version, so a hide (or a markers-only delete) would lose its bytes at once
        (issue 51). Such a bucket is swept as a plain one is: only what has been garbage
        for the whole window, its versions deleted by id when versions are reclaimed."""
        if self.undo is None or self.config.dry_run:
            return
        versioning = None if run.features is None else run.features.versioning
        if versioning == "Suspended" and not self._said_suspended:
            self._said_suspended = True
            log.warning(
                "undo.versioning_suspended",
                rule="delayed-m",
                window_s=self.config.undo_window_s,
                fix="the bucket's versioning is Suspended: hiding would overwrite "
                "'null' data versions, so only keys garbage for the whole undo "
                "window are deleted (the M of one window ago); enable "
                "versioning to hide and reclaim instead",
            )
        run.undo_rule = undo_rule(
            versioning=versioning,
            versions_listed=run.versioned,
            soft_delete_covers=self.undo.covered(run.soft_delete_s),
        )
        if run.undo_rule == "hide-then-reclaim":
            run.groups = KeyGroups(self.undo)
        if run.undo_rule != "delayed-m":
            return  # markers-only: every delete is a marker, kept; store-soft-delete: undeletes
        run.ceiling = -1 if ceiling is None else min(ceiling, run.safe_epoch)
        if ceiling is None:
            log.warning(
                "undo.no_history",
                window_s=self.config.undo_window_s,
                fix="M's history in etcd does not reach back one window yet: "
                "nothing is deleted until it does",
            )

    def _record(self, summary: RoundSummary, max_deleted_epoch: int | None) -> None:
        self.last_summary = summary
        # A success: no error, and M stayed in force (a round the brake stopped: it did not)
        succeeded = not summary.errors and summary.blocked_reason is None
        self._emit(RoundFinished(summary, max_deleted_epoch, self.clock() if succeeded else None))
        log.info("sweep.round_finished", outcome=summary.outcome, **summary.to_dict())

    def blocked(self, admission: RoundAdmission) -> RoundResult:
        """Report a round that may delete nothing (paused, undefined M, regression...)."""
        summary = RoundSummary(
            safe_epoch=None,
            cluster_epoch=admission.cluster_epoch,
            dry_run=self.config.dry_run,
            blocked_reason=admission.blocked_reason,
        )
        self._emit(
            AdmissionShown(
                None, admission.cluster_epoch, blocked=not admission.paused, paused=admission.paused
            )
        )
        self._emit(RoundNotListed(summary.outcome))
        if not admission.paused:  # its announcement says why (`gcd status`, the fleet)
            self.last_summary = summary
        event = "sweep.round_paused" if admission.paused else "sweep.round_blocked"
        log.warning(
            event,
            reason=admission.blocked_reason,
            regression=admission.regression,
            cluster_epoch=admission.cluster_epoch,
        )
        return RoundResult(summary, complete=False)

    async def _delete_worker(self, queue: BatchQueue, run: RoundState) -> None:
        while True:
            run.waiting_deleters += 1
            try:
                batch = await queue.get()
            finally:
                run.waiting_deleters -= 1
            if batch is None:
                return
            if self.stop.is_set():
                run.incomplete = True  # dropped: the next round lists these keys again
                continue
            top = await self.deleter.delete(batch, run.counts, run.basis)
            if top is not None and (run.max_deleted_epoch is None or top > run.max_deleted_epoch):
                run.max_deleted_epoch = top


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


async def run_round(
    sweeper: Sweeper,
    gate: SafetyGate,
    source: WatermarkSource | None,
    *,
    override: int | None = None,
) -> RoundResult:
    """One full round: read M, check it, then list and delete (or report why not)."""
    admission = await read_admission(gate, source, override=override)
    if not admission.allowed:
        return sweeper.blocked(admission)
    assert admission.safe_epoch is not None
    basis = DeleteBasis.of(admission, override=override is not None)
    ceiling = None
    if sweeper.undo is not None:
        try:
            ceiling = await sweeper.undo.ceiling(admission.safe_epoch)
        except (L0gcError, OSError) as exc:  # fail closed: no history, no deletion
            log.warning("undo.history_unreadable", error=str(exc))
            return sweeper.blocked(
                RoundAdmission(
                    None, admission.cluster_epoch, f"M history unreadable (undo window): {exc}"
                )
            )
    return await sweeper.sweep(
        admission.safe_epoch, admission.cluster_epoch, basis=basis, ceiling=ceiling
    )
