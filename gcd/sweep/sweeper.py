"""One sweeper round: list the assigned prefixes, decide, delete in batches.

Theory of operation
-------------------
`run_round` first admits the round (`gcd.sweep.safety.read_admission`: one etcd read,
then the rule `gcd.rules.admission.admit`) to the safe epoch M it may use, or learns
the reason it may not: paused, M undefined, M above the cluster epoch, or M below one
this process already used (a regression means etcd went backwards, so we alert and
delete nothing).

`Sweeper.sweep(M)` then streams: lister tasks (at most `list_concurrency` at a time)
page through their listing prefixes in key order (on an ordered listing of keys that may
skip, a lister that would idle takes over the back half of another's range:
`gcd.rules.listsplit`) and feed every object to
`gcd.rules.decision.decide`. Deletable keys are cut into batches of `batch_size` that go
through a bounded queue to `concurrency` deleter tasks, so memory stays bounded by
the queue however big the bucket is, and listers wait when deleters fall behind.

LIST cost follows the garbage: in a padded layout with prefixes, keys of one 3-digit
prefix sort by epoch, so the first key of prefix p with an epoch above M means no
later key of p is deletable, and the lister skips to the next prefix directory, or
ends when none is left under its listing prefix. Where the next LIST starts is the
rule `gcd.rules.cursor` (`skip`, `next_cursor`), shared with Spark's listing; the
sweeper's `skip_ahead` switch (off: `gcd sweep --full-listing`) only says whether to
ask it. Unpadded layouts list everything: correct, slower. Where the listing may skip, the page
that starts a directory asks for few keys, and pages grow while every key is eligible
(`gcd.rules.cursor.next_page_size`), so a skip does not make the server read and send
the live keys it skips. Versioned and unordered listings ask for full pages and are
never shared; a prefix narrowed after failures (`_unlistable`) is listed in pieces that
keep its range's end and are not shared either.

LIST latency is hidden by looking one page ahead: as soon as a page arrives, its lister
guesses from the page's last key alone where the next page starts, sends that LIST, and
only then decides the page's objects. The guess is exact for keys the layout produces: a
page ends in a skip exactly when its last key is above M (keys of a prefix sort by
epoch), at that key's skip point; otherwise the listing goes on at the continuation
token: the same two rules, applied to the last key alone. Deciding the page gives the
true next start; when it differs from the guess (a key the layout does not produce ends
a page after a live key) or the listing ends (stop, delete cap, nothing left), the
request sent ahead is cancelled and its page dropped unseen. So each lister has at most
one LIST in flight and two pages in memory, examines exactly the pages it would without
looking ahead, in the same order, and LIST counters count every request sent, the
discarded ones included.

Deleters pace themselves with a token bucket (deletes per second) and an AIMD limit on
requests in flight that halves on SlowDown/503; whole-request failures and transient
per-key failures are retried with jittered backoff (`gcd.rules.backoff`, through the one
retry loop `gcd.storage.retry`, which also retries LISTs), permanent per-key failures
(AccessDenied...) are counted and reported (`gcd.rules.triage`), poison keys are
isolated by bisection and kept (`gcd.sweep.deleter`). A stop event (SIGTERM) ends
listing at the next page (a LIST sent ahead is cancelled) and drops queued batches;
delete requests in flight complete.

Stores differ (docs/stores.md). Each round first asks a store that can tell
(`DetectingStore.detect`) what it is: on a versioned or suspended bucket with
`versions` RECLAIM (the default), listers page through ListObjectVersions instead, with
the same skip-ahead, and every version and delete marker of a key is decided by the
key's epoch (`gcd.rules.versions`): eligible keys lose every version, live keys keep
every version. On a bucket with Object Lock, versions the store refuses to delete are
kept and counted as `locked`, and reported once at the end of the round: how many for
which reason, and the earliest retain-until, found by asking the store about at most
`LOCK_PROBES` of them. A store whose listings are unordered (or `unordered_listing`) is
listed without skip-ahead and without StartAfter, under prefixes ending in "/"
(`gcd.rules.cursor.directory_prefixes`). What was detected is the summary's `store`.

The brake (`gcd.sweep.brake`) is asked before every DeleteObjects request. Once it says stop
(a pause seen mid-round, or the pause key unreadable), listing ends at the next page as
for a stop event, no further request is sent, every selected key not deleted is counted
as `skipped_paused`, and the round reports why in `blocked_reason` (outcome "paused" or
"blocked"): a pause takes effect within one DeleteObjects batch per deleter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias

import structlog

from gcd.errors import StorageError
from gcd.rules.admission import RoundAdmission, SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.cursor import (
    Cursor,
    Skip,
    can_skip,
    directory_prefixes,
    first_page_size,
    next_cursor,
    next_page_size,
    skip,
)
from gcd.rules.decision import Verdict, decide
from gcd.rules.layout import KeyLayout, listing_prefixes
from gcd.rules.listguard import DEFAULT_MAX_PAGES, ListingGuard
from gcd.rules.listsplit import ListRange, split_range
from gcd.rules.versions import VersionMode, split_target
from gcd.storage.objectstore import (
    DetectingStore,
    ListPage,
    ObjectInfo,
    ObjectStore,
    SoftDeleteStore,
    StoreFeatures,
    VersionedStore,
)
from gcd.storage.retry import Retrier, deadline
from gcd.sweep.binding import CLAIM_MAX_BYTES
from gcd.sweep.brake import OPEN, Brake
from gcd.sweep.deleter import BatchDeleter, Candidate
from gcd.sweep.events import DeleteBasis, DeleteSink
from gcd.sweep.metrics import SweeperMetrics
from gcd.sweep.nesting import NestedRoots
from gcd.sweep.report import PlanWriter, RoundCounts, RoundResult, RoundSummary, iso_utc
from gcd.sweep.safety import WatermarkSource, read_admission
from gcd.sweep.undo import KeyGroups, UndoKeeper
from watermark.core.binding import claim_key
from watermark.errors import ConfigError, L0gcError

__all__ = ["RoundConfig", "Sweeper", "run_round", "split_prefixes"]

log = structlog.get_logger("gcd.sweeper")

_LOGGED_UNPARSABLE = 10  # per round; the rest are only counted
ROUND_DEADLINE_S = 1800.0
"""Default `--round-deadline`: listing ends 30 min into a round, whatever the store does."""
REQUEST_DEADLINE_S = 120.0
"""Default `--request-deadline`: a request's whole answer within 2 min (twice the read
timeout, which a store dripping one byte at a time restarts with every byte)."""
LOCK_PROBES = 20
"""Locked versions per round whose reason and retain-until are asked (one HEAD each)."""


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
            (1 <= self.list_concurrency <= 256,
             f"list concurrency {self.list_concurrency!r} must be 1-256"),
            (self.max_deletes_per_second is None or self.max_deletes_per_second > 0,
             f"max deletes per second {self.max_deletes_per_second!r} must be > 0"),
            (self.max_deletes is None or self.max_deletes >= 1,
             f"max deletes {self.max_deletes!r} must be >= 1"),
            (1 <= self.page_size <= 1000, f"page size {self.page_size!r} must be 1-1000"),
            (self.round_deadline_s > 0, f"round deadline {self.round_deadline_s!r} s must be > 0"),
            (self.request_deadline_s > 0,
             f"request deadline {self.request_deadline_s!r} s must be > 0"),
            (self.undo_window_s >= 0, f"undo window {self.undo_window_s!r} s must be >= 0"),
            (self.max_pages_per_prefix >= 1,
             f"max pages per prefix {self.max_pages_per_prefix!r} must be >= 1"),
        )  # fmt: skip
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


_Queue: TypeAlias = "asyncio.Queue[list[Candidate] | None]"


class _Ahead(NamedTuple):
    """A LIST sent ahead (still in flight, or answered and not read yet) and its cursor."""

    cursor: Cursor
    size: int
    task: asyncio.Task[ListPage]


@dataclass
class _Run:
    """Live counters and coordination of one round."""

    safe_epoch: int
    basis: DeleteBasis
    counts: RoundCounts = field(default_factory=RoundCounts)
    batch: list[Candidate] = field(default_factory=list)
    young_ready_at_s: float | None = None
    max_deleted_epoch: int | None = None
    capped: bool = False
    incomplete: bool = False
    unparsable_logged: int = 0
    versioned: bool = False
    """Listing versions and deleting by version id (a versioned bucket, RECLAIM)."""
    skip_ahead: bool = True
    unordered: bool = False
    """The store lists out of order (no skip-ahead, no StartAfter, claims probed)."""
    prefixes: list[str] = field(default_factory=list)
    deadline_hit: bool = False
    """The round's listing was stopped by `RoundConfig.round_deadline_s`."""
    features: StoreFeatures | None = None
    nested: NestedRoots | None = None
    groups: KeyGroups | None = None
    """Undo window on a versioned bucket: every version of a key is planned together."""
    ceiling: int | None = None
    """Undo window on a store without versions: the delayed M (-1: none yet)."""
    undo_rule: str | None = None
    soft_delete_s: float | None = None
    """The store's own soft delete retention (`SoftDeleteStore`), read with a window."""

    def full(self) -> bool:
        """True once the per-round delete cap is reached."""
        return self.capped


