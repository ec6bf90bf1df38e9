"""The chart's publisher replicas: a StatefulSet of `watermark serve --replicated` pods
rolled one by one with a PDB, a headless governing Service, each announcing its stable
name and always given the fleet's pattern (issue 36 #5), probes on a port of their own
(#6), and the single-publisher mode kept to one pod stopped before its successor."""

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
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]


def test_default_publisher_is_a_statefulset_of_three_with_stable_names(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defaults: 3 replicas sharing the partitions, a StatefulSet governed by the peers
    Service (rolled one pod at a time), a PDB; each announces its stable name, the fleet
    is always the pattern of those names (a forged member's own IP is outside it), and
    the probes use the probe port; the CLI takes it all."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-values.yaml"))
    assert not _component(objects, "Deployment", "publisher")
    (sts,) = _component(objects, "StatefulSet", "publisher")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "l0gc-publisher-peers"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    (pdb,) = _component(objects, "PodDisruptionBudget", "publisher")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env_vars = {e["name"]: e for e in container["env"]}
    assert env_vars["L0GC_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "probes": 8081}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == "probes", probe
        assert "scheme" not in container[probe]["httpGet"], probe
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.replicated is True
    assert publisher.args.probe_port == 8081
    names = "l0gc-publisher-peers.gc.svc.cluster.local"
    assert publisher.args.advertise_url == f"http://l0gc-publisher-1.{names}:8080"
    fleet = publisher.args.fleet_urls
    assert fleet.spec == f"http://*.{names}:8080"
    assert fleet.allows(publisher.args.advertise_url)
    assert fleet.allows(f"http://l0gc-publisher-7.{names}:8080")
    for outside in (
        "http://10.1.2.3:8080",
        f"http://x.{names}:9999",
        "http://l0gc-publisher-1.l0gc-publisher-peers.other.svc.cluster.local:8080",
    ):
        assert not fleet.allows(outside), outside
    assert publisher.args.member_lease_ttl == 5
    assert publisher.args.membership_interval == 0.5
    assert publisher.args.tick_interval == 10.0  # every replica runs the elected ticker


def test_a_headless_service_resolves_every_replica_and_is_not_scraped(
    env: dict[str, str],
) -> None:
    """The peers Service: headless, not-ready addresses published, the publisher's pods,
    and a component label the ServiceMonitor does not select (no double scrape)."""
    objects = render(
        env,
        "-f",
        str(CHART / "ci" / "publisher-values.yaml"),
        "--set",
        "serviceMonitor.enabled=true",
    )
    (sts,) = _component(objects, "StatefulSet", "publisher")
    (peers,) = _component(objects, "Service", "publisher-peers")
    assert peers["metadata"]["name"] == sts["spec"]["serviceName"]
    assert peers["spec"]["clusterIP"] == "None"
    assert peers["spec"]["publishNotReadyAddresses"] is True
    assert peers["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
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
    names = "l0gc-publisher-peers.gc.svc.cluster.local"
    assert publisher.args.advertise_url == f"https://l0gc-publisher-1.{names}:8080"
    fleet = publisher.args.fleet_urls  # the stable names, then replication.fleetUrls
    assert fleet.allows(publisher.args.advertise_url)
    assert fleet.allows("https://10.244.7.9:8080")
    assert fleet.allows("https://p-1.publishers.example:8080")
    assert not fleet.allows("https://192.168.1.1:8080")
    assert not fleet.allows("http://10.244.7.9:8080")
    (sts,) = _component(objects, "StatefulSet", "publisher")
    assert sts["spec"]["replicas"] == 5
    # HTTPS on the API port; the probes stay plain HTTP on the probe port.
    probe = sts["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "probes"}


def test_an_advertise_url_of_your_own_goes_with_its_fleet(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """advertiseUrl (e.g. names your certificate covers) with fleetUrls matching it: the
    fleet is exactly those patterns; clusterDomain changes the stable names."""
    objects = render(
        env,
        "-f",
        str(CHART / "ci" / "publisher-values.yaml"),
        "--set",
        "publisher.replication.advertiseUrl=http://$(L0GC_POD_NAME).pub.example:8080",
        "--set",
        "publisher.replication.fleetUrls={http://*.pub.example:8080}",
    )
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.advertise_url == "http://l0gc-publisher-1.pub.example:8080"
    assert publisher.args.fleet_urls.spec == "http://*.pub.example:8080"
    objects = render(
        env,
        "-f",
        str(CHART / "ci" / "publisher-values.yaml"),
        "--set",
        "publisher.replication.clusterDomain=k8s.internal",
    )
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert (
        publisher.args.fleet_urls.spec == "http://*.l0gc-publisher-peers.gc.svc.k8s.internal:8080"
    )


def test_a_single_publisher_without_replication_is_recreated(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """replication.enabled=false: one pod, Recreate, no peers Service, no --replicated."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-single-values.yaml"))
    (deployment,) = _component(objects, "Deployment", "publisher")
    assert not _component(objects, "StatefulSet", "publisher")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not _component(objects, "Service", "publisher-peers")
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.replicated is False
    assert publisher.args.advertise_url is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "publisher.replication.enabled=false"], "needs publisher.replication.enabled"),
        (
            ["--set", "publisher.replication.enabled=false", "--set", "publisher.replicas=1"],
            "needs publisher.strategy.type=Recreate",
        ),
        (["--set", "publisher.replication.leaseTtl=5 s"], "publisher.replication.leaseTtl"),
        (["--set", "publisher.replication.advertiseUrl=ftp://x"], "advertiseUrl"),
        (
            ["--set", "publisher.replication.advertiseUrl=http://x:8080"],
            (
                "publisher.replication.advertiseUrl=http://x:8080"
                " needs publisher.replication.fleetUrls"
            ),
        ),
        (
            ["--set", "publisher.http.probePort=8080"],
            "publisher.http.probePort=8080 is publisher.http.port",
        ),
    ],
)
def test_unsound_replication_settings_are_refused(
    env: dict[str, str], args: list[str], message: str
) -> None:
    """Several publishers that would fence each other out, or a bad value: no render."""
    done = helm(
        env,
        "template",
        "l0gc",
        str(CHART),
        *REQUIRED,
        "--set",
        "publisher.enabled=true",
        "--set",
        "publisher.auth.existingSecret=t",
        *args,
    )
    assert done.returncode != 0
    assert message in done.stderr
