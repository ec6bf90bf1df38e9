"""The alert rules and the dashboard, proven by a real Prometheus (the Debian package).

- `promtool check rules` parses deploy/prometheus/l0gc-alerts.yaml;
- `promtool test rules` runs deploy/prometheus/l0gc-alerts.test.yaml: for every alert,
  series that make it fire and series that must keep it quiet;
- a real Prometheus on a loopback port scrapes a real `gcd daemon` and a real
  `watermark serve` (real etcd, moto) every 0.25 s, loads the rules, and answers every
  dashboard query and every alert expression with series.

An alert's condition holds only when something is wrong, so each alert expression is
evaluated as itself (it must parse and run) and as its *measured* form, which must
return series from healthy processes: comparisons get `bool` (0/1 instead of a filter),
`unless` becomes `and`, `absent(x)` becomes `(x)`. A renamed metric or label, a typo in
a matcher, or a selector no scrape can satisfy then fails here rather than in a cluster.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3, free_port
from l0lab.testing.procs import Child, wait_http
from tests.binding import bind
from tests.serving import new_serve
from tests.waiting import wait_until_sync

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "l0gc-alerts.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "l0gc-alerts.test.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "l0gc-dashboard.json"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
SCRAPE = "250ms"
TICK_S = 1.0  # slow enough that a loaded machine never shows an epoch lag above 10
# What Grafana substitutes before a query reaches Prometheus: every namespace and job,
# and a rate window holding several scrapes.
GRAFANA_VARIABLES = {"$namespace": ".*", "$job": ".*", "$__rate_interval": "5s", "$__range": "1m"}
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$")


def _require(tool: str | None, name: str) -> str:
    assert tool, f"{name} not on PATH: scripts/bootstrap.sh installs the prometheus package"
    return tool


def _alerts() -> dict[str, str]:
    document = yaml.safe_load(RULES.read_text())
    return {rule["alert"]: rule["expr"] for group in document["groups"] for rule in group["rules"]}


# --- promtool -------------------------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    """`promtool check rules` accepts the rules file and counts every alert in it."""
    done = subprocess.run(
        [_require(PROMTOOL, "promtool"), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in done.stdout


def test_every_alert_has_a_promtool_unit_test_that_fires_and_stays_quiet() -> None:
    """Each alert has a test group of its own, evaluated at a time it must be quiet and
    at a time it must fire; `promtool test rules` passes them all."""
    document = yaml.safe_load(RULE_TESTS.read_text())
    evaluated: dict[str, list[int]] = {}
    for group in document["tests"]:
        for case in group["alert_rule_test"]:
            evaluated.setdefault(case["alertname"], []).append(len(case["exp_alerts"]))
    assert set(evaluated) == set(_alerts()), "alerts without a unit test, or tests of none"
    for name, fired in evaluated.items():
        assert 0 in fired, f"{name}: no evaluation where it must stay quiet"
        assert any(fired), f"{name}: no evaluation where it must fire"
    done = subprocess.run(
        [_require(PROMTOOL, "promtool"), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- PromQL as Prometheus evaluates it --------------------------------------------------

_SKIPPED = re.compile(r'("(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\])')
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?!\s*bool\b)")


def measured(expr: str) -> str:
    """The alert expression with its conditions turned into values (module docstring)."""
    parts = _SKIPPED.split(expr)
    for i in range(0, len(parts), 2):  # outside strings, selectors and ranges
        part = _COMPARISON.sub(r"\1 bool", parts[i])
        part = re.sub(r"\bunless\b", "and", part)
        parts[i] = re.sub(r"\babsent\s*\(", "(", part)
    return "".join(parts)


def test_measured_turns_conditions_into_values() -> None:
    """Comparisons get bool, outside selectors only; unless and absent are undone."""
    assert measured('x{a=~"b>c"} > 10 and y[5m] <= 3') == (
        'x{a=~"b>c"} > bool 10 and y[5m] <= bool 3'
    )
    assert measured('up{job=~".*s"} == 1 unless on (job) m') == (
        'up{job=~".*s"} == bool 1 and on (job) m'
    )
    assert measured('absent(up{job="x"})') == '(up{job="x"})'
    assert measured("a > bool 1") == "a > bool 1"


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every dashboard panel target, as Grafana would send it."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for top in dashboard["panels"] for p in (top, *top.get("panels", []))]
    for panel in panels:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} ({target.get('refId')})", grafana(target["expr"])


def grafana(expr: str) -> str:
    """`expr` with the dashboard's template variables replaced."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a template variable the test does not know in {expr!r}"
    return expr