class Sweeper:
    """Runs rounds against one object store; keeps AIMD state between rounds."""

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
        brake: Brake = OPEN,
        sinks: Sequence[DeleteSink] = (),
        undo: UndoKeeper | None = None,
        sweeper_id: str | None = None,
    ) -> None:
        self.store = store
        self.undo = undo if config.undo_window_s > 0 else None
        if self.undo is not None:
            sinks = (*sinks, self.undo.ledger)
        self._rounds = itertools.count(1)
        self.sweeper_id = sweeper_id
        self.config = config
        self.metrics = metrics if metrics is not None else SweeperMetrics()
        self.plan = plan
        self.retrier = retrier if retrier is not None else Retrier(config.backoff)
        self.stop = stop if stop is not None else asyncio.Event()
        self.clock = clock
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
        )
        self.metrics.undo_window_seconds.set(config.undo_window_s)
        self.current: _Run | None = None
        self.after_round: Callable[[RoundSummary], Awaitable[None]] | None = None
        """Awaited with each admitted round's summary (`gcd.sweep.usage`); never raises."""
        self.last_summary: RoundSummary | None = None
        """The summary of the last round that ran (None before the first)."""
        """The round in progress, for progress displays."""

    @property
    def counts(self) -> RoundCounts | None:
        """Live counters of the round in progress (None between rounds)."""
        return self.current.counts if self.current is not None else None

    async def sweep(
        self, safe_epoch: int, cluster_epoch: int | None, *, basis: DeleteBasis | None = None,
        ceiling: int | None = None,
    ) -> RoundResult:  # fmt: skip
        """List and delete everything at or below `safe_epoch`; never raises StorageError.

        `basis` is the admission behind `safe_epoch` (etcd revision, pinning partitions),
        handed to the deleter's sinks with every request. With an undo window, `ceiling`
        is the delayed M a store without versions deletes up to (None: no history yet).
        """
        started = time.monotonic()
        round_id = f"{self.sweeper_id or 'sweeper'}.{next(self._rounds)}"
        basis = basis or DeleteBasis(safe_epoch, cluster_epoch, None)
        run = _Run(safe_epoch, dataclasses.replace(basis, round_id=round_id))
        await self._detect(run)
        self._undo_rule(run, ceiling)
        ordered = not run.unordered
        probe = (lambda key: self._exists(key, run)) if ordered else self._stored
        run.nested = NestedRoots(self.config.layout.root, probe, ordered=ordered)
        self.current = run
        self.brake.reset()
        log.info("sweep.round_started", safe_epoch=safe_epoch, cluster_epoch=cluster_epoch,
                 dry_run=self.config.dry_run, prefixes=len(run.prefixes),
                 versioned=run.versioned, skip_ahead=run.skip_ahead)  # fmt: skip
        queue: _Queue = asyncio.Queue(self.config.concurrency * 2)
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self.config.concurrency):
                    group.create_task(self._delete_worker(queue, run))
                group.create_task(self._produce(queue, run))
        except BaseExceptionGroup as failed:
            raise _first(failed) from None
        finally:
            self.current = None
        counts = run.counts
        braked = self.brake.engaged
        reasons, earliest = await self._report_locked(run)
        summary = RoundSummary(
            safe_epoch=safe_epoch,
            cluster_epoch=cluster_epoch,
            dry_run=self.config.dry_run,
            duration_s=round(time.monotonic() - started, 3),
            blocked_reason=braked,
            locked_reasons=reasons,
            locked_earliest_retain_until=earliest,
            store=self._store_report(run),
            nested_roots=tuple(sorted(run.nested.found)),
            deadline_exceeded=run.deadline_hit,
            round=round_id,
            undo=self._undo_report(run),
            **counts.summary_fields(),
        )
        complete = not (run.capped or run.incomplete or counts.errors or counts.abandoned
                        or self.stop.is_set() or braked)  # fmt: skip
        self._record(summary, run.max_deleted_epoch)
        if self.after_round is not None:
            await self.after_round(summary)
        return RoundResult(summary, run.young_ready_at_s, complete, run.max_deleted_epoch)

    async def _detect(self, run: _Run) -> None:
        """What the store is, for this round: versioned, locked, listing in order."""
        config = self.config
        features = await self.store.detect() if isinstance(self.store, DetectingStore) else None
        unordered = config.unordered_listing or (features is not None
                                                 and not features.ordered_listing)  # fmt: skip
        run.features = features
        run.versioned = (features is not None and features.versioned
                         and config.versions is VersionMode.RECLAIM
                         and isinstance(self.store, VersionedStore))  # fmt: skip
        run.unordered = unordered
        run.skip_ahead = config.skip_ahead and not unordered
        run.prefixes = config.prefixes(unordered=unordered)
        self.deleter.object_lock = bool(features is not None and features.object_lock)
        if self.undo is not None and isinstance(self.store, SoftDeleteStore):
            run.soft_delete_s = await self.undo.retention(self.store)

    def _undo_rule(self, run: _Run, ceiling: int | None) -> None:
        """Which undo rule this round follows (`gcd.rules.undo`), now the store is known."""
        if self.undo is None or self.config.dry_run:
            return
        if run.versioned:
            run.undo_rule, run.groups = "hide-then-reclaim", KeyGroups(self.undo)
        elif run.features is not None and run.features.versioned:
            run.undo_rule = "markers-only"  # every delete is a marker, kept: restorable
        elif self.undo.covered(run.soft_delete_s):
            run.undo_rule = "store-soft-delete"  # plain deletes; `gcd restore` undeletes
        else:
            run.undo_rule = "delayed-m"
            run.ceiling = -1 if ceiling is None else min(ceiling, run.safe_epoch)
            if ceiling is None:
                log.warning("undo.no_history", window_s=self.config.undo_window_s,
                            fix="M's history in etcd does not reach back one window yet: "
                                "nothing is deleted until it does")  # fmt: skip

    def _undo_report(self, run: _Run) -> dict[str, object] | None:
        """The summary's `undo` (None without a window), and its gauges."""
        if self.undo is None:
            return None
        counts = run.counts
        oldest = counts.oldest_pending_s
        self.metrics.undo_pending_objects.set(counts.pending_keys)
        self.metrics.undo_pending_bytes.set(counts.pending_bytes)
        self.metrics.undo_oldest_pending_timestamp.set(math.nan if oldest is None else oldest)
        note = None
        if run.ceiling == -1:
            note = ("no M history one window old yet: nothing deleted until M has been "
                    "recorded for a whole window")  # fmt: skip
        return {"window_s": self.config.undo_window_s, "rule": run.undo_rule,
                "delayed_safe_epoch": None if run.ceiling in (None, -1) else run.ceiling,
                "pending_keys": counts.pending_keys, "pending_bytes": counts.pending_bytes,
                "oldest_pending": None if oldest is None else iso_utc(oldest),
                "foreign_markers": counts.foreign_markers, "note": note,
                "store_retention_s": run.soft_delete_s}  # fmt: skip

    def _store_report(self, run: _Run) -> dict[str, object] | None:
        """The summary's `store`: what was detected, and how this round listed."""
        if not isinstance(self.store, DetectingStore):
            return None
        report = self.store.detected.to_dict()
        if self.config.unordered_listing:
            report["listing"] = "unordered"
        report["versions"] = ("reclaim" if run.versioned else
                              "markers-only" if report["versioning"] in {"Enabled", "Suspended"}
                              else "none")  # fmt: skip
        return report

    async def _report_locked(self, run: _Run) -> tuple[dict[str, int] | None, str | None]:
        """Reasons and the earliest retain-until of the round's locked versions, logged
        once (at most `LOCK_PROBES` asked; the others count as "not examined")."""
        counts = run.counts
        if not counts.locked:
            return None, None
        reasons: dict[str, int] = {}
        earliest: float | None = None
        probes = counts.locked_targets[:LOCK_PROBES]
        if isinstance(self.store, VersionedStore):
            for target in probes:
                key, version_id = split_target(target)
                if version_id is None:
                    continue
                reason, until = await self.store.lock_state(key, version_id)
                reasons[reason] = reasons.get(reason, 0) + 1
                if until is not None and (earliest is None or until < earliest):
                    earliest = until
        examined = sum(reasons.values())
        if counts.locked > examined:
            reasons["not examined"] = counts.locked - examined
        first = None if earliest is None else iso_utc(earliest)
        log.warning("sweep.locked_versions", count=counts.locked, reasons=reasons,
                    earliest_retain_until=first, bypassed=False)  # fmt: skip
        return reasons, first

    def _record(self, summary: RoundSummary, max_deleted_epoch: int | None) -> None:
        self.last_summary = summary
        metrics = self.metrics
        metrics.round_duration.observe(summary.duration_s)
        outcome = summary.outcome
        known = summary.blocked_reason is None  # a round the brake stopped: M is not in force
        metrics.set_admission(summary.safe_epoch if known else None, summary.cluster_epoch,
                              blocked=outcome == "blocked", paused=outcome == "paused")  # fmt: skip
        metrics.last_round_eligible_objects.set(summary.eligible)
        metrics.prefixes_unlistable.set(len(summary.unlistable_prefixes))
        metrics.nested_roots.set(len(summary.nested_roots))
        if max_deleted_epoch is not None:
            metrics.max_deleted_epoch.set(max_deleted_epoch)
        if not summary.errors and known:
            metrics.last_success_timestamp.set(self.clock())
        metrics.round_finished(outcome)
        log.info("sweep.round_finished", outcome=outcome, **summary.to_dict())

    def blocked(self, admission: RoundAdmission) -> RoundResult:
        """Report a round that may delete nothing (paused, undefined M, regression...)."""
        summary = RoundSummary(
            safe_epoch=None,
            cluster_epoch=admission.cluster_epoch,
            dry_run=self.config.dry_run,
            blocked_reason=admission.blocked_reason,
        )
        self.metrics.set_admission(None, admission.cluster_epoch, blocked=not admission.paused,
                                   paused=admission.paused)  # fmt: skip
        self.metrics.round_finished(summary.outcome)
        event = "sweep.round_paused" if admission.paused else "sweep.round_blocked"
        log.warning(event, reason=admission.blocked_reason, regression=admission.regression,
                    cluster_epoch=admission.cluster_epoch)  # fmt: skip
        return RoundResult(summary, complete=False)

    # -- listing --------------------------------------------------------------------

    async def _produce(self, queue: _Queue, run: _Run) -> None:
        want = self.config.list_concurrency
        gate = asyncio.Semaphore(want)
        unfinished = [0]  # ranges queued or being listed

        async def one(part: ListRange, size: int | None = None) -> None:
            try:
                async with gate:
                    await self._list_prefix(part, queue, run, share, size)
                if run.groups is not None:
                    await self._planned(run.groups.flush(part.prefix), queue, run)
                if run.batch:  # a range ended: its garbage goes now, not when all listing has
                    batch, run.batch = run.batch, []
                    await queue.put(batch)
            finally:
                unfinished[0] -= 1

        def share(part: ListRange, last_key: str, size: int) -> ListRange:
            """Hand the back half of `part` to a lister that would idle, starting with
            pages of `size` keys (the giver's); return the part kept."""
            if unfinished[0] >= want or not self._probing(run):
                return part
            halves = split_range(self.config.layout, part, last_key)
            if halves is None:
                return part
            unfinished[0] += 1
            group.create_task(one(halves[1], size))
            return halves[0]

        try:
            async with asyncio.timeout(self.config.round_deadline_s):
                async with asyncio.TaskGroup() as group:
                    for prefix in run.prefixes:
                        unfinished[0] += 1
                        group.create_task(one(ListRange(prefix)))
        except TimeoutError:  # listers still at work are cancelled; queued batches go
            run.incomplete = run.deadline_hit = True
            run.counts.errors += 1
            log.error("sweep.round_deadline", deadline_s=self.config.round_deadline_s,
                      fix="see the sweep.list_* errors before it; --round-deadline")  # fmt: skip
        if run.groups is not None:
            await self._planned(run.groups.flush(), queue, run)
        if run.batch:
            batch, run.batch = run.batch, []
            await queue.put(batch)
        for _ in range(self.config.concurrency):
            await queue.put(None)

    async def _list_prefix(
        self,
        part: ListRange,
        queue: _Queue,
        run: _Run,
        share: Callable[[ListRange, str, int], ListRange] | None = None,
        size: int | None = None,
    ) -> None:
        """Page through one range of a listing prefix, one LIST ahead (see the module
        docstring); `share` (ordered, unversioned listings that may skip) may hand the
        back half of the range to another lister. `size`: the first page's (default
        `first_page_size`)."""
        prefix, full, probing = part.prefix, self.config.page_size, self._probing(run)
        cursor: Cursor | None = Cursor(part.start_after)
        done = part.start_after  # every key up to here is examined
        size = first_page_size(probing, full) if size is None else size
        ahead: _Ahead | None = None
        guard = ListingGuard(self.config.max_pages_per_prefix)
        try:
            while cursor is not None and not self._listing_over(run):
                if ahead is not None and (ahead.cursor, ahead.size) != (cursor, size):
                    await _discard(ahead.task)  # the guess was wrong
                    ahead = None
                task = ahead.task if ahead is not None else self._send(prefix, cursor, size, run)
                ahead = None
                try:
                    page = _clip(await task, part)
                except StorageError as exc:
                    log.error("sweep.list_failed", prefix=prefix, code=exc.code, error=str(exc))
                    await self._unlistable(part, done, exc, queue, run)
                    return
                guess = _within(part, self._guess_next(prefix, cursor, page, run))
                if guess is not None and not self._listing_over(run):
                    guess_size = next_page_size(size, guess, full, probing=probing)
                    ahead = _Ahead(guess, guess_size, self._send(prefix, guess, guess_size, run))
                    await asyncio.sleep(0)  # let it start: examining the page may never yield
                cursor = _within(part, await self._examine(prefix, cursor, page, queue, run))
                broken = None if cursor is None else guard.advance(cursor.start_after,
                                                                   cursor.token)  # fmt: skip
                if broken is not None:
                    log.error("sweep.listing_broken", prefix=prefix, reason=broken)
                    run.counts.errors += 1
                    run.counts.unlistable_prefixes.append(prefix)
                    return
                if cursor is not None:
                    last = page.objects[-1].key if page.objects else done
                    done = cursor.start_after if cursor.token is None else last
                    size = next_page_size(size, cursor, full, probing=probing)
                    if share is not None and page.objects:
                        part = share(part, page.objects[-1].key, size)
        finally:
            if ahead is not None:
                await _discard(ahead.task)

    async def _unlistable(
        self, part: ListRange, done: str | None, exc: StorageError, queue: _Queue, run: _Run
    ) -> None:
        """A listing prefix whose listing failed for a whole retry budget (`RoundConfig.backoff`,
        per request; the Azure SDK's own retries are off, so this is the only one).

        After a retryable failure (a name the store cannot list answers 500 for its whole
        prefix) its ten children are probed with one one-key LIST each, from where it
        stopped: the listable ones are listed (each with a budget of its own), the others
        narrowed the same way, down to the layout's 3-digit prefix directories, so one
        poison name costs one directory. When no child answers (an outage, not a name),
        or it cannot be narrowed, the prefix is reported by name and skipped (one error).
        A child is listed as a range of its own, never shared, that keeps `part`'s end:
        keys past it are another range's.
        """
        prefix = part.prefix
        children = _narrower(part, self.config.layout, done) if exc.retryable else []
        listable = [await self._answers(child, start, run) for child, start in children]
        if any(listable):
            log.warning("sweep.prefix_narrowed", prefix=prefix, code=exc.code)
            for (child, start), ok in zip(children, listable, strict=True):
                if self._listing_over(run):
                    return
                narrowed = ListRange(child, start.start_after, part.end)
                if ok:
                    await self._list_prefix(narrowed, queue, run)
                else:
                    await self._unlistable(narrowed, start.start_after, exc, queue, run)
            return
        log.error("sweep.prefix_unlistable", prefix=prefix, code=exc.code, error=str(exc))
        run.counts.errors += 1
        run.counts.unlistable_prefixes.append(prefix)

    def _probing(self, run: _Run) -> bool:
        """True when pages start as probes and ranges may be shared: the listing is
        ordered, lists keys (not versions) and may skip. Unordered listings never skip nor
        start after a key; versioned ones page by KeyMarker: both take full pages, unsplit."""
        return run.skip_ahead and not run.versioned and can_skip(self.config.layout)

    def _listing_over(self, run: _Run) -> bool:
        """True once listers must stop: a stop event, the brake, or the delete cap reached."""
        return self.stop.is_set() or run.capped or self.brake.engaged is not None

    def _guess_next(self, prefix: str, cursor: Cursor, page: ListPage, run: _Run) -> Cursor | None:
        """What `_examine` will return for `page`, guessed from its last key alone."""
        last = page.objects[-1].key if page.objects else None
        found: Skip | None = None
        if last is not None and run.skip_ahead and page.next_token is not None:
            found = skip(self.config.layout, prefix, self.config.layout.parse(last),
                         run.safe_epoch)  # fmt: skip
        return next_cursor(cursor, found, last, page.next_token)

    async def _examine(
        self, prefix: str, cursor: Cursor, page: ListPage, queue: _Queue, run: _Run
    ) -> Cursor | None:
        """Decide every object of a page, queue the deletable ones; where the listing goes on.

        None: this listing prefix is done (last page, or the rest of it is above M).
        """
        layout, config = self.config.layout, self.config
        now = self.clock()
        found: Skip | None = None  # the last skip a key of this page called for
        tally = dict.fromkeys(Verdict, 0)
        claim = claim_key(layout.root)  # the namespace's binding, never an L0 object
        assert run.nested is not None
        run.nested.scan(prefix, page)  # claims below the root block their subtree
        kept = 0  # deletable, but under a nested root
        held = 0  # deletable by M, not by the delayed M of the undo window
        for obj in page.objects:
            skip_to = found.start_after if found is not None else None
            if (skip_to is not None and obj.key <= skip_to) or obj.key == claim:
                continue
            verdict, parsed = decide(obj.key, obj.last_modified_s, layout,
                                     run.safe_epoch, now, config.grace_s)  # fmt: skip
            tally[verdict] += 1
            if (verdict is Verdict.DELETE and run.nested.may_block(obj.key)
                    and await run.nested.blocks(obj.key, page)):  # fmt: skip
                tally[verdict] -= 1
                kept += 1
            elif verdict is Verdict.DELETE and parsed is not None and run.groups is not None:
                tally[verdict] -= 1  # counted when its key is planned
                await self._grouped(prefix, obj, parsed.epoch, False, queue=queue, run=run)
            elif (verdict is Verdict.DELETE and parsed is not None and run.ceiling is not None
                  and parsed.epoch > run.ceiling):  # fmt: skip
                tally[verdict] -= 1
                held += 1
                run.counts.pending_keys += 1
                run.counts.pending_bytes += obj.size
            elif verdict is Verdict.DELETE and parsed is not None:
                candidate = Candidate(obj.key, obj.size, parsed.epoch, obj.version_id,
                                      obj.delete_marker, generation=obj.generation)  # fmt: skip
                if not self._select(candidate, obj, run):
                    tally[verdict] -= 1  # not examined: another lister hit the cap
                if len(run.batch) >= self.config.batch_size:
                    batch, run.batch = run.batch, []
                    await queue.put(batch)
                if run.full():
                    break  # the per-round delete cap is reached
            elif verdict is Verdict.NOT_ELIGIBLE and run.skip_ahead:
                found = skip(layout, prefix, parsed, run.safe_epoch) or found
                if found is not None and found.done:
                    break  # the rest of this listing prefix is not eligible
            elif verdict is Verdict.TOO_YOUNG:
                if run.groups is not None and parsed is not None:
                    await self._grouped(prefix, obj, parsed.epoch, True, queue=queue, run=run)
                ready = obj.last_modified_s + config.grace_s
                if run.young_ready_at_s is None or ready < run.young_ready_at_s:
                    run.young_ready_at_s = ready
            elif verdict in {Verdict.UNPARSABLE, Verdict.OUTSIDE_ROOT}:
                self._note_unparsable(obj, run)
        self._count(tally, run)
        if held:  # kept by the undo window (delayed M): pending
            run.counts.listed += held
            self.metrics.listed_objects.inc(held)
        if kept:
            run.counts.listed += kept
            run.counts.skipped_nested += kept
            self.metrics.listed_objects.inc(kept)
            self.metrics.skipped("nested_root", kept)
        last = page.objects[-1].key if page.objects else None
        return next_cursor(cursor, found, last, page.next_token)

    async def _grouped(self, prefix: str, obj: ObjectInfo, epoch: int, young: bool, *,
                       queue: _Queue, run: _Run) -> None:  # fmt: skip
        """One version of an eligible key, gathered with the key's other versions; the key
        before it, now complete, is planned (`gcd.sweep.undo`)."""
        assert run.groups is not None
        done = run.groups.feed(prefix, obj, epoch, young)
        if done is not None:
            await self._planned([done], queue, run)

    async def _planned(self, groups: Sequence[object], queue: _Queue, run: _Run) -> None:
        """Plan complete key groups; select (and batch) what their plans delete."""
        assert run.groups is not None
        now = self.clock()
        for group in groups:
            for candidate, obj in run.groups.plans(group, now, run.counts):  # type: ignore[arg-type]
                if not self._select(candidate, obj, run):
                    return
                if len(run.batch) >= self.config.batch_size:
                    batch, run.batch = run.batch, []
                    await queue.put(batch)

    def _note_unparsable(self, obj: ObjectInfo, run: _Run) -> None:
        run.unparsable_logged += 1
        if run.unparsable_logged <= _LOGGED_UNPARSABLE:
            log.warning("sweep.unparsable_key", key=obj.key, layout=self.config.layout.pattern)

    def _count(self, tally: dict[Verdict, int], run: _Run) -> None:
        listed = sum(tally.values())
        counts, metrics = run.counts, self.metrics
        counts.listed += listed
        counts.skipped_not_eligible += tally[Verdict.NOT_ELIGIBLE]
        counts.skipped_young += tally[Verdict.TOO_YOUNG]
        counts.unparsable += tally[Verdict.UNPARSABLE] + tally[Verdict.OUTSIDE_ROOT]
        metrics.listed_objects.inc(listed)
        for verdict in (Verdict.NOT_ELIGIBLE, Verdict.TOO_YOUNG, Verdict.UNPARSABLE,
                        Verdict.OUTSIDE_ROOT):  # fmt: skip
            if tally[verdict]:
                metrics.skipped(verdict.value, tally[verdict])

    def _select(self, item: Candidate, obj: ObjectInfo, run: _Run) -> bool:
        """Take a deletable object into the round's batch; False when the round's delete
        cap was already reached. (Not a coroutine: it runs for every deletable key.)"""
        if run.capped:
            return False
        run.counts.eligible += 1
        cap = self.config.max_deletes
        if cap is not None and run.counts.eligible >= cap:
            if not run.capped:
                log.info("sweep.delete_cap_reached", max_deletes=cap)
            run.capped = True
        if self.plan is not None:
            self.plan.write(obj.key, item.epoch, obj.size, obj.last_modified_s)
        if not self.config.dry_run:
            run.batch.append(item)
        return True

    def _send(self, prefix: str, cursor: Cursor, size: int, run: _Run) -> asyncio.Task[ListPage]:
        return asyncio.create_task(self._list_page(prefix, cursor, size, run))

    async def _list_page(
        self, prefix: str, cursor: Cursor, size: int, run: _Run, *, retry: bool = True
    ) -> ListPage:
        """One LIST, retried by the retry loop; raises the StorageError that ended it."""

        lister = self.store.list_page
        if run.versioned:
            assert isinstance(self.store, VersionedStore)
            lister = self.store.list_versions_page

        async def attempt() -> ListPage:
            # Counted when sent (the round's counter and the metric), so a LIST sent
            # ahead and then discarded unread counts too: these count what S3 bills.
            run.counts.list_requests += 1
            self.metrics.list_requests.inc()
            try:
                async with deadline(self.config.request_deadline_s, f"LIST {prefix}"):
                    return await lister(prefix, start_after=cursor.start_after,
                                        continuation_token=cursor.token, max_keys=size)  # fmt: skip
            except StorageError as exc:
                self.metrics.list_error(exc.code)
                raise

        def on_retry(exc: StorageError, attempt: int, _delay: float) -> None:
            log.info("sweep.list_retry", prefix=prefix, code=exc.code, attempt=attempt)

        if not retry:
            return await attempt()
        return await self.retrier.call(attempt, on_retry=on_retry, stopped=self.stop.is_set)

    async def _answers(self, prefix: str, start: Cursor, run: _Run) -> bool:
        """Whether one one-key LIST of `prefix` (no retry) succeeds."""
        try:
            await self._list_page(prefix, start, 1, run, retry=False)
        except StorageError:
            return False
        return True

    async def _exists(self, key: str, run: _Run) -> bool:
        """Whether an object `key` exists: one one-key LIST (`gcd.sweep.nesting`)."""
        page = await self._list_page(key, Cursor(), 1, run)
        return bool(page.objects) and page.objects[0].key == key

    async def _stored(self, key: str) -> bool:
        """Whether an object `key` exists, without a listing (unordered stores refuse a
        prefix that does not end in '/'): one GET of at most a claim's size. A store that
        cannot read an object answers True: the key is kept."""
        get_object = getattr(self.store, "get_object", None)
        if get_object is None:
            return True
        return await get_object(key, max_bytes=CLAIM_MAX_BYTES) is not None

    # -- deleting -------------------------------------------------------------------

    async def _delete_worker(self, queue: _Queue, run: _Run) -> None:
        while (batch := await queue.get()) is not None:
            if self.stop.is_set():
                run.incomplete = True  # dropped: the next round lists these keys again
                continue
            top = await self.deleter.delete(batch, run.counts, run.basis)
            if top is not None and (run.max_deleted_epoch is None or top > run.max_deleted_epoch):
                run.max_deleted_epoch = top


