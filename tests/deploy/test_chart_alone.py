"""The chart without values, as docs/kubernetes.md describes it (issue 42): `helm lint
--strict` passes (a template's `fail` is only [INFO] to lint), `helm template` fails,
naming the missing etcd.endpoints; and `extraEnv` entries the schema refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import REPO, helm, helm_env


def test_lint_alone_passes_and_template_alone_fails_naming_etcd(tmp_path: Path) -> None:
    """What the docs say about the chart alone is what helm does."""
    env = helm_env(tmp_path)
    lint = helm(env, "lint", "--strict", "helm/l0gc")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "[INFO] Fail: etcd.endpoints is required" in lint.stdout + lint.stderr
    template = helm(env, "template", "l0gc", "helm/l0gc")
    assert template.returncode == 1
    assert "etcd.endpoints is required" in template.stderr
    docs = " ".join((REPO / "docs" / "kubernetes.md").read_text().split())
    assert "`helm lint --strict` of the chart alone passes" in docs
    assert "`helm template` (or install) of the chart alone fails on purpose" in docs


@pytest.mark.parametrize(
    "bad",
    [
        "sweeper.extraEnv[0].value=x",  # no name
        "publisher.extraEnv[0].name=A B",  # not an environment variable name
    ],
)
def test_extra_env_entries_are_checked_by_the_schema(tmp_path: Path, bad: str) -> None:
    """extraEnv takes EnvVar entries (a name, and a value or valueFrom): others are refused
    at render time with the schema's message."""
    env = helm_env(tmp_path)
    done = helm(
        env,
        "template",
        "l0gc",
        "helm/l0gc",
        "--set",
        "etcd.endpoints=e:2379",
        "--set",
        "s3.bucket=b",
        "--set",
        bad,
    )
    assert done.returncode == 1
    assert "extraEnv" in done.stderr
