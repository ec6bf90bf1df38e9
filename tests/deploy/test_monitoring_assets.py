"""The Grafana dashboard and the Prometheus alert rules shipped with l0gc.

Canonical copies live in helm/l0gc/files/ (the chart can only read files inside
itself); deploy/grafana/ and deploy/prometheus/ hold byte-identical copies for users
without Helm. Every metric and label the assets query must be one the sweeper and the
publisher export, so a renamed metric breaks this test rather than a dashboard panel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gcd.observe.metrics import SweeperMetrics
from watermark.service.metrics import WatermarkMetrics

REPO = Path(__file__).resolve().parents[2]
CANONICAL = REPO / "helm" / "l0gc" / "files"
DASHBOARD = REPO / "deploy" / "grafana" / "l0gc-dashboard.json"
ALERTS = REPO / "deploy" / "prometheus" / "l0gc-alerts.yaml"

# The exported metrics (issue spec) and their labels; histograms also expose
# _bucket{le}, _sum and _count.
COUNTERS = {
    "l0gc_sweeper_deleted_objects_total": set(),
    "l0gc_sweeper_deleted_bytes_total": set(),
    "l0gc_sweeper_listed_objects_total": set(),
    "l0gc_sweeper_skipped_objects_total": {"reason"},
    "l0gc_sweeper_list_requests_total": set(),
    "l0gc_sweeper_delete_requests_total": set(),
    "l0gc_sweeper_list_errors_total": {"code"},
    "l0gc_sweeper_delete_errors_total": {"code"},
    "l0gc_sweeper_rounds_total": {"outcome"},
    "l0gc_reference_conflicts_total": set(),
    "l0gc_watermark_fences_total": {"result"},
    "l0gc_watermark_window_slides_total": set(),
    "l0gc_watermark_publishes_total": {"outcome"},
    "l0gc_watermark_epoch_advances_total": set(),
    "l0gc_watermark_fencing_violations_total": set(),
    "l0gc_watermark_adoptions_total": {"log_end"},
    "l0gc_watermark_handovers_total": {"outcome"},
    "l0gc_watermark_redirects_total": set(),
}
GAUGES = {
    "l0gc_sweeper_safe_epoch",
    "l0gc_sweeper_cluster_epoch",
    "l0gc_sweeper_epoch_lag",
    "l0gc_sweeper_max_deleted_epoch",
    "l0gc_sweeper_blocked",
    "l0gc_sweeper_paused",
    "l0gc_sweeper_seconds_since_last_good_watermark",
    "l0gc_sweeper_last_round_eligible_objects",
    "l0gc_sweeper_last_success_timestamp_seconds",
    "l0gc_sweeper_seconds_since_last_round",
    "l0gc_sweeper_safe_epoch_unapplied_seconds",
    "l0gc_watermark_inflight_fences",
    "l0gc_watermark_partitions_owned",
    "l0gc_watermark_min_watermark",
    "l0gc_watermark_log_end_unknown_partitions",
    "l0gc_watermark_log_end_unknown_seconds",
    "l0gc_watermark_cluster_epoch",
    "l0gc_watermark_ticker_leader",
    "l0gc_watermark_ticker_interval_seconds",
    "l0gc_watermark_ticker_last_advance_timestamp_seconds",
    "l0gc_watermark_longest_unowned_seconds",
    "l0gc_watermark_partitions_unowned",
    "l0gc_watermark_replicas",
}
HISTOGRAMS = {
    "l0gc_sweeper_round_duration_seconds",
    "l0gc_watermark_publish_duration_seconds",
    "l0gc_watermark_time_to_adopt_seconds",
}
REPLICA_METRICS = {
    "l0gc_watermark_partitions_owned",
    "l0gc_watermark_partitions_unowned",
    "l0gc_watermark_replicas",
    "l0gc_watermark_adoptions_total",
    "l0gc_watermark_handovers_total",
    "l0gc_watermark_redirects_total",
    "l0gc_watermark_time_to_adopt_seconds_bucket",
    "l0gc_watermark_longest_unowned_seconds",
}
"""What an operator of replicated publishers watches: each must be on the dashboard."""
KNOWN: dict[str, set[str]] = {
    **COUNTERS,
    **{name: set() for name in GAUGES},
    **{f"{name}_bucket": {"le"} for name in HISTOGRAMS},
    **{f"{name}_{suffix}": set() for name in HISTOGRAMS for suffix in ("sum", "count")},
}
# Labels Prometheus (and the Prometheus Operator) attach to every scraped series.
TARGET_LABELS = {"namespace", "job", "pod", "instance", "service", "container", "endpoint"}
RUNBOOK_ANCHORS = {
    "gc-blocked",
    "m-not-advancing",
    "slowdown-storms",
    "pausing",
    "fencing-violation",
    "reference-conflict",
    "sweeper-or-publisher-down",
    "partition-without-owner",
    "log-end-unknown",
    "epoch-ticker",
    "gc-stalled",
}
# The scrape-health series Prometheus makes itself (only target labels), and the job
# matchers the down/absent alerts use (the chart pins them to a release).
UP_SELECTOR = re.compile(r"\bup\s*\{([^}]*)\}")
JOB_MATCHERS = {"sweeper": 'job=~".*l0gc-sweeper"', "publisher": 'job=~".*l0gc-publisher"'}
METRIC = re.compile(r"\bl0gc_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(l0gc_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def exported_series() -> set[str]:
    """Series names the product's metric registries actually expose."""
    names: set[str] = set()
    for metrics in (SweeperMetrics(), WatermarkMetrics()):
        for family in metrics.registry.collect():
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names.update(f"{family.name}_{s}" for s in ("bucket", "sum", "count"))
            else:
                names.add(family.name)
    return names


