"""The chart's deletion journal (issue 36 item 7): a volume of its own with a size limit,
shipped to the audit prefix, deleted locally once verified, pruned after a retention;
refused without an audit prefix (the volume would only fill)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import CHART, helm, helm_env, pod_spec
from tests.deploy.test_chart_cli import parse_all, render


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's environment, in a temp home."""
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def test_the_journal_gets_a_bounded_volume_shipping_and_retention(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(env, "-f", str(CHART / "ci" / "journal-values.yaml"))
    (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
    spec = pod_spec(sts)
    (volume,) = [v for v in spec["volumes"] if v["name"] == "journal"]
    assert volume["emptyDir"] == {"sizeLimit": "128Mi"}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["journal"] == "/var/lib/l0gc/journal"
    sweeper = parse_all(objects, tmp_path, monkeypatch)["sweeper"]
    args = sweeper.args
    assert Path(args.journal_dir).name == "journal"
    assert args.journal_prefix == "l0gc-audit/journal"
    assert args.journal_max_bytes == 4 * 1024 * 1024
    assert args.journal_max_age == 3600.0
    assert args.journal_retention == 30 * 86400.0
    assert args.journal_keep_local is False


def test_the_journal_and_the_undo_window_are_on_by_default_and_need_a_prefix(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 55: the default install journals every deletion, ships it to
    l0gc-audit/journal and keeps an undo window of 1 h (operations.md calls it the
    chart's default); enabled without a prefix, the chart refuses to render."""
    objects = render(env, "--set", "etcd.endpoints=e:2379", "--set", "s3.bucket=b")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert "journal" in {v["name"] for v in pod_spec(deployment)["volumes"]}
    args = parse_all(objects, tmp_path, monkeypatch)["sweeper"].args
    assert (args.journal_prefix, args.undo_window) == ("l0gc-audit/journal", 3600.0)
    done = helm(
        env,
        "template",
        "l0gc",
        str(CHART),
        "--set",
        "etcd.endpoints=e:2379",
        "--set",
        "s3.bucket=b",
        "--set",
        "sweeper.journal.prefix=",
    )
    assert done.returncode != 0
    assert "sweeper.journal.prefix is required with sweeper.journal.enabled" in done.stderr
