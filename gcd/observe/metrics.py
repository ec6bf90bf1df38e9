"""Prometheus metrics of the sweeper (`l0gc_sweeper_*`), on a registry of their own.

Design notes: docs/internals/sweep.md, `gcd.observe.metrics`.
"""

from __future__ import annotations

import math
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from gcd.observe.telemetry import (
    AdmissionShown,
    DeleteFailed,
    DeletesBraked,
    DeleteSent,
    JournalAppended,
    JournalFailed,
    JournalRotated,
    ListFailed,
    ListSent,
    ObjectsDeleted,
    PageExamined,
    ReferenceConflictFound,
    RoundFinished,
    RoundNotListed,
    StalenessShown,
    UndoPendingCounted,
    UndoWindowSet,
    UnsafeKeyKept,
    VersionLocked,
    WatermarkAgeShown,
)
from l0gc.events import HandlerTable
from l0gc.process.buildinfo import register_build_info

__all__ = [
    "ERROR_LABELS",
    "OUTCOMES",
    "SKIP_REASONS",
    "SweeperMetrics",
    "SweeperMetricsHook",
    "error_label",
]

SKIP_REASONS: Final = (
    "not_eligible",
    "too_young",
    "unparsable",
    "outside_root",
    "nested_root",
    "referenced",
)
OUTCOMES: Final = ("ok", "partial", "blocked", "paused", "idle", "error")
ERROR_LABELS: Final = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "AccessDenied",
        "MalformedXML",
        "InvalidArgument",
        "InvalidRequest",
        "NoSuchBucket",
        "NoCredentials",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ConnectionError",
        "Timeout",
        "500",
        "503",
        "other",
    }
)
_ALIASES: Final = {
    "ThrottlingException": "Throttling",
    "RequestLimitExceeded": "Throttling",
    "TooManyRequestsException": "Throttling",
}
_NAMESPACE: Final = "l0gc_sweeper"


def error_label(code: str) -> str:
    """The metric label for an S3 error code: itself when known, else "other"."""
    code = _ALIASES.get(code, code)
    return code if code in ERROR_LABELS else "other"