def check_query(expr: str, where: str) -> set[str]:
    """Assert `expr` uses only known metrics and labels; return the metrics it uses.

    Besides l0gc metrics, an expression may use `up{...}` with target labels only.
    """
    used = set(METRIC.findall(expr))
    ups = UP_SELECTOR.findall(expr)
    assert used or ups, f"{where}: no l0gc metric and no up{{...}} in {expr!r}"
    for matchers in ups:
        for label in MATCHER.findall(matchers):
            assert label in TARGET_LABELS, f"{where}: label {label!r} on up"
    unknown = used - set(KNOWN)
    assert not unknown, f"{where}: unknown metrics {sorted(unknown)}"
    allowed = TARGET_LABELS | {label for name in used for label in KNOWN[name]}
    for _name, matchers in SELECTOR.findall(expr):
        for label in MATCHER.findall(matchers):
            assert label in allowed or label == "__name__", f"{where}: label {label!r}"
    for group in GROUPING.findall(expr):
        for label in filter(None, (part.strip() for part in group.split(","))):
            assert label in allowed, f"{where}: grouping label {label!r}"
    for opening, closing in ("()", "[]", "{}"):
        assert expr.count(opening) == expr.count(closing), f"{where}: unbalanced {opening}"
    return used


def test_spec_metrics_are_exported_by_the_product() -> None:
    """Every metric the assets may use is exported by the sweeper's or the publisher's metrics."""
    missing = set(KNOWN) - exported_series()
    assert not missing, f"not exported by the product: {sorted(missing)}"


@pytest.mark.parametrize("name", ["l0gc-dashboard.json", "l0gc-alerts.yaml"])
def test_deploy_copies_match_the_chart_files(name: str) -> None:
    """deploy/ copies are byte-identical to the canonical files in helm/l0gc/files/."""
    copy = DASHBOARD if name.endswith(".json") else ALERTS
    assert copy.read_bytes() == (CANONICAL / name).read_bytes(), (
        f"{copy.relative_to(REPO)} differs from helm/l0gc/files/{name}: edit the chart file, "
        f"then `cp helm/l0gc/files/{name} {copy.relative_to(REPO)}`"
    )


# --- dashboard ------------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _queries() -> Iterator[tuple[str, str]]:
    for panel in _panels(_dashboard()):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_dashboard_is_valid_grafana_json() -> None:
    """The dashboard parses, has a stable uid, unique panel ids and non-overlapping panels."""
    dashboard = _dashboard()
    assert dashboard["uid"] == "l0gc-overview"
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    panels = list(_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"


def test_the_dashboard_shows_the_replicas() -> None:
    """Partitions per replica, unowned partitions, adoptions, handovers, redirects and the
    time to adopt each appear in a dashboard query."""
    used = {name for _, expr in _queries() for name in METRIC.findall(expr)}
    assert used >= REPLICA_METRICS, f"not on the dashboard: {sorted(REPLICA_METRICS - used)}"


def test_dashboard_queries_use_only_exported_metrics_and_labels() -> None:
    """Every dashboard query references known metrics and labels, scoped by $namespace/$job."""
    for title, expr in _queries():
        check_query(expr, f"panel {title!r}")
        for _name, matchers in SELECTOR.findall(expr):
            assert 'namespace=~"$namespace"' in matchers, f"panel {title!r} ignores $namespace"
            assert 'job=~"$job"' in matchers, f"panel {title!r} ignores $job"
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "job"}
    for name in ("namespace", "job"):
        check_query(variables[name]["query"]["query"], f"variable {name}")