class PromAPI:
    """The HTTP API of the Prometheus under test."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return list(data["result"])


def prometheus_config(tmp: Path, sweeper: str, publisher: str) -> Path:
    """Scrape both processes as the chart's ServiceMonitors would name them (jobs ending
    l0gc-sweeper / l0gc-publisher, namespace and pod labels), with the repo's rules."""
    config = {
        "global": {
            "scrape_interval": SCRAPE,
            "scrape_timeout": SCRAPE,
            "evaluation_interval": SCRAPE,
        },
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "ci-l0gc-sweeper",
                "static_configs": [
                    {"targets": [sweeper], "labels": {"namespace": "ci", "pod": "sweeper-0"}}
                ],
            },
            {
                "job_name": "ci-l0gc-publisher",
                "static_configs": [
                    {"targets": [publisher], "labels": {"namespace": "ci", "pod": "publisher-0"}}
                ],
            },
        ],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _prepare(etcd: str, namespace: str, s3: str, bucket: str) -> None:
    await bind(etcd, namespace, s3, bucket)
    kv = await open_kv(EtcdSettings(endpoints=(etcd,), namespace=namespace))
    try:
        await WatermarkStore(kv, namespace).init_cluster_epoch(1)
    finally:
        await kv.close()


@pytest.mark.integration
def test_a_real_prometheus_answers_every_dashboard_and_alert_query(
    etcd_server: LocalEtcd, s3_server: LocalS3, bucket: str, namespace: str, tmp_path: Path
) -> None:
    """Prometheus scrapes a live daemon and publisher: every dashboard query, template
    variable and (measured) alert expression returns series, every alert expression and
    rule evaluates without error, and no alert holds for healthy processes (one ticker
    leader, the epoch moving)."""
    prometheus = _require(PROMETHEUS, "prometheus")
    asyncio.run(_prepare(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket))
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    sweeper_port, publisher_port, prom_port = free_port(), free_port(), free_port()
    token = tmp_path / "tokens"
    token.write_text("writer:writer-token-0123456789abcdef\n")
    token.chmod(0o600)
    children = [
        Child(
            "gcd-daemon",
            [
                sys.executable,
                "-m",
                "gcd",
                "daemon",
                "--bucket",
                bucket,
                "--endpoint-url",
                s3_server.endpoint_url,
                "--region",
                "us-east-1",
                *etcd,
                "--interval",
                "0.2s",
                "--idle-interval",
                "0.5s",
                "--http-host",
                "127.0.0.1",
                "--http-port",
                str(sweeper_port),
            ],
            tmp_path / "daemon.log",
        ),
        new_serve(
            etcd_server,
            namespace,
            tmp_path / "serve.log",
            "--register",
            "--auth-token-file",
            str(token),
            "--tick-interval",
            f"{TICK_S}s",
            "--ticker-lease-ttl",
            "2",
            "--publish-interval",
            "0.2s",
            partitions=("orders/0",),
            port=publisher_port,
        ).child,
    ]
    sweeper, publisher = f"127.0.0.1:{sweeper_port}", f"127.0.0.1:{publisher_port}"
    config = prometheus_config(tmp_path, sweeper, publisher)
    children.append(
        Child(
            "prometheus",
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
            tmp_path / "prometheus.log",
        )
    )
    try:
        for child in children:
            child.start()
        addresses = (sweeper, publisher, f"127.0.0.1:{prom_port}")
        for child, url in zip(children, addresses, strict=True):
            path = "/-/ready" if child.name == "prometheus" else "/metrics"
            assert wait_http(f"http://{url}{path}", 30, child=child), child.tail()
        api = PromAPI(f"http://127.0.0.1:{prom_port}")
        _check(api, children)
    finally:  # all at once: each takes about a second to drain and exit
        with ThreadPoolExecutor(len(children)) as pool:
            list(pool.map(Child.stop, children))


