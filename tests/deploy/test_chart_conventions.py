"""What the chart has in common with the bitnami and prometheus-community charts.

Pod anti-affinity presets (soft by default, so the publisher replicas do not all land on
one node), a startup probe, the pod extension points of each workload (`extraEnvFrom`,
`extraVolumes`, `extraVolumeMounts`, `initContainers`, `sidecars`, rendered through
`tpl`), and a `helm test` hook pod running `gcd status`. The renders of
helm/l0gc/ci/*-values.yaml (lint --strict, kubernetes-validate) are in test_helm.py;
the containers' command lines are parsed by the real CLIs in test_chart_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    Obj,
    helm,
    helm_env,
    objects_of,
    pod_spec,
)

REQUIRED = ["--set", "etcd.endpoints=etcd.etcd.svc:2379", "--set", "s3.bucket=b"]
PUBLISHER = ["--set", "publisher.enabled=true", "--set", "publisher.auth.existingSecret=t"]
HOSTNAME = "kubernetes.io/hostname"
NODE_TERM = (
    "publisher.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    ".nodeSelectorTerms[0].matchExpressions[0]"
)
REQUIRED_TERMS = "requiredDuringSchedulingIgnoredDuringExecution"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's environment, in a temp home."""
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def render(env: dict[str, str], *args: str) -> list[Obj]:
    """`helm template` of the chart; fails with helm's message."""
    done = helm(
        env,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        *args,
    )
    assert done.returncode == 0, done.stderr
    return objects_of(done.stdout)


def workload(objects: list[Obj], component: str) -> Obj:
    """The one Deployment / StatefulSet / Pod of `component`."""
    found = [
        o
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet", "Pod")
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def main_container(spec: Obj) -> Obj:
    """The l0gc container of a pod spec (the first; sidecars come after it)."""
    container = spec["containers"][0]
    assert container["command"][0] in ("gcd", "watermark"), container["name"]
    return dict(container)


# --- anti-affinity ---------------------------------------------------------------------


def test_publisher_replicas_prefer_different_nodes_by_default(env: dict[str, str]) -> None:
    """Default: a soft anti-affinity per node against the publisher's own pods (its term
    selects exactly the pod template's labels, not the sweeper's)."""
    objects = render(env, *REQUIRED, *PUBLISHER)
    for component in ("publisher", "sweeper"):
        target = workload(objects, component)
        labels = target["spec"]["template"]["metadata"]["labels"]
        (preferred,) = pod_spec(target)["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        term = preferred["podAffinityTerm"]
        assert term["topologyKey"] == HOSTNAME
        selector = term["labelSelector"]["matchLabels"]
        assert selector["app.kubernetes.io/component"] == component
        assert selector.items() <= labels.items()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "publisher.podAntiAffinityPreset=hard"], "required"),
        (["--set", "publisher.podAntiAffinityPreset="], None),
        (["--set", f"{NODE_TERM}.key=pool", "--set", f"{NODE_TERM}.operator=Exists"], "own"),
    ],
    ids=["hard", "none", "affinity-replaces-the-preset"],
)
def test_anti_affinity_preset_hard_none_or_replaced(
    env: dict[str, str], args: list[str], expected: str | None
) -> None:
    """`hard` requires one replica per node, "" adds nothing, `affinity` replaces the preset."""
    spec = pod_spec(workload(render(env, *REQUIRED, *PUBLISHER, *args), "publisher"))
    if expected is None:
        assert "affinity" not in spec
    elif expected == "required":
        (term,) = spec["affinity"]["podAntiAffinity"][REQUIRED_TERMS]
        assert term["topologyKey"] == HOSTNAME
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "publisher"
    else:
        assert set(spec["affinity"]) == {"nodeAffinity"}


# --- startup probe ---------------------------------------------------------------------


