"""helm/l0gc/README.md is generated from values.yaml and values.schema.json
(scripts/gen_chart_readme.py): a value added, removed, renamed or re-documented without
regenerating it fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "l0gc"
SCRIPT = REPO / "scripts" / "gen_chart_readme.py"


def _leaves(tree: dict[str, object], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        keys.add(f"{prefix}{key}")
        if isinstance(value, dict) and value:
            keys |= _leaves(value, f"{prefix}{key}.")
    return keys


def test_chart_readme_is_current() -> None:
    """`gen_chart_readme.py --check` passes: the README is what the values give."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_chart_readme_lists_every_value_with_its_default() -> None:
    """Each values.yaml key with a `# --` comment has a row, in file order, with its default."""
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    rows = [line.split(" | ") for line in readme.splitlines() if line.startswith("| `")]
    listed = [row[0].removeprefix("| `").removesuffix("`") for row in rows]
    assert len(listed) == len(set(listed))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert set(listed) <= _leaves(values)
    for path in (
        "publisher.podAntiAffinityPreset",
        "publisher.startupProbe.failureThreshold",
        "sweeper.sidecars",
        "helmTest.enabled",
        "etcd.endpoints",
    ):
        assert path in listed, path
    defaults = {row[0].removeprefix("| `").removesuffix("`"): row[2] for row in rows}
    assert defaults["publisher.podAntiAffinityPreset"] == '`"soft"`'
    assert defaults["publisher.replicas"] == "`3`"


def test_a_changed_comment_makes_the_readme_stale(tmp_path: Path) -> None:
    """The check really compares: a copy of the chart with one comment changed is stale."""
    chart = tmp_path / "repo" / "helm" / "l0gc"
    chart.mkdir(parents=True)
    for name in ("values.yaml", "values.schema.json", "README.md"):
        (chart / name).write_bytes((CHART / name).read_bytes())
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace("# -- Publisher replicas.", "# -- Replicas."))
    script = tmp_path / "repo" / "scripts" / SCRIPT.name
    script.parent.mkdir()
    script.write_bytes(SCRIPT.read_bytes())
    done = subprocess.run(
        [sys.executable, str(script), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1
    assert "helm/l0gc/README.md is stale" in done.stdout