def _narrower(part: ListRange, layout: KeyLayout, done: str | None) -> list[tuple[str, Cursor]]:
    """The children of a listing prefix that keeps failing, each with where its listing
    starts given that every key up to `done` is examined, and none whose keys all sort
    after `part`'s end (another range's); [] when it cannot be narrowed (no 000-999
    prefix in the layout, or already a whole prefix directory)."""
    prefix, end = part.prefix, part.end
    depth = len(prefix) - len(layout.listing_root)
    if not layout.has_prefix or not prefix.startswith(layout.listing_root) or depth >= 3:
        return []
    children: list[tuple[str, Cursor]] = []
    for child in (prefix + digit for digit in "0123456789"):
        if end is not None and child > end and not end.startswith(child):
            continue  # every key under it sorts after the range's last
        if done is None or done[: len(child)] < child:
            children.append((child, Cursor()))
        elif done.startswith(child):
            children.append((child, Cursor(start_after=done)))
    return children


def _clip(page: ListPage, part: ListRange) -> ListPage:
    """`page` without the keys beyond `part`'s end (a later range's); then the range is done."""
    if not page.objects or part.owns(page.objects[-1].key):
        return page
    kept = tuple(obj for obj in page.objects if part.owns(obj.key))
    return ListPage(kept, None, page.request_id)


def _within(part: ListRange, cursor: Cursor | None) -> Cursor | None:
    """`cursor`, or None when the listing would go on past `part`'s end."""
    if cursor is None or (cursor.token is None and part.passed(cursor.start_after)):
        return None
    return cursor


async def _discard(task: asyncio.Task[ListPage]) -> None:
    """Cancel a LIST sent ahead that is not wanted and wait for it to end, unread.

    Nothing of it is examined or counted but the request itself (when it was sent); a
    failure of it is no error of the round.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


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
            return sweeper.blocked(RoundAdmission(
                None, admission.cluster_epoch, f"M history unreadable (undo window): {exc}"))
    return await sweeper.sweep(admission.safe_epoch, admission.cluster_epoch, basis=basis,
                               ceiling=ceiling)  # fmt: skip