def test_startup_probe_guards_a_slow_start_and_can_be_turned_off(env: dict[str, str]) -> None:
    """Both daemons get a /healthz startup probe with at least a minute of budget; a
    workload's `startupProbe.enabled=false` removes only its own."""
    objects = render(env, *REQUIRED, *PUBLISHER)
    for component in ("sweeper", "publisher"):
        container = main_container(pod_spec(workload(objects, component)))
        probe = container["startupProbe"]
        assert probe["httpGet"]["path"] == "/healthz"
        ports = [port["name"] for port in container["ports"]]  # the publisher's: probes
        assert probe["httpGet"]["port"] == ("probes" if "probes" in ports else ports[0])
        assert probe["periodSeconds"] * probe["failureThreshold"] >= 60
        assert "enabled" not in probe
    objects = render(env, *REQUIRED, *PUBLISHER, "--set", "sweeper.startupProbe.enabled=false")
    assert "startupProbe" not in main_container(pod_spec(workload(objects, "sweeper")))
    assert "startupProbe" in main_container(pod_spec(workload(objects, "publisher")))


# --- extension points ------------------------------------------------------------------


@pytest.mark.parametrize("component", ["sweeper", "publisher"])
def test_extension_points_reach_each_workload(env: dict[str, str], component: str) -> None:
    """ci/extras-values.yaml: the init containers and sidecars join the pod, the extra
    volumes join the chart's (templated names rendered), the mounts and envFrom sources
    join the l0gc container after the chart's own, and nothing leaks to the other workload."""
    objects = render(env, "-f", str(CHART / "ci" / "extras-values.yaml"))
    values = yaml.safe_load((CHART / "ci" / "extras-values.yaml").read_text())[component]
    spec = pod_spec(workload(objects, component))
    container = main_container(spec)
    names = [c["name"] for c in spec["containers"]]
    assert names == [container["name"], *(c["name"] for c in values["sidecars"])]
    assert [c["name"] for c in spec.get("initContainers", [])] == [
        c["name"] for c in values.get("initContainers", [])
    ]
    volumes = [v["name"] for v in spec["volumes"]]
    assert volumes[0] == "tmp"
    assert volumes[-len(values["extraVolumes"]) :] == [v["name"] for v in values["extraVolumes"]]
    mounts = container["volumeMounts"]
    assert mounts[0]["mountPath"] == "/tmp"
    assert mounts[-1] == values["extraVolumeMounts"][-1]
    env_from = container["envFrom"]
    assert "configMapRef" in env_from[0]  # the chart's settings first, the user's after
    assert env_from[1:] == values["extraEnvFrom"]
    own_env = [e["name"] for e in container["env"]][: -len(values["extraEnv"])]
    assert container["env"][-len(values["extraEnv"]) :] == values["extraEnv"]  # after the chart's
    assert own_env  # the chart's own variables come first (etcd endpoints, shard, ...)
    other = pod_spec(workload(objects, "publisher" if component == "sweeper" else "sweeper"))
    assert not {v["name"] for v in other["volumes"]} & {v["name"] for v in values["extraVolumes"]}
    if component == "sweeper":
        (bundle,) = [v for v in spec["volumes"] if v["name"] == "ca-bundle"]
        assert bundle["configMap"]["name"] == f"{RELEASE}-ca-bundle"  # rendered by tpl


def test_extension_points_are_off_by_default(env: dict[str, str]) -> None:
    """Defaults add no init container, no sidecar and no volume beyond the chart's."""
    objects = render(env, *REQUIRED, *PUBLISHER)
    for component in ("sweeper", "publisher"):
        spec = pod_spec(workload(objects, component))
        assert "initContainers" not in spec
        assert len(spec["containers"]) == 1
        chart_volumes = {"sweeper": ["tmp", "journal"], "publisher": ["tmp", "publisher-auth"]}
        assert [v["name"] for v in spec["volumes"]] == chart_volumes[component]
        assert len(main_container(spec)["envFrom"]) == 1


# --- helm test -------------------------------------------------------------------------