class SweeperMetrics:
    """Every sweeper metric, registered on `self.registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        register_build_info(reg, "sweeper")

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=_NAMESPACE, registry=reg)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, namespace=_NAMESPACE, registry=reg)

        self.deleted_objects = counter("deleted_objects", "Objects deleted.")
        self.deleted_bytes = counter("deleted_bytes", "Bytes of objects deleted.")
        self.deleted_versions = counter(
            "deleted_versions", "Object versions deleted by version id (versioned buckets)."
        )
        self.deleted_markers = counter(
            "deleted_markers", "Delete markers deleted by version id (versioned buckets)."
        )
        self.locked_versions = counter(
            "locked_versions",
            "Eligible versions kept because Object Lock refuses their deletion (retention "
            "or legal hold; reported once per round as sweep.locked_versions).",
        )
        self.listed_objects = counter("listed_objects", "Listed objects examined.")
        self.reference_conflicts = Counter(
            "reference_conflicts",
            "Keys at or below M that a partition still references (M is wrong): the round "
            "deletes nothing and GC pauses itself through the fleet brake "
            "(docs/references.md).",
            namespace="l0gc",
            registry=reg,
        )
        self.skipped_objects = counter(
            "skipped_objects", "Listed objects not deleted, by reason.", ("reason",)
        )
        self.list_requests = counter("list_requests", "ListObjectsV2 requests sent.")
        self.delete_requests = counter("delete_requests", "DeleteObjects requests sent.")
        self.list_errors = counter("list_errors", "Failed ListObjectsV2 requests.", ("code",))
        self.delete_errors = counter(
            "delete_errors", "Failed DeleteObjects requests and per-key failures.", ("code",)
        )
        self.unsafe_keys = counter(
            "unsafe_keys",
            "Eligible keys kept because S3 cannot delete them by name: characters a "
            "DeleteObjects request cannot carry, or a request with the key alone failed as a "
            "whole (each logged once by name as sweep.unsafe_key).",
        )
        self.paused_skipped_objects = counter(
            "paused_skipped_objects",
            "Eligible objects not deleted because a pause (or an unreadable pause key) was "
            "seen during the round; the next round after the pause lists them again.",
        )
        self.rounds = counter("rounds", "Sweeper rounds, by outcome.", ("outcome",))
        self.round_duration = Histogram(
            "round_duration_seconds",
            "Wall time of rounds that listed.",
            namespace=_NAMESPACE,
            registry=reg,
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
        )
        self.safe_epoch = gauge(
            "safe_epoch",
            "Global safe epoch M as last read (each round; a daemon also every 2 s between "
            "rounds); NaN while M is unknown (blocked, paused, or etcd unreachable with no "
            "good read yet).",
        )
        self.cluster_epoch = gauge(
            "cluster_epoch", "Cluster epoch read with M; NaN while it is unknown (no etcd read)."
        )
        self.epoch_lag = gauge("epoch_lag", "Cluster epoch minus M; NaN while M is unknown.")
        self.max_deleted_epoch = gauge("max_deleted_epoch", "Highest epoch of a deleted object.")
        self.blocked = gauge("blocked", "1 while deletion is blocked by a safety rail.")
        self.paused = gauge("paused", "1 while GC is paused through etcd.")
        self.seconds_since_last_good_watermark = gauge(
            "seconds_since_last_good_watermark",
            "Seconds since M was last read from etcd (grows while etcd is unreachable).",
        )
        self.seconds_since_last_round = gauge(
            "seconds_since_last_round",
            "gcd daemon: seconds since its last round (iteration) completed, any outcome; "
            "since the start before the first. Grows while a round is stuck.",
        )
        self.safe_epoch_unapplied_seconds = gauge(
            "safe_epoch_unapplied_seconds",
            "gcd daemon: seconds a safe epoch M read from etcd, above the M its last round "
            "listed with, has waited for a round to apply it (0 when none waits).",
        )
        self.last_round_eligible_objects = gauge(
            "last_round_eligible_objects", "Objects eligible for deletion in the last round."
        )
        self.last_success_timestamp = gauge(
            "last_success_timestamp_seconds", "Unix time of the last round without errors."
        )
        self.prefixes_unlistable = gauge(
            "prefixes_unlistable",
            "Listing prefixes the last round skipped because their listing kept failing "
            "after its retry budget (each logged by name as sweep.prefix_unlistable).",
        )
        self.nested_roots = gauge(
            "nested_roots",
            "Roots claimed by another namespace found below this root in the last round; "
            "nothing under them is deleted (each logged by name as sweep.nested_root).",
        )
        self.journal_records = counter("journal_records", "Deletion journal records written.")
        self.journal_bytes = counter("journal_bytes", "Bytes written to the deletion journal.")
        self.journal_segments = counter(
            "journal_segments", "Deletion journal segments opened (rotations)."
        )
        self.journal_errors = counter(
            "journal_errors", "Deletion journal writes or segment uploads that failed."
        )
        self.undo_window_seconds = gauge(
            "undo_window_seconds", "The undo window (--undo-window); 0: deletions are final."
        )
        self.undo_markers_written = counter(
            "undo_markers_written",
            "Keys hidden behind a delete marker l0gc wrote (undo window, versioned bucket).",
        )
        self.undo_versions_reclaimed = counter(
            "undo_versions_reclaimed",
            "Versions and l0gc delete markers freed once their undo window had passed.",
        )
        self.undo_pending_objects = gauge(
            "undo_pending_objects",
            "Eligible keys kept by the undo window in the last round (restorable, or not "
            "garbage for the whole window yet).",
        )
        self.undo_pending_bytes = gauge(
            "undo_pending_bytes", "Bytes of the keys the undo window kept in the last round."
        )
        self.undo_oldest_pending_timestamp = gauge(
            "undo_oldest_pending_timestamp_seconds",
            "When the oldest delete marker pending reclaim was written (unix seconds); NaN "
            "when none is pending.",
        )
        self.undo_oldest_pending_timestamp.set(math.nan)
        for unknown in (self.safe_epoch, self.cluster_epoch, self.epoch_lag):
            unknown.set(math.nan)  # never a healthy-looking 0 before the first read
        for reason in SKIP_REASONS:
            self.skipped_objects.labels(reason=reason)
        for outcome in OUTCOMES:
            self.rounds.labels(outcome=outcome)
        for code in ERROR_LABELS:
            self.list_errors.labels(code=code)
            self.delete_errors.labels(code=code)
        self.hook = SweeperMetricsHook(self)
        """The hook that feeds these metrics from the engine's events (see the docstring)."""

    def skipped(self, reason: str, count: int = 1) -> None:
        """Count skipped objects; `reason` is one of SKIP_REASONS."""
        if reason not in SKIP_REASONS:
            raise ValueError(f"unknown skip reason {reason!r}; use one of {SKIP_REASONS}")
        self.skipped_objects.labels(reason=reason).inc(count)

    def list_error(self, code: str) -> None:
        """Count one failed LIST request."""
        self.list_errors.labels(code=error_label(code)).inc()

    def delete_error(self, code: str, count: int = 1) -> None:
        """Count failed deletes (a whole request, or keys inside one)."""
        self.delete_errors.labels(code=error_label(code)).inc(count)

    def round_finished(self, outcome: str) -> None:
        """Count a round by outcome; `outcome` is one of OUTCOMES."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown round outcome {outcome!r}; use one of {OUTCOMES}")
        self.rounds.labels(outcome=outcome).inc()

    def set_admission(
        self, safe_epoch: int | None, cluster_epoch: int | None, *, blocked: bool, paused: bool
    ) -> None:
        """Record what a round was admitted with: its epochs, and whether it was blocked
        or paused. The one place these gauges are set (the sweeper, the daemon).

        A blocked or paused round knows no M: its gauges say NaN (Prometheus' "unknown"),
        not 0 or a stale M, so a dashboard never shows a stuck sweeper as caught up.
        """
        self.safe_epoch.set(math.nan if safe_epoch is None else safe_epoch)
        self.cluster_epoch.set(math.nan if cluster_epoch is None else cluster_epoch)
        if safe_epoch is not None and cluster_epoch is not None:
            self.epoch_lag.set(cluster_epoch - safe_epoch)
        else:
            self.epoch_lag.set(math.nan)
        self.blocked.set(1 if blocked else 0)
        self.paused.set(1 if paused else 0)

    content_type: Final = CONTENT_TYPE_LATEST
    """The Content-Type of `render`'s body (what ``GET /metrics`` answers with)."""

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class SweeperMetricsHook(HandlerTable):
    """Feeds a `SweeperMetrics` from the engine's events (a `RoutedHook`)."""

    __slots__ = ("_metrics",)

    def __init__(self, metrics: SweeperMetrics) -> None:
        self._metrics = metrics
        super().__init__(
            {
                UndoWindowSet: self._undo_window,
                ListSent: self._list_sent,
                ListFailed: self._list_failed,
                PageExamined: self._page_examined,
                UndoPendingCounted: self._undo_pending,
                ReferenceConflictFound: self._reference_conflict,
                RoundFinished: self._round_finished,
                RoundNotListed: self._round_not_listed,
                AdmissionShown: self._admission,
                DeleteSent: self._delete_sent,
                DeleteFailed: self._delete_failed,
                UnsafeKeyKept: self._unsafe_key,
                VersionLocked: self._version_locked,
                DeletesBraked: self._deletes_braked,
                ObjectsDeleted: self._objects_deleted,
                WatermarkAgeShown: self._watermark_age,
                StalenessShown: self._staleness,
                JournalAppended: self._journal_appended,
                JournalRotated: self._journal_rotated,
                JournalFailed: self._journal_failed,
            }
        )

    def _undo_window(self, event: UndoWindowSet) -> None:
        self._metrics.undo_window_seconds.set(event.window_s)

    def _list_sent(self, event: ListSent) -> None:
        self._metrics.list_requests.inc()

    def _list_failed(self, event: ListFailed) -> None:
        self._metrics.list_error(event.code)

    def _page_examined(self, event: PageExamined) -> None:
        self._metrics.listed_objects.inc(event.listed)
        for reason, count in event.skipped:
            self._metrics.skipped(reason, count)

    def _undo_pending(self, event: UndoPendingCounted) -> None:
        metrics = self._metrics
        metrics.undo_pending_objects.set(event.keys)
        metrics.undo_pending_bytes.set(event.bytes)
        metrics.undo_oldest_pending_timestamp.set(
            math.nan if event.oldest_s is None else event.oldest_s
        )

    def _reference_conflict(self, event: ReferenceConflictFound) -> None:
        self._metrics.reference_conflicts.inc()

    def _round_finished(self, event: RoundFinished) -> None:
        metrics, summary = self._metrics, event.summary
        metrics.round_duration.observe(summary.duration_s)
        outcome = summary.outcome
        known = summary.blocked_reason is None  # a round the brake stopped: M is not in force
        metrics.set_admission(
            summary.safe_epoch if known else None,
            summary.cluster_epoch,
            blocked=outcome == "blocked",
            paused=outcome == "paused",
        )
        metrics.last_round_eligible_objects.set(summary.eligible)
        metrics.prefixes_unlistable.set(len(summary.unlistable_prefixes))
        metrics.nested_roots.set(len(summary.nested_roots))
        if event.max_deleted_epoch is not None:
            metrics.max_deleted_epoch.set(event.max_deleted_epoch)
        if event.succeeded_at_s is not None:
            metrics.last_success_timestamp.set(event.succeeded_at_s)
        metrics.round_finished(outcome)

    def _round_not_listed(self, event: RoundNotListed) -> None:
        self._metrics.round_finished(event.outcome)

    def _admission(self, event: AdmissionShown) -> None:
        self._metrics.set_admission(
            event.safe_epoch, event.cluster_epoch, blocked=event.blocked, paused=event.paused
        )

    def _delete_sent(self, event: DeleteSent) -> None:
        self._metrics.delete_requests.inc()

    def _delete_failed(self, event: DeleteFailed) -> None:
        self._metrics.delete_error(event.code, event.count)

    def _unsafe_key(self, event: UnsafeKeyKept) -> None:
        self._metrics.unsafe_keys.inc()

    def _version_locked(self, event: VersionLocked) -> None:
        self._metrics.locked_versions.inc()

    def _deletes_braked(self, event: DeletesBraked) -> None:
        self._metrics.paused_skipped_objects.inc(event.count)

    def _objects_deleted(self, event: ObjectsDeleted) -> None:
        metrics = self._metrics
        if event.markers_written:
            metrics.undo_markers_written.inc(event.markers_written)
        if event.versions_reclaimed:
            metrics.undo_versions_reclaimed.inc(event.versions_reclaimed)
        metrics.deleted_objects.inc(event.objects)
        metrics.deleted_bytes.inc(event.bytes)
        if event.versions:
            metrics.deleted_versions.inc(event.versions)
        if event.markers:
            metrics.deleted_markers.inc(event.markers)

    def _watermark_age(self, event: WatermarkAgeShown) -> None:
        self._metrics.seconds_since_last_good_watermark.set(event.seconds)

    def _staleness(self, event: StalenessShown) -> None:
        self._metrics.seconds_since_last_round.set(event.since_last_round_s)
        self._metrics.safe_epoch_unapplied_seconds.set(event.unapplied_s)

    def _journal_appended(self, event: JournalAppended) -> None:
        self._metrics.journal_records.inc()
        self._metrics.journal_bytes.inc(event.size)

    def _journal_rotated(self, event: JournalRotated) -> None:
        self._metrics.journal_segments.inc()

    def _journal_failed(self, event: JournalFailed) -> None:
        self._metrics.journal_errors.inc()
