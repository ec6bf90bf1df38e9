"""What the sweep engine emits (`gcd.observe.telemetry`): events that agree with the round,
one handler for each in the metrics hook, and a sweeper that works with no hook at all."""

from __future__ import annotations

import dataclasses
import inspect

from gcd.observe import telemetry
from gcd.observe.metrics import SweeperMetrics
from gcd.observe.telemetry import (
    DAEMON_EVENTS,
    DELETER_EVENTS,
    JOURNAL_EVENTS,
    SWEEPER_EVENTS,
    AdmissionShown,
    ListSent,
    ObjectsDeleted,
    PageExamined,
    RoundFinished,
)
from gcd.rules.admission import RoundAdmission
from gcd.rules.layout import KeyLayout
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.testing.memory import MemoryObjectStore

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
NOW = 2_000_000_000.0
OLD = NOW - 3600


def event_classes() -> set[type]:
    """Every event record the module defines."""
    return {
        value
        for value in vars(telemetry).values()
        if inspect.isclass(value)
        and dataclasses.is_dataclass(value)
        and value.__module__ == telemetry.__name__
    }


def test_every_event_is_emitted_by_someone_and_counted_by_the_metrics_hook() -> None:
    """The emitters' lists name every event, and the metrics hook handles exactly those."""
    emitted = {*SWEEPER_EVENTS, *DELETER_EVENTS, *DAEMON_EVENTS, *JOURNAL_EVENTS}
    assert emitted == event_classes()
    assert set(SweeperMetrics().hook.handlers) == emitted


def test_an_admission_shows_m_only_when_it_allows_deletion() -> None:
    """Allowed: M and the cluster epoch; paused: unknown M, paused; else unknown M, blocked."""
    assert AdmissionShown.of(RoundAdmission(5, 9)) == AdmissionShown(5, 9, False, False)
    paused = RoundAdmission(None, 9, "paused by ops", paused=True)
    assert AdmissionShown.of(paused) == AdmissionShown(None, 9, False, True)
    blocked = RoundAdmission(None, 9, "M undefined")
    assert AdmissionShown.of(blocked) == AdmissionShown(None, 9, True, False)


def garbage_store() -> MemoryObjectStore:
    store = MemoryObjectStore()
    for prefix in (1, 2, 300):
        for epoch in (1, 2, 3, 50):
            store.put(LAYOUT.format(prefix, epoch, "x"), size=7, last_modified_s=OLD)
    store.put(LAYOUT.format(2, 3, "young"), last_modified_s=NOW - 5)
    return store


async def test_a_rounds_events_add_up_to_its_summary_and_its_metrics() -> None:
    """What the events of a round count is what its summary and its metrics say."""
    metrics = SweeperMetrics()
    events: list[object] = []
    sweeper = Sweeper(
        garbage_store(),
        RoundConfig(layout=LAYOUT, page_size=2),
        metrics=metrics,
        clock=lambda: NOW,
        hook=(metrics.hook, events.append),
    )
    summary = (await sweeper.sweep(10, None)).summary
    assert summary.deleted == 9
    pages = [e for e in events if isinstance(e, PageExamined)]
    deleted = [e for e in events if isinstance(e, ObjectsDeleted)]
    assert sum(e.listed for e in pages) == summary.listed
    assert sum(1 for e in events if isinstance(e, ListSent)) == summary.list_requests
    assert sum(e.objects for e in deleted) == summary.deleted
    assert sum(e.bytes for e in deleted) == summary.deleted_bytes == 63
    finished = [e for e in events if isinstance(e, RoundFinished)]
    assert [e.summary for e in finished] == [summary]
    assert finished[0].succeeded_at_s == NOW
    assert finished[0].max_deleted_epoch == 3

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(f"l0gc_sweeper_{name}", labels)

    assert sample("listed_objects_total") == summary.listed
    assert sample("list_requests_total") == summary.list_requests
    assert sample("deleted_objects_total") == summary.deleted
    assert sample("skipped_objects_total", reason="too_young") == summary.skipped_young == 1
    assert sample("rounds_total", outcome="ok") == 1
    assert sample("last_success_timestamp_seconds") == NOW


async def test_with_no_hook_a_sweeper_deletes_the_same_and_counts_nothing() -> None:
    """hook=None is the null hook: the round is the same, no metric moves (metrics given
    beside it are not fed), and without given metrics there are none at all (what a
    one-shot `gcd sweep` runs: it never imports prometheus_client)."""
    counted, silent = garbage_store(), garbage_store()
    config = RoundConfig(layout=LAYOUT, page_size=2)
    expected = (await Sweeper(counted, config, clock=lambda: NOW).sweep(10, None)).summary
    bare = Sweeper(garbage_store(), config, clock=lambda: NOW, hook=None)
    assert (bare.metrics, bare.hook, bare.deleter.metrics) == (None, None, None)
    assert (await bare.sweep(10, None)).summary.deleted == expected.deleted
    sweeper = Sweeper(silent, config, clock=lambda: NOW, hook=None, metrics=SweeperMetrics())
    summary = (await sweeper.sweep(10, None)).summary
    assert silent.keys() == counted.keys()
    assert dataclasses.replace(summary, duration_s=0, round=None) == dataclasses.replace(
        expected, duration_s=0, round=None
    )
    assert sweeper.metrics is not None
    registry = sweeper.metrics.registry
    assert registry.get_sample_value("l0gc_sweeper_listed_objects_total") == 0
    assert registry.get_sample_value("l0gc_sweeper_rounds_total", {"outcome": "ok"}) == 0
    assert registry.get_sample_value("l0gc_sweeper_deleted_objects_total") == 0