def test_helm_test_pod_runs_gcd_status_with_the_charts_etcd_settings(env: dict[str, str]) -> None:
    """A `helm.sh/hook: test` Pod runs `gcd status` (plus `helmTest.extraArgs`) with the
    etcd endpoints, namespace, timeout, TLS files and credentials the sweeper uses,
    hardened like the chart's pods, never restarted."""
    objects = render(env, "-f", str(CHART / "ci" / "extras-values.yaml"))
    pod = workload(objects, "helm-test")
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert "hook-succeeded" in pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert [*container["command"], *container["args"]] == ["gcd", "status", "--all"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env_vars = {e["name"]: e for e in container["env"]}
    assert env_vars["L0GC_ETCD"]["value"] == "etcd-0.etcd:2379,etcd-1.etcd:2379"
    assert env_vars["L0GC_NAMESPACE"]["value"] == "/l0gc/prod"
    assert env_vars["L0GC_ETCD_TIMEOUT"]["value"] == "3"
    sweeper = main_container(pod_spec(workload(objects, "sweeper")))
    sweeper_env = {e["name"]: e for e in sweeper["env"]}
    for name in (
        "L0GC_ETCD_CA_FILE",
        "L0GC_ETCD_CERT_FILE",
        "L0GC_ETCD_KEY_FILE",
        "L0GC_ETCD_USERNAME",
        "L0GC_ETCD_PASSWORD_FILE",
    ):
        assert env_vars[name] == sweeper_env[name], name
    sweeper_mounts = {m["mountPath"]: m for m in sweeper["volumeMounts"]}
    for mount in container["volumeMounts"]:
        assert sweeper_mounts[mount["mountPath"]] == mount
    assert {m["mountPath"] for m in container["volumeMounts"]} == {
        "/tmp",
        "/etc/l0gc/etcd-tls",
        "/etc/l0gc/etcd-auth",
    }


def test_helm_test_pod_can_be_turned_off(env: dict[str, str]) -> None:
    """`helmTest.enabled=false`: no test Pod (and none is ever part of an install)."""
    objects = render(env, *REQUIRED, "--set", "helmTest.enabled=false")
    assert not [o for o in objects if o["kind"] == "Pod"]


# --- the schema stays strict -----------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "word"),
    [
        ({"publisher": {"podAntiAffinityPreset": "medium"}}, "podAntiAffinityPreset"),
        ({"sweeper": {"startupProbe": {"path": "/"}}}, "path"),
        ({"helmTest": {"image": "busybox"}}, "image"),
        ({"publisher": {"sidecars": [{"image": "x"}]}}, "name"),
        ({"sweeper": {"extraVolumes": {"name": "v"}}}, "extraVolumes"),
    ],
    ids=["preset", "startup-key", "helm-test-key", "sidecar-without-name", "volumes-not-list"],
)
def test_schema_refuses_bad_new_values(
    env: dict[str, str], tmp_path: Path, values: Obj, word: str
) -> None:
    """Unknown keys, a preset that is not soft/hard/"", unnamed containers and a volume
    that is not in a list fail at render time, naming the value."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm(env, "template", RELEASE, str(CHART), *REQUIRED, "-f", str(path))
    assert done.returncode != 0
    assert "schema" in done.stderr
    assert word in done.stderr


def test_helm_test_pod_may_reach_etcd_under_network_policies(env: dict[str, str]) -> None:
    """With networkPolicy.enabled, a policy selects the test Pod: no ingress, egress only
    to DNS and etcd (the same peers as the sweeper's), so `helm test` works in a namespace
    whose default denies all."""
    objects = render(env, "-f", str(CHART / "ci" / "networkpolicy-values.yaml"))
    pod = workload(objects, "helm-test")
    (policy,) = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "helm-test"
    ]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["ingress"] == []
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert 2379 in ports
    assert 443 not in ports  # no S3
    (sweeper,) = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "sweeper"
    ]
    etcd = [r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 2379]
    assert etcd == [r for r in sweeper["spec"]["egress"] if r["ports"][0]["port"] == 2379]