def _check(api: PromAPI, children: list[Child]) -> None:
    queries = [*dashboard_queries()]
    queries += [(f"alert {name} (measured)", measured(expr)) for name, expr in _alerts().items()]
    pending = dict(queries)

    def all_answered() -> bool:
        for child in children:
            assert child.alive, f"{child.name} exited: {child.tail()}"
        for where, expr in list(pending.items()):
            if api.query(expr):
                del pending[where]
        return not pending

    started = time.monotonic()
    wait_until_sync(
        all_answered,
        timeout_s=60,
        what="series for every dashboard and alert query",
        detail=lambda: "\n".join(f"{w}: {e}" for w, e in pending.items()),
    )
    answered_s = time.monotonic() - started
    # What the last scrapes hold, checked as of one moment: a scrape that timed out (a
    # 0.25 s budget, which a loaded machine can miss) marks its target's series stale until
    # the next one, so a check that fails is made again; a wrong name or label never passes.
    wait_until_sync(
        lambda: _scraped(api),
        timeout_s=60,
        what="the scraped series as expected",
        ignore=(AssertionError,),
    )
    # The dashboard's template variables (Grafana's label_values) find the targets.
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(variable["query"]["query"])
        assert match, variable["query"]
        values = api.get(f"/api/v1/label/{match[2]}/values", **{"match[]": grafana(match[1])})
        expected = {"namespace": ["ci"], "job": ["ci-l0gc-publisher", "ci-l0gc-sweeper"]}
        assert values == expected[variable["name"]], (variable["name"], values)
    # The alerts as written evaluate; Prometheus loaded and evaluated every rule.
    for expr in _alerts().values():
        api.query(expr)
    wait_until_sync(
        lambda: all(r["lastEvaluation"] > "2000" for r in _rules(api)),
        timeout_s=60,
        what="every rule evaluated once",
    )
    rules = _rules(api)
    assert {r["name"] for r in rules} == set(_alerts())
    for rule in rules:
        assert rule["health"] == "ok", rule
    # Healthy processes: no alert pending or firing (one left from before the first
    # scrapes, or from a scrape a loaded machine made late, clears at the next evaluation,
    # every 0.25 s).
    wait_until_sync(
        lambda: not api.get("/api/v1/alerts")["alerts"],
        timeout_s=60,
        what="no alert pending or firing",
        detail=lambda: str(api.get("/api/v1/alerts")),
    )
    print(f"every query answered {answered_s:.1f} s after Prometheus was ready")


def _scraped(api: PromAPI) -> bool:
    """Both targets up, their build, process and ticker series as a healthy pair of
    processes has them; one ticker leader, the epoch moving. Raises AssertionError if not."""
    up = {s["metric"]["job"]: s["value"][1] for s in api.query("up")}
    assert up == {"ci-l0gc-sweeper": "1", "ci-l0gc-publisher": "1"}, up
    builds = api.query("l0gc_build_info")
    assert {s["metric"]["component"] for s in builds} == {"sweeper", "publisher"}, builds
    for series in builds:
        assert series["metric"]["version"] not in ("", "unknown"), series
    assert len(api.query("process_resident_memory_bytes")) == 2
    assert len(api.query("python_gc_collections_total")) == 6
    # One publisher with a running ticker: one leader, the epoch moving.
    assert [s["value"][1] for s in api.query("l0gc_watermark_ticker_leader")] == ["1"]
    for name in ("L0gcEpochTickerStopped", "L0gcTickerLeaderMissing", "L0gcTickerMultipleLeaders"):
        assert not api.query(_alerts()[name]), name
    interval = api.query("l0gc_watermark_ticker_interval_seconds")
    assert [float(s["value"][1]) for s in interval] == [TICK_S], interval
    return True


def _rules(api: PromAPI) -> list[dict[str, Any]]:
    return [rule for group in api.get("/api/v1/rules")["groups"] for rule in group["rules"]]