@pytest.mark.parametrize(
    ("topic", "metrics"),
    [
        ("garbage backlog", {"l0gc_sweeper_last_round_eligible_objects"}),
        ("deletes/s", {"l0gc_sweeper_deleted_objects_total"}),
        ("bytes deleted/s", {"l0gc_sweeper_deleted_bytes_total"}),
        ("safe vs cluster epoch", {"l0gc_sweeper_safe_epoch", "l0gc_sweeper_cluster_epoch"}),
        ("epoch lag", {"l0gc_sweeper_epoch_lag"}),
        (
            "LIST/DELETE requests",
            {"l0gc_sweeper_list_requests_total", "l0gc_sweeper_delete_requests_total"},
        ),
        ("errors by code", {"l0gc_sweeper_list_errors_total", "l0gc_sweeper_delete_errors_total"}),
        ("rounds by outcome", {"l0gc_sweeper_rounds_total"}),
        ("blocked/paused", {"l0gc_sweeper_blocked", "l0gc_sweeper_paused"}),
        ("last good watermark", {"l0gc_sweeper_seconds_since_last_good_watermark"}),
        ("publisher fences", {"l0gc_watermark_fences_total"}),
        ("publisher publishes", {"l0gc_watermark_publishes_total"}),
    ],
)
def test_dashboard_has_a_panel_for(topic: str, metrics: set[str]) -> None:
    """Each required view is one panel that queries all of its metrics."""
    by_panel: dict[str, set[str]] = {}
    for title, expr in _queries():
        by_panel.setdefault(title, set()).update(METRIC.findall(expr))
    assert any(metrics <= used for used in by_panel.values()), f"no panel shows {topic}"


def test_the_dashboard_opens_on_stat_panels_of_what_people_look_at_first() -> None:
    """The top row is stat panels: GC lag, M vs epoch, deletes/s, bytes reclaimed and the
    last round's age, each with the metrics it needs (issue 42: time series only before)."""
    top = [p for p in _dashboard()["panels"] if p["gridPos"]["y"] < 5 and p["type"] != "row"]
    assert {p["type"] for p in top} == {"stat"}
    shown = {
        p["title"]: set(METRIC.findall(" ".join(t["expr"] for t in p["targets"]))) for p in top
    }
    assert shown == {
        "GC lag (epochs)": {"l0gc_sweeper_epoch_lag"},
        "M vs cluster epoch": {"l0gc_sweeper_safe_epoch", "l0gc_sweeper_cluster_epoch"},
        "Deletes/s": {"l0gc_sweeper_deleted_objects_total"},
        "Bytes reclaimed": {"l0gc_sweeper_deleted_bytes_total"},
        "Last round age": {"l0gc_sweeper_seconds_since_last_round"},
    }


def test_dashboard_breaks_errors_down_by_code_and_rounds_by_outcome() -> None:
    """Error panels group by `code`, round panels by `outcome`."""
    exprs = [expr for _, expr in _queries()]
    for metric, label in (
        ("l0gc_sweeper_list_errors_total", "code"),
        ("l0gc_sweeper_delete_errors_total", "code"),
        ("l0gc_sweeper_rounds_total", "outcome"),
        ("l0gc_watermark_publishes_total", "outcome"),
        ("l0gc_watermark_fences_total", "result"),
    ):
        assert any(metric in e and f"by ({label})" in e for e in exprs), metric


# --- alert rules ---------------------------------------------------------------------


def _rules() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    assert set(document) == {"groups"}
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    by_name = {rule["alert"]: rule for rule in rules}
    assert len(by_name) == len(rules), "duplicate alert names"
    return by_name


ALERTS_DOC = REPO / "docs" / "kubernetes.md"


def test_alert_set_is_complete() -> None:
    """The rules file defines exactly the twenty l0gc alerts."""
    assert set(_rules()) == {
        "L0gcSweeperBlocked",
        "L0gcSweeperStalled",
        "L0gcEpochLagGrowing",
        "L0gcDeleteErrorRate",
        "L0gcNoSuccessfulRound",
        "L0gcWatermarkStale",
        "L0gcPublisherStaleOwner",
        "L0gcFencingViolation",
        "L0gcReferenceConflict",
        "L0gcPartitionWithoutOwner",
        "L0gcLogEndUnknown",
        "L0gcSweeperDown",
        "L0gcSweeperAbsent",
        "L0gcSweeperMetricsAbsent",
        "L0gcPublisherDown",
        "L0gcPublisherAbsent",
        "L0gcPublisherMetricsAbsent",
        "L0gcEpochTickerStopped",
        "L0gcTickerLeaderMissing",
        "L0gcTickerMultipleLeaders",
    }


