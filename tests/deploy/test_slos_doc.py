"""docs/slos.md is the alert rules' word (issue 42): every alert it names exists in
deploy/prometheus/l0gc-alerts.yaml with the severity it states, and its expression
reads the metric the row says it measures by."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(
    r"^\| (?P<what>[^|]+) \| (?P<metric>[^|]+) \| [^|]+ \| `(?P<alert>L0gc\w+)` "
    r"\((?P<severity>critical|warning)\) \|$"
)


def test_every_slo_row_is_an_alert_of_the_rules_file() -> None:
    """Alert name, severity and measured metric of each row match the rules."""
    rules = {
        rule["alert"]: rule
        for group in yaml.safe_load((ROOT / "deploy/prometheus/l0gc-alerts.yaml").read_text())[
            "groups"
        ]
        for rule in group["rules"]
    }
    rows = [
        m for line in (ROOT / "docs/slos.md").read_text().splitlines() if (m := ROW.match(line))
    ]
    assert len(rows) == 10
    for row in rows:
        rule = rules[row["alert"]]
        assert rule["labels"]["severity"] == row["severity"], row["alert"]
        for metric in re.findall(r"`(l0gc_\w+)", row["metric"]):
            assert metric in rule["expr"], (row["alert"], metric)
