"""The sweeper's metrics (`gcd.observe.metrics`): fixed label sets, and what the hook makes of
each event of the engine (the same series, labels and values as before there were events)."""

from __future__ import annotations

import math

import pytest

from gcd.observe.metrics import SweeperMetrics
from gcd.observe.report import RoundSummary
from gcd.observe.telemetry import (
    DELETE_SENT,
    LIST_SENT,
    AdmissionShown,
    DeleteFailed,
    DeletesBraked,
    JournalAppended,
    JournalFailed,
    JournalRotated,
    ListFailed,
    ObjectsDeleted,
    PageExamined,
    RoundFinished,
    RoundNotListed,
    StalenessShown,
    UndoPendingCounted,
    UndoWindowSet,
    WatermarkAgeShown,
)


def value(metrics: SweeperMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(f"l0gc_sweeper_{name}", labels)
    assert found is not None, name
    return found


def test_metric_labels_come_from_fixed_sets() -> None:
    """Unknown S3 codes become 'other'; unknown reasons and outcomes are refused."""
    metrics = SweeperMetrics()
    metrics.delete_error("WeirdVendorCode")
    metrics.list_error("SlowDown")
    body = metrics.render().decode()
    assert 'l0gc_sweeper_delete_errors_total{code="other"} 1.0' in body
    assert 'l0gc_sweeper_list_errors_total{code="SlowDown"} 1.0' in body
    with pytest.raises(ValueError):
        metrics.skipped("because")
    with pytest.raises(ValueError):
        metrics.round_finished("meh")


def test_requests_pages_and_deletions_become_counters() -> None:
    """LIST and DeleteObjects requests, examined pages and deleted objects are counted;
    error codes are normalised, skip reasons become labels."""
    metrics = SweeperMetrics()
    hook = metrics.hook
    for event in (
        LIST_SENT,
        LIST_SENT,
        ListFailed("ThrottlingException"),
        DELETE_SENT,
        DeleteFailed("AccessDenied", 3),
        DeletesBraked(4),
        PageExamined(9, (("too_young", 2), ("nested_root", 1))),
        ObjectsDeleted(5, 50, versions=2, markers=1, markers_written=1, versions_reclaimed=2),
    ):
        hook(event)
    assert value(metrics, "list_requests_total") == 2
    assert value(metrics, "list_errors_total", code="Throttling") == 1
    assert value(metrics, "delete_requests_total") == 1
    assert value(metrics, "delete_errors_total", code="AccessDenied") == 3
    assert value(metrics, "paused_skipped_objects_total") == 4
    assert value(metrics, "listed_objects_total") == 9
    assert value(metrics, "skipped_objects_total", reason="too_young") == 2
    assert value(metrics, "skipped_objects_total", reason="nested_root") == 1
    assert value(metrics, "skipped_objects_total", reason="not_eligible") == 0
    assert (value(metrics, "deleted_objects_total"), value(metrics, "deleted_bytes_total")) == (
        5,
        50,
    )
    assert value(metrics, "deleted_versions_total") == 2
    assert value(metrics, "deleted_markers_total") == 1
    assert value(metrics, "undo_markers_written_total") == 1
    assert value(metrics, "undo_versions_reclaimed_total") == 2


def test_a_round_the_brake_stopped_shows_m_unknown_and_no_success() -> None:
    """A round ended by a pause: M NaN, paused 1, outcome paused, no success time; a good
    round then shows its M, the lag, its success time and highest deleted epoch."""
    metrics = SweeperMetrics()
    braked = RoundSummary(
        safe_epoch=7, cluster_epoch=9, eligible=3, blocked_reason="paused during the round"
    )
    metrics.hook(RoundFinished(braked, None, None))
    assert math.isnan(value(metrics, "safe_epoch"))
    assert value(metrics, "paused") == 1
    assert value(metrics, "rounds_total", outcome="paused") == 1
    assert value(metrics, "last_success_timestamp_seconds") == 0
    good = RoundSummary(
        safe_epoch=7,
        cluster_epoch=9,
        eligible=3,
        duration_s=2.0,
        unlistable_prefixes=("a/0",),
        nested_roots=("a/b", "a/c"),
    )
    metrics.hook(RoundFinished(good, 6, 1234.0))
    assert (value(metrics, "safe_epoch"), value(metrics, "epoch_lag")) == (7, 2)
    assert (value(metrics, "paused"), value(metrics, "blocked")) == (0, 0)
    assert value(metrics, "last_success_timestamp_seconds") == 1234.0
    assert value(metrics, "max_deleted_epoch") == 6
    assert value(metrics, "last_round_eligible_objects") == 3
    assert value(metrics, "prefixes_unlistable") == 1
    assert value(metrics, "nested_roots") == 2
    assert value(metrics, "rounds_total", outcome="partial") == 1  # nested roots
    assert value(metrics, "round_duration_seconds_sum") == 2.0


def test_admissions_daemon_and_journal_events_set_their_series() -> None:
    """Admissions set the M gauges; the daemon's looks its staleness gauges; rounds that
    listed nothing count by outcome; the journal counts records, bytes, segments, errors."""
    metrics = SweeperMetrics()
    for event in (
        AdmissionShown(None, 9, blocked=True, paused=False),
        RoundNotListed("idle"),
        WatermarkAgeShown(12.5),
        StalenessShown(3.0, 4.0),
        UndoWindowSet(60.0),
        UndoPendingCounted(2, 20, 99.0),
        JournalAppended(100),
        JournalAppended(50),
        JournalRotated(),
        JournalFailed("ship"),
    ):
        metrics.hook(event)
    assert math.isnan(value(metrics, "safe_epoch"))
    assert (value(metrics, "cluster_epoch"), value(metrics, "blocked")) == (9, 1)
    assert value(metrics, "rounds_total", outcome="idle") == 1
    assert value(metrics, "seconds_since_last_good_watermark") == 12.5
    assert value(metrics, "seconds_since_last_round") == 3.0
    assert value(metrics, "safe_epoch_unapplied_seconds") == 4.0
    assert value(metrics, "undo_window_seconds") == 60.0
    assert (value(metrics, "undo_pending_objects"), value(metrics, "undo_pending_bytes")) == (2, 20)
    assert value(metrics, "undo_oldest_pending_timestamp_seconds") == 99.0
    assert (value(metrics, "journal_records_total"), value(metrics, "journal_bytes_total")) == (
        2,
        150,
    )
    assert value(metrics, "journal_segments_total") == 1
    assert value(metrics, "journal_errors_total") == 1
    metrics.hook(UndoPendingCounted(0, 0, None))
    assert math.isnan(value(metrics, "undo_oldest_pending_timestamp_seconds"))
    with pytest.raises(ValueError):
        metrics.hook(PageExamined(1, (("because", 1),)))