def test_every_alert_is_in_the_docs_table_with_its_runbook() -> None:
    """docs/kubernetes.md's alert table lists every alert once, with its runbook anchor."""
    rows = {}
    for line in ALERTS_DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `(L0gc[A-Za-z]+)`[^|]*\|[^|]*\| \[#([a-z0-9-]+)\]", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} is in the table twice"
            rows[match.group(1)] = match.group(2)
    rules = _rules()
    assert set(rows) == set(rules), "the alert table and the rules file differ"
    for name, anchor in rows.items():
        assert rules[name]["annotations"]["runbook_url"].endswith(f"#{anchor}"), name


@pytest.mark.parametrize("component", sorted(JOB_MATCHERS))
def test_down_and_absent_alerts_cover_each_component(component: str) -> None:
    """Per component: up == 0, absent(up), and up without l0gc metrics, on the chart's job."""
    matcher = JOB_MATCHERS[component]
    title = component.capitalize()
    rules = _rules()
    assert rules[f"L0gc{title}Down"]["expr"] == f"up{{{matcher}}} == 0"
    assert rules[f"L0gc{title}Absent"]["expr"] == f"absent(up{{{matcher}}})"
    metric = {"sweeper": "l0gc_sweeper_blocked", "publisher": "l0gc_watermark_partitions_owned"}
    assert rules[f"L0gc{title}MetricsAbsent"]["expr"] == (
        f"up{{{matcher}}} == 1 unless on (job, instance) {metric[component]}"
    )
    # The metric it relies on is always exported (a gauge without labels).
    assert metric[component] in exported_series()
    for kind in ("Down", "Absent"):
        assert rules[f"L0gc{title}{kind}"]["labels"]["severity"] == "critical"


def test_alerts_are_well_formed_with_runbooks() -> None:
    """Each alert has a known-metric expr, a `for`, a severity and summary/description/runbook."""
    for name, rule in _rules().items():
        used = check_query(rule["expr"], name)
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        annotations = rule["annotations"]
        assert annotations["summary"], name
        assert annotations["description"], name
        url, _, anchor = annotations["runbook_url"].partition("#")
        assert url.startswith("https://"), name
        assert url.endswith("/docs/operations.md"), name
        assert anchor in RUNBOOK_ANCHORS, name
        allowed = TARGET_LABELS | {label for metric in used for label in KNOWN[metric]}
        for text in annotations.values():
            for label in re.findall(r"\$labels\.([A-Za-z_]+)", text):
                assert label in allowed, f"{name}: annotation uses label {label!r}"


@pytest.mark.parametrize(
    ("alert", "must_contain", "duration"),
    [
        ("L0gcSweeperBlocked", ["l0gc_sweeper_blocked == 1"], "15m"),
        (
            "L0gcSweeperStalled",
            [
                "l0gc_sweeper_seconds_since_last_round) > 2400",
                "l0gc_sweeper_safe_epoch_unapplied_seconds) > 2400",
            ],
            "5m",
        ),
        ("L0gcEpochLagGrowing", ["deriv(l0gc_sweeper_epoch_lag[30m]) > 0", "> 10"], None),
        ("L0gcDeleteErrorRate", ["l0gc_sweeper_delete_errors_total", "> 0.05"], "15m"),
        (
            "L0gcNoSuccessfulRound",
            ["time() - l0gc_sweeper_last_success_timestamp_seconds > 1800"],
            None,
        ),
        ("L0gcWatermarkStale", ["l0gc_sweeper_seconds_since_last_good_watermark > 600"], None),
        (
            "L0gcPublisherStaleOwner",
            ['l0gc_watermark_publishes_total{outcome="stale_owner"}'],
            None,
        ),
        ("L0gcFencingViolation", ["l0gc_watermark_fencing_violations_total", "> 0"], "0m"),
        ("L0gcPartitionWithoutOwner", ["l0gc_watermark_longest_unowned_seconds", "> 30"], "30s"),
        (
            "L0gcEpochTickerStopped",
            [
                "l0gc_watermark_ticker_last_advance_timestamp_seconds",
                "3 * max by (namespace, job) (l0gc_watermark_ticker_interval_seconds) + 60",
            ],
            "5m",
        ),
        (
            "L0gcTickerLeaderMissing",
            [
                "sum by (namespace, job) (l0gc_watermark_ticker_leader) == 0",
                "(l0gc_watermark_ticker_interval_seconds) > 0",
            ],
            "2m",
        ),
        (
            "L0gcTickerMultipleLeaders",
            ["sum by (namespace, job) (l0gc_watermark_ticker_leader) > 1"],
            "5m",
        ),
    ],
)
def test_alert_thresholds_match_the_spec(
    alert: str, must_contain: list[str], duration: str | None
) -> None:
    """Each alert fires on the condition and for the duration the issue specifies."""
    rule = _rules()[alert]
    for text in must_contain:
        assert text in rule["expr"], f"{alert}: {text!r} not in {rule['expr']!r}"
    if duration is not None:
        assert rule["for"] == duration
