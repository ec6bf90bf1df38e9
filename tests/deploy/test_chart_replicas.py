"""The chart's publisher replicas: several `watermark serve --replicated` pods rolled one
by one with a surge and a PDB, a headless Service for their addresses, each announcing
its pod IP, and the single-publisher mode kept to one pod stopped before its successor."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import CHART, Obj, helm, helm_env
from tests.deploy.test_chart_cli import parse_all, render

REQUIRED = ["--set", "etcd.endpoints=etcd.etcd.svc:2379", "--set", "s3.bucket=b"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's environment, in a temp home."""
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def _component(objects: list[Obj], kind: str, component: str) -> list[Obj]:
    return [
        o for o in objects
        if o["kind"] == kind
        and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]  # fmt: skip


def test_default_publisher_is_three_replicas_rolled_with_a_surge(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defaults: 3 replicas sharing the partitions, RollingUpdate (surge 1, none
    unavailable), a PDB, each announcing its pod IP; the CLI takes it all."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-values.yaml"))
    (deployment,) = _component(objects, "Deployment", "publisher")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    (pdb,) = _component(objects, "PodDisruptionBudget", "publisher")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env_vars = {e["name"]: e for e in container["env"]}
    assert env_vars["L0GC_POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.replicated is True
    assert publisher.args.advertise_url == "http://10.1.2.3:8080"
    assert publisher.args.member_lease_ttl == 5
    assert publisher.args.membership_interval == 0.5
    assert publisher.args.tick_interval == 10.0  # every replica runs the elected ticker


def test_a_headless_service_resolves_every_replica_and_is_not_scraped(
    env: dict[str, str],
) -> None:
    """The peers Service: headless, not-ready addresses published, the publisher's pods,
    and a component label the ServiceMonitor does not select (no double scrape)."""
    objects = render(
        env, "-f", str(CHART / "ci" / "publisher-values.yaml"),
        "--set", "serviceMonitor.enabled=true",
    )  # fmt: skip
    (deployment,) = _component(objects, "Deployment", "publisher")
    (peers,) = _component(objects, "Service", "publisher-peers")
    assert peers["spec"]["clusterIP"] == "None"
    assert peers["spec"]["publishNotReadyAddresses"] is True
    assert peers["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert peers["spec"]["ports"][0]["targetPort"] == "http"
    (monitor,) = _component(objects, "ServiceMonitor", "publisher")
    selected = monitor["spec"]["selector"]["matchLabels"]
    labels = peers["metadata"]["labels"]
    assert any(labels.get(key) != value for key, value in selected.items())


def test_replication_settings_reach_the_cli(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """leaseTtl and interval as durations; with TLS the replicas announce https."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-ha-values.yaml"))
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.member_lease_ttl == 10
    assert publisher.args.membership_interval == 1.0
    assert publisher.args.advertise_url == "https://10.1.2.3:8080"
    fleet = publisher.args.fleet_urls  # replication.fleetUrls, joined
    assert fleet.allows("https://10.244.7.9:8080")
    assert fleet.allows("https://p-1.publishers.example:8080")
    assert not fleet.allows("https://192.168.1.1:8080")
    assert not fleet.allows("http://10.244.7.9:8080")
    (deployment,) = _component(objects, "Deployment", "publisher")
    assert deployment["spec"]["replicas"] == 5


def test_a_single_publisher_without_replication_is_recreated(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """replication.enabled=false: one pod, Recreate, no peers Service, no --replicated."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-single-values.yaml"))
    (deployment,) = _component(objects, "Deployment", "publisher")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not _component(objects, "Service", "publisher-peers")
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.replicated is False
    assert publisher.args.advertise_url is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "publisher.replication.enabled=false"], "needs publisher.replication.enabled"),
        (["--set", "publisher.replication.enabled=false", "--set", "publisher.replicas=1"],
         "needs publisher.strategy.type=Recreate"),
        (["--set", "publisher.replication.leaseTtl=5 s"], "publisher.replication.leaseTtl"),
        (["--set", "publisher.replication.advertiseUrl=ftp://x"], "advertiseUrl"),
    ],
)  # fmt: skip
def test_unsound_replication_settings_are_refused(
    env: dict[str, str], args: list[str], message: str
) -> None:
    """Several publishers that would fence each other out, or a bad value: no render."""
    done = helm(
        env, "template", "l0gc", str(CHART), *REQUIRED, "--set", "publisher.enabled=true",
        "--set", "publisher.auth.existingSecret=t", *args,
    )  # fmt: skip
    assert done.returncode != 0
    assert message in done.stderr
