"""The Helm chart helm/l0gc, checked statically (no cluster here).

Every ci/*-values.yaml (ci/minimal-values.yaml is the defaults plus the two values the
chart requires) is linted with `helm lint --strict`, rendered with `helm template` and
validated with
`kubernetes-validate --strict` against Kubernetes 1.30, once per module; the tests then
assert on the rendered objects. CRDs (ServiceMonitor, PrometheusRule) have no schema in
kubernetes-validate, so their shape is asserted here.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "l0gc"
HELM = REPO / ".tools" / "helm" / "helm"
KUBERNETES_VALIDATE = Path(sys.executable).parent / "kubernetes-validate"
KUBE_VERSION = "1.30.0"
RELEASE = "l0gc"
NAMESPACE = "gc"
VALUES_FILES = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
# The two values the chart cannot do without; given to every ad-hoc render.
REQUIRED = ["--set", "etcd.endpoints=etcd.etcd.svc:2379", "--set", "s3.bucket=b"]
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "CronJob")
SECRET_WORDS = re.compile(r"password|secret|token|access_key", re.IGNORECASE)
UID = 65532

Obj = dict[str, Any]


@dataclass(frozen=True)
class Render:
    """One values file: its values, the helm/validator results and the rendered objects."""

    name: str
    values: dict[str, Any]
    lint: subprocess.CompletedProcess[str]
    template: subprocess.CompletedProcess[str]
    validate: subprocess.CompletedProcess[str] | None
    objects: list[Obj]


def _run(
    cmd: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for helm with its cache/config/data in a temp dir; fails if tools are missing."""
    if not HELM.is_file():
        pytest.fail(f"helm is not installed at {HELM}: run scripts/bootstrap.sh (it installs helm)")
    if not KUBERNETES_VALIDATE.is_file():
        pytest.fail(f"{KUBERNETES_VALIDATE} is missing: run scripts/bootstrap.sh")
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(home / var.lower())
    return env


def helm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the repo's helm binary."""
    return _run([str(HELM), *args], env)


def _values_args(name: str) -> list[str]:
    return ["-f", str(CHART / "ci" / name)]


def _render(env: dict[str, str], name: str) -> Render:
    values_file = CHART / "ci" / name
    lint = helm(env, "lint", "--strict", str(CHART), *_values_args(name))
    template = helm(
        env,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        *_values_args(name),
    )
    validate = None
    objects: list[Obj] = []
    if template.returncode == 0:
        validate = _run(
            [str(KUBERNETES_VALIDATE), "--strict", "-k", KUBE_VERSION, "--quiet", "-"],
            env,
            stdin=template.stdout,
        )
        objects = [doc for doc in yaml.safe_load_all(template.stdout) if doc]
    return Render(
        name=name,
        values=yaml.safe_load(values_file.read_text()) or {},
        lint=lint,
        template=template,
        validate=validate,
        objects=objects,
    )


@pytest.fixture(scope="module")
def renders(helm_env: dict[str, str]) -> dict[str, Render]:
    """Every values file linted, rendered and validated once for the whole module."""
    return {name: _render(helm_env, name) for name in VALUES_FILES}


def rendered(renders: dict[str, Render], name: str) -> list[Obj]:
    """The objects of one values file; fails if it did not render."""
    render = renders[name]
    assert render.template.returncode == 0, render.template.stderr
    return render.objects


def of_kind(objects: list[Obj], kind: str, component: str | None = None) -> list[Obj]:
    """Objects of `kind` (and of `component`, by the app.kubernetes.io/component label)."""
    found = [o for o in objects if o["kind"] == kind]
    if component is not None:
        found = [
            o
            for o in found
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
    return found


def one(objects: list[Obj], kind: str, component: str | None = None) -> Obj:
    """The single object of `kind` (and `component`)."""
    found = of_kind(objects, kind, component)
    assert len(found) == 1, f"expected one {kind} {component or ''}, got {len(found)}"
    return found[0]


def pod_spec(workload: Obj) -> Obj:
    """The pod spec of a Deployment, StatefulSet or CronJob."""
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


def workloads(objects: list[Obj]) -> Iterator[Obj]:
    """Every object with a pod template."""
    return (o for o in objects if o["kind"] in WORKLOAD_KINDS)


def l0gc_containers(spec: Obj) -> list[Obj]:
    """The pod's `gcd` / `watermark` containers (not the user's `sidecars`)."""
    return [c for c in spec["containers"] if c.get("command", [""])[0] in ("gcd", "watermark")]


def env_of(container: Obj) -> dict[str, Obj]:
    """A container's env entries by name."""
    return {entry["name"]: entry for entry in container.get("env", [])}


def configmap_data(objects: list[Obj], name: str) -> dict[str, str]:
    """The data of the ConfigMap called `name`."""
    maps = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"] == name]
    assert len(maps) == 1, f"no ConfigMap {name}"
    return dict(maps[0].get("data") or {})


def settings_of(objects: list[Obj], workload: Obj) -> dict[str, str]:
    """The L0GC_* settings a workload's container sees: its ConfigMap plus literal env."""
    container = pod_spec(workload)["containers"][0]
    settings: dict[str, str] = {}
    for source in container.get("envFrom", []):
        settings.update(configmap_data(objects, source["configMapRef"]["name"]))
    for name, entry in env_of(container).items():
        if "value" in entry:
            settings[name] = entry["value"]
    return settings


def assert_shard_index_flag(args: list[str]) -> None:
    """The shard index is also a flag, so an empty index is a usage error, not shard 0."""
    position = args.index("--shard-index")
    assert args[position + 1] == "$(L0GC_SHARD_INDEX)"


# --- helm lint, helm template, kubernetes-validate ------------------------------------


@pytest.mark.parametrize("name", VALUES_FILES)
def test_helm_lint_strict_passes(renders: dict[str, Render], name: str) -> None:
    """`helm lint --strict` passes for every ci values file."""
    lint = renders[name].lint
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("name", VALUES_FILES)
def test_rendered_manifests_validate_against_kubernetes_1_30(
    renders: dict[str, Render], name: str
) -> None:
    """Every rendered object passes `kubernetes-validate --strict -k 1.30.0`."""
    render = renders[name]
    assert render.template.returncode == 0, render.template.stderr
    assert render.validate is not None
    assert render.validate.returncode == 0, render.validate.stdout + render.validate.stderr
    assert render.objects, "nothing rendered"


@pytest.mark.parametrize("name", VALUES_FILES)
def test_objects_carry_standard_labels_and_short_names(
    renders: dict[str, Render], name: str
) -> None:
    """Every object has the standard labels and a name that fits a DNS label."""
    for obj in rendered(renders, name):
        meta = obj["metadata"]
        assert len(meta["name"]) <= 63, meta["name"]
        labels = meta["labels"]
        assert labels["app.kubernetes.io/name"] == "l0gc"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    for workload in workloads(rendered(renders, name)):
        # StatefulSet revision-hash labels and CronJob Job names add 11 characters.
        assert len(workload["metadata"]["name"]) <= 52


# --- the sweeper in its three modes ----------------------------------------------------


def test_default_values_run_one_daemon_sweeper(renders: dict[str, Render]) -> None:
    """Defaults (+ etcd, bucket): one `gcd daemon` Deployment (Recreate), a Service, no extras."""
    objects = rendered(renders, "minimal-values.yaml")
    deployment = one(objects, "Deployment", "sweeper")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = pod_spec(deployment)["containers"][0]
    assert container["command"] == ["gcd"]
    assert container["args"][:5] == ["daemon", "--http-host", "0.0.0.0", "--http-port", "9464"]
    assert "--dry-run" not in container["args"]
    assert "L0GC_SHARD_INDEX" not in env_of(container)
    assert "--shard-index" not in container["args"]
    assert not of_kind(objects, "StatefulSet")
    assert not of_kind(objects, "CronJob")
    assert not of_kind(objects, "Deployment", "publisher")
    assert not of_kind(objects, "NetworkPolicy")
    service = one(objects, "Service", "sweeper")
    assert service["spec"]["ports"][0]["port"] == 9464
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_statefulset_mode_gives_each_pod_its_shard(renders: dict[str, Render]) -> None:
    """StatefulSet: replicas == L0GC_SHARD_COUNT, shard index from the pod-index label."""
    objects = rendered(renders, "statefulset-values.yaml")
    statefulset = one(objects, "StatefulSet", "sweeper")
    replicas = statefulset["spec"]["replicas"]
    assert replicas == 4
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    container = pod_spec(statefulset)["containers"][0]
    env = env_of(container)
    assert env["L0GC_SHARD_COUNT"]["value"] == str(replicas)
    assert env["L0GC_SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    assert container["args"][0] == "daemon"
    assert_shard_index_flag(container["args"])
    assert not of_kind(objects, "Deployment")
    # The governing Service is headless and selects exactly these pods.
    service = one(objects, "Service", "sweeper")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    settings = settings_of(objects, statefulset)
    assert settings["L0GC_BUCKET"] == "prod-l0-objects"
    assert settings["L0GC_GRACE"] == "1h"
    assert settings["L0GC_MAX_DELETES_PER_SECOND"] == "2000"
    assert settings["L0GC_MAX_DELETES"] == "5000000"  # not "5e+06"
    # IRSA: the role annotation is on the ServiceAccount the pods use.
    account = one(objects, "ServiceAccount", "sweeper")
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role.startswith("arn:aws:iam::")
    assert pod_spec(statefulset)["serviceAccountName"] == account["metadata"]["name"]


def test_cronjob_mode_runs_one_shot_sweeps_never_overlapping(renders: dict[str, Render]) -> None:
    """CronJob: `gcd sweep --json`, concurrencyPolicy Forbid, indexed shards, no daemon objects."""
    objects = rendered(renders, "cronjob-values.yaml")
    cronjob = one(objects, "CronJob", "sweeper")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["schedule"] == "0 * * * *"
    assert cronjob["spec"]["timeZone"] == "Etc/UTC"
    job = cronjob["spec"]["jobTemplate"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == 3
    assert job["activeDeadlineSeconds"] == 3000
    exit_rules = [r for r in job["podFailurePolicy"]["rules"] if "onExitCodes" in r]
    assert exit_rules[0]["action"] == "FailJob"
    assert exit_rules[0]["onExitCodes"]["values"] == [2, 3]
    spec = pod_spec(cronjob)
    assert spec["restartPolicy"] == "Never"
    container = spec["containers"][0]
    assert container["command"] == ["gcd"]
    assert container["args"][:3] == ["sweep", "--json", "--paused-ok"]
    assert "--dry-run" in container["args"]
    assert_shard_index_flag(container["args"])
    assert "livenessProbe" not in container
    assert "ports" not in container
    env = env_of(container)
    assert env["L0GC_SHARD_COUNT"]["value"] == "3"
    assert env["L0GC_SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    settings = settings_of(objects, cronjob)
    assert settings["L0GC_MAX_DELETES"] == "100000"
    assert "L0GC_INTERVAL" not in settings  # daemon-only settings stay out
    for kind in ("Deployment", "StatefulSet", "Service", "PodDisruptionBudget"):
        assert not of_kind(objects, kind), kind


def test_publisher_runs_watermark_serve_behind_a_service(renders: dict[str, Render]) -> None:
    """Publisher: a `watermark serve` StatefulSet and a Service on its http port."""
    objects = rendered(renders, "publisher-values.yaml")
    deployment = one(objects, "StatefulSet", "publisher")
    assert deployment["spec"]["updateStrategy"]["type"] == "RollingUpdate"  # replicas hand over
    container = pod_spec(deployment)["containers"][0]
    assert container["command"] == ["watermark"]
    assert container["args"][:7] == [
        "serve",
        "--http-host",
        "0.0.0.0",
        "--http-port",
        "8080",
        "--probe-port",
        "8081",
    ]
    assert container["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "probes", "containerPort": 8081, "protocol": "TCP"},
    ]
    service = one(objects, "Service", "publisher")
    assert service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert "--register" in container["args"]
    settings = settings_of(objects, deployment)
    assert settings["L0GC_PARTITIONS"] == "orders/0-63"
    assert settings["L0GC_ETCD"] == ",".join(
        f"etcd-{n}.etcd.etcd.svc.cluster.local:2379" for n in range(3)
    )
    assert settings["L0GC_TICK_INTERVAL"] == "10"  # watermark serve takes seconds only
    assert settings["L0GC_PUBLISH_INTERVAL"] == "5"
    assert settings["L0GC_HTTP_HOST"] == "0.0.0.0"
    assert settings["L0GC_LOG_LEVEL"] == "info"
    assert "L0GC_BUCKET" not in settings
    assert "L0GC_INSECURE_NO_AUTH" not in settings
    # Tokens: the existing Secret's file, mounted read-only, passed by path.
    token_file = Path(env_of(container)["L0GC_AUTH_TOKEN_FILE"]["value"])
    mount = next(m for m in container["volumeMounts"] if Path(m["mountPath"]) == token_file.parent)
    assert mount["readOnly"] is True
    volume = next(v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "l0gc-publisher-tokens"
    assert volume["secret"]["items"] == [{"key": "tokens", "path": token_file.name}]
    # The publisher needs no AWS role: its own ServiceAccount.
    sweeper = one(objects, "Deployment", "sweeper")
    assert pod_spec(deployment)["serviceAccountName"] != pod_spec(sweeper)["serviceAccountName"]
    # The two components never select each other's pods.
    sweeper_selector = sweeper["spec"]["selector"]["matchLabels"]
    publisher_selector = deployment["spec"]["selector"]["matchLabels"]
    assert sweeper_selector != publisher_selector
    for selector in (sweeper_selector, publisher_selector):
        assert set(selector) == {
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/component",
        }


# --- monitoring --------------------------------------------------------------------------


def _enabled(render: Render, section: str) -> bool:
    return bool(render.values.get(section, {}).get("enabled", False))


@pytest.mark.parametrize("name", VALUES_FILES)
def test_monitoring_objects_exist_only_when_enabled(renders: dict[str, Render], name: str) -> None:
    """ServiceMonitor, PrometheusRule and the dashboard ConfigMap render only when enabled."""
    render = renders[name]
    objects = rendered(renders, name)
    assert bool(of_kind(objects, "ServiceMonitor")) == _enabled(render, "serviceMonitor")
    assert bool(of_kind(objects, "PrometheusRule")) == _enabled(render, "prometheusRule")
    dashboards = [
        o
        for o in of_kind(objects, "ConfigMap")
        if o["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert bool(dashboards) == _enabled(render, "grafanaDashboard")


def test_servicemonitors_scrape_sweeper_and_publisher(renders: dict[str, Render]) -> None:
    """One ServiceMonitor per component, each matching that component's Service and port."""
    objects = rendered(renders, "monitoring-values.yaml")
    # the publisher on its probe port (plain HTTP, its own connections), not the API's
    for component, port in (("sweeper", "metrics"), ("publisher", "probes")):
        monitor = one(objects, "ServiceMonitor", component)
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        service = one(objects, "Service", component)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= (
            service["metadata"]["labels"].items()
        )
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == [port]
        assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
        assert "scheme" not in monitor["spec"]["endpoints"][0]  # plain HTTP, TLS or not
        assert port in [p["name"] for p in service["spec"]["ports"]]


def test_prometheus_rule_carries_the_repository_alerts(renders: dict[str, Render]) -> None:
    """The PrometheusRule holds deploy/prometheus/l0gc-alerts.yaml, with runbook base and labels."""
    repo_rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "l0gc-alerts.yaml").read_text())
    repo_alerts = {r["alert"]: r for g in repo_rules["groups"] for r in g["rules"]}
    rule = one(rendered(renders, "monitoring-values.yaml"), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == set(repo_alerts)
    assert {
        "L0gcSweeperBlocked",
        "L0gcEpochLagGrowing",
        "L0gcDeleteErrorRate",
        "L0gcNoSuccessfulRound",
        "L0gcWatermarkStale",
        "L0gcPublisherStaleOwner",
    } <= set(alerts)
    for name, alert in alerts.items():
        original = repo_alerts[name]
        # The down/absent alerts' generic job matchers are pinned to this release.
        expected = (
            original["expr"]
            .replace('job=~".*l0gc-sweeper"', f'namespace="{NAMESPACE}", job="l0gc-sweeper"')
            .replace('job=~".*l0gc-publisher"', f'namespace="{NAMESPACE}", job="l0gc-publisher"')
        )
        assert alert["expr"] == expected
        assert "=~" not in alert["expr"] or "job" not in alert["expr"]
        assert alert["for"] == original["for"]
        assert alert["labels"] == {**original["labels"], "team": "storage"}
        anchor = original["annotations"]["runbook_url"].split("#", 1)[1]
        assert alert["annotations"]["runbook_url"] == (
            f"https://runbooks.example.com/l0gc/operations.md#{anchor}"
        )
        assert alert["annotations"]["summary"] == original["annotations"]["summary"]


def test_dashboard_configmap_holds_the_repository_dashboard(renders: dict[str, Render]) -> None:
    """The Grafana ConfigMap carries deploy/grafana/l0gc-dashboard.json for the sidecar."""
    objects = rendered(renders, "monitoring-values.yaml")
    dashboards = [
        o
        for o in of_kind(objects, "ConfigMap")
        if o["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert len(dashboards) == 1
    configmap = dashboards[0]
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Storage"}
    repo_dashboard = json.loads((REPO / "deploy" / "grafana" / "l0gc-dashboard.json").read_text())
    assert json.loads(configmap["data"]["l0gc-dashboard.json"]) == repo_dashboard


# --- secrets, security, probes -----------------------------------------------------------


@pytest.mark.parametrize("name", VALUES_FILES)
def test_no_secret_values_in_configmaps_or_env(renders: dict[str, Render], name: str) -> None:
    """No ConfigMap key or literal env var named like a secret holds a value.

    The one Secret the chart may create is the publisher's token file, and only from
    `publisher.auth.tokens`.
    """
    objects = rendered(renders, name)
    secrets = of_kind(objects, "Secret")
    if renders[name].values.get("publisher", {}).get("auth", {}).get("tokens"):
        assert [s["metadata"]["name"] for s in secrets] == ["l0gc-publisher-auth"]
        assert set(secrets[0]["data"]) == {"tokens"}
    else:
        assert not secrets, "the chart creates no Secret unless given publisher.auth.tokens"
    for configmap in of_kind(objects, "ConfigMap"):
        for key, value in (configmap.get("data") or {}).items():
            if SECRET_WORDS.search(key):
                assert not value, f"{configmap['metadata']['name']}: {key} has a literal value"
    for workload in workloads(objects):
        for container in pod_spec(workload)["containers"]:
            for env_name, entry in env_of(container).items():
                if not SECRET_WORDS.search(env_name) or "valueFrom" in entry:
                    continue
                # Only paths of mounted Secret files may be literal.
                assert env_name.endswith("_FILE"), f"{env_name} holds a literal value"


@pytest.mark.parametrize("name", VALUES_FILES)
def test_every_pod_is_hardened(renders: dict[str, Render], name: str) -> None:
    """Every pod runs as uid 65532 with seccomp, a read-only root, no capabilities and a /tmp."""
    checked = 0
    for workload in workloads(rendered(renders, name)):
        spec = pod_spec(workload)
        pod_security = spec["securityContext"]
        assert pod_security["runAsNonRoot"] is True
        assert pod_security["runAsUser"] == UID
        assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        assert spec["terminationGracePeriodSeconds"] == 60
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes["tmp"]
        for container in l0gc_containers(spec):
            security = container["securityContext"]
            assert security["runAsNonRoot"] is True
            assert security["runAsUser"] == UID
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            assert "add" not in security["capabilities"]
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/tmp"] == "tmp"
            assert container["resources"]["requests"]
            assert container["resources"]["limits"]["memory"]
            checked += 1
    assert checked


@pytest.mark.parametrize("name", VALUES_FILES)
def test_daemons_have_health_and_readiness_probes(renders: dict[str, Render], name: str) -> None:
    """Long-running containers probe /healthz (liveness and, unless disabled, startup) and
    /readyz (readiness) on their port."""
    checked = 0
    values = renders[name].values
    for workload in workloads(rendered(renders, name)):
        if workload["kind"] == "CronJob":
            continue
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        startup = values.get(component, {}).get("startupProbe", {}).get("enabled", True)
        for container in l0gc_containers(pod_spec(workload)):
            ports = {p["name"] for p in container["ports"]}
            assert ("startupProbe" in container) == startup, (component, startup)
            liveness = container["livenessProbe"]["httpGet"]
            readiness = container["readinessProbe"]["httpGet"]
            if startup:
                assert container["startupProbe"]["httpGet"] == liveness
                budget = container["startupProbe"]
                assert budget["periodSeconds"] * budget["failureThreshold"] >= 60
            assert liveness["path"] == "/healthz"
            assert readiness["path"] == "/readyz"
            assert liveness["port"] in ports
            assert readiness["port"] in ports
            # The publisher's probes: its plain-HTTP probe port, whatever the API's TLS.
            assert liveness.get("scheme", "HTTP") == readiness.get("scheme", "HTTP") == "HTTP"
            if component == "publisher":
                assert liveness["port"] == readiness["port"] == "probes"
            checked += 1
    if renders[name].values.get("sweeper", {}).get("mode") != "cronjob":
        assert checked


def test_etcd_tls_auth_and_s3_credentials_come_from_existing_secrets(
    renders: dict[str, Render],
) -> None:
    """TLS files and the password are mounted Secret files; user and S3 keys are secretKeyRefs."""
    objects = rendered(renders, "tls-values.yaml")
    for component, kind in (("sweeper", "Deployment"), ("publisher", "StatefulSet")):
        workload = one(objects, kind, component)
        spec = pod_spec(workload)
        container = spec["containers"][0]
        env = env_of(container)
        secret_volumes = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        files = {
            "L0GC_ETCD_CA_FILE": ("l0gc-etcd-client-tls", "ca.crt"),
            "L0GC_ETCD_CERT_FILE": ("l0gc-etcd-client-tls", "tls.crt"),
            "L0GC_ETCD_KEY_FILE": ("l0gc-etcd-client-tls", "tls.key"),
            "L0GC_ETCD_PASSWORD_FILE": ("l0gc-etcd-auth", "password"),
        }
        for env_name, (secret_name, key) in files.items():
            path = Path(env[env_name]["value"])
            volume_name = next(
                name for name, mount in mounts.items() if Path(mount["mountPath"]) == path.parent
            )
            assert mounts[volume_name]["readOnly"] is True
            volume = secret_volumes[volume_name]
            assert volume["secretName"] == secret_name
            assert {"key": key, "path": path.name} in volume["items"]
        username = env["L0GC_ETCD_USERNAME"]["valueFrom"]["secretKeyRef"]
        assert username == {"name": "l0gc-etcd-auth", "key": "username"}
        assert "L0GC_ETCD_PASSWORD" not in env
        if component == "sweeper":
            for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                ref = env[var]["valueFrom"]["secretKeyRef"]
                assert ref == {"name": "l0gc-s3-credentials", "key": var}
        else:
            assert "AWS_SECRET_ACCESS_KEY" not in env


def test_network_policies_allow_only_dns_etcd_and_s3(renders: dict[str, Render]) -> None:
    """NetworkPolicies: egress to DNS, etcd and S3 (+ extras) only; ingress to the metrics port."""
    objects = rendered(renders, "networkpolicy-values.yaml")
    sweeper = one(objects, "NetworkPolicy", "sweeper")
    publisher = one(objects, "NetworkPolicy", "publisher")
    for policy in (sweeper, publisher):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]

    def ports(policy: Obj) -> set[tuple[int, str]]:
        return {
            (p["port"], p.get("protocol", "TCP"))
            for rule in policy["spec"]["egress"]
            for p in rule["ports"]
        }

    assert ports(sweeper) == {(53, "UDP"), (53, "TCP"), (2379, "TCP"), (443, "TCP"), (80, "TCP")}
    assert ports(publisher) == {(53, "UDP"), (53, "TCP"), (2379, "TCP"), (80, "TCP")}
    etcd_rule = next(r for r in sweeper["spec"]["egress"] if r["ports"][0]["port"] == 2379)
    assert etcd_rule["to"] == [{"ipBlock": {"cidr": "10.20.0.0/24"}}]
    (ingress,) = sweeper["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert ingress["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    sweeper_pods = one(objects, "Deployment", "sweeper")["spec"]["template"]["metadata"]["labels"]
    assert sweeper["spec"]["podSelector"]["matchLabels"].items() <= sweeper_pods.items()
    # The publisher's port (API and metrics) only from the scrapers and the brokers; its
    # probe port only from the scrapers (kubelet probes pass on common CNIs).
    publisher_ingress, probe_ingress = publisher["spec"]["ingress"]

    def sources(rule: Obj) -> set[str]:
        return {
            peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            for peer in rule["from"]
        }

    assert publisher_ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert sources(publisher_ingress) == {"monitoring", "brokers"}
    assert probe_ingress["ports"] == [{"port": "probes", "protocol": "TCP"}]
    assert sources(probe_ingress) == {"monitoring"}


# --- the schema and the template guards --------------------------------------------------

PLAIN_SECRETS = {
    "etcd.password": {"etcd": {"password": "hunter2"}},
    "etcd.auth.password": {"etcd": {"auth": {"enabled": True, "password": "hunter2"}}},
    "s3.credentials.secretAccessKey": {"s3": {"credentials": {"secretAccessKey": "abc"}}},
}


@pytest.mark.parametrize("where", sorted(PLAIN_SECRETS))
def test_schema_rejects_plain_secret_values(
    helm_env: dict[str, str], tmp_path: Path, where: str
) -> None:
    """A values file with a plain password or key fails both helm lint and helm template."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(PLAIN_SECRETS[where]))
    lint = helm(helm_env, "lint", "--strict", str(CHART), "-f", str(values))
    assert lint.returncode != 0
    template = helm(helm_env, "template", RELEASE, str(CHART), "-f", str(values))
    assert template.returncode != 0
    assert "schema" in template.stderr
    assert where.rsplit(".", 1)[-1] in template.stderr


@pytest.mark.parametrize("component", ["sweeper", "publisher"])
def test_a_secret_looking_env_key_is_refused_naming_it_and_the_secret_to_use(
    helm_env: dict[str, str], tmp_path: Path, component: str
) -> None:
    """Issue 55: `env` lands in a ConfigMap, so a key named like a secret is refused, in
    one message naming the key and the existingSecret values (the schema's `not` only
    said "Must not validate the schema (not)")."""
    values = tmp_path / "values.yaml"
    doc: dict[str, Any] = {
        "etcd": {"endpoints": "e:2379"},
        "s3": {"bucket": "b"},
        "publisher": {"enabled": True, "auth": {"insecureNoAuth": True}},
        "sweeper": {},
    }
    doc[component]["env"] = {"L0GC_ETCD_PASSWORD": "hunter2"}
    values.write_text(yaml.safe_dump(doc))
    template = helm(helm_env, "template", RELEASE, str(CHART), "-f", str(values))
    assert template.returncode != 0
    assert f"{component}.env.L0GC_ETCD_PASSWORD looks like a secret" in template.stderr
    assert "etcd.auth.existingSecret" in template.stderr
    assert "hunter2" not in template.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "sweeper.shards=3"], "needs sweeper.mode=statefulset"),
        (["--set", "sweeper.mode=statefulset", "--kube-version", "1.27.0"], ">= 1.28"),
        (["--set", "etcd.tls.enabled=true"], "etcd.tls.existingSecret is required"),
        (["--set", "etcd.auth.enabled=true"], "etcd.auth.existingSecret is required"),
        (["--set", "sweeper.mode=daemonset"], "sweeper.mode"),
        (["--set", "etcd.timeout=5 sec"], "etcd.timeout"),
        (["--set", "publisher.enabled=true"], "the publisher needs authentication"),
        (
            [
                "--set",
                "publisher.enabled=true",
                "--set",
                "publisher.auth.existingSecret=t",
                "--set",
                "publisher.auth.tokens[0].token=0123456789abcdef0123",
            ],
            "exclude each other",
        ),
        (
            [
                "--set",
                "publisher.enabled=true",
                "--set",
                "publisher.auth.existingSecret=t",
                "--set",
                "publisher.auth.insecureNoAuth=true",
            ],
            "contradicts",
        ),
        (
            [
                "--set",
                "publisher.enabled=true",
                "--set",
                "publisher.tls.enabled=true",
                "--set",
                "publisher.auth.existingSecret=t",
            ],
            "publisher.tls.existingSecret is required",
        ),
        (
            [
                "--set",
                "publisher.enabled=true",
                "--set",
                "publisher.tls.clientCa.existingSecret=ca",
            ],
            "needs publisher.tls.enabled",
        ),
        (
            [
                "--set",
                "publisher.enabled=true",
                "--set",
                "publisher.auth.existingSecret=t",
                "--set",
                "publisher.config.tickInterval=10 s",
            ],
            "publisher.config.tickInterval",
        ),
        (
            ["--set", "publisher.enabled=true", "--set", "publisher.auth.tokens[0].token=short"],
            "tokens",
        ),
    ],
)
def test_template_refuses_unsound_settings(
    helm_env: dict[str, str], args: list[str], message: str
) -> None:
    """Settings that cannot work fail at render time with a message saying what to change."""
    template = helm(helm_env, "template", RELEASE, str(CHART), *REQUIRED, *args)
    assert template.returncode != 0
    assert message in template.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "etcd.endpoints is required"),
        (["--set", "etcd.endpoints={}"], "etcd.endpoints"),  # [""]: the schema refuses it
        (["--set", "etcd.endpoints=e:2379"], "s3.bucket is required"),
        (
            [
                "--set",
                "sweeper.enabled=false",
                "--set",
                "publisher.enabled=true",
                "--set",
                "publisher.auth.existingSecret=t",
            ],
            "etcd.endpoints is required",
        ),
    ],
)
def test_template_refuses_to_render_without_etcd_or_bucket(
    helm_env: dict[str, str], args: list[str], message: str
) -> None:
    """No etcd endpoint (or no bucket for the sweeper): no render, a message naming the value."""
    template = helm(helm_env, "template", RELEASE, str(CHART), *args)
    assert template.returncode != 0
    assert message in template.stderr
    if "required" in message:  # and it says how to give it
        assert "--set" in template.stderr


def test_publisher_without_sweeper_needs_no_bucket(helm_env: dict[str, str]) -> None:
    """The bucket is only the sweeper's: a publisher-only release renders without it."""
    template = helm(
        helm_env,
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "etcd.endpoints=e:2379",
        "--set",
        "sweeper.enabled=false",
        "--set",
        "publisher.enabled=true",
        "--set",
        "publisher.auth.insecureNoAuth=true",
    )
    assert template.returncode == 0, template.stderr
    objects = [doc for doc in yaml.safe_load_all(template.stdout) if doc]
    deployment = one(objects, "StatefulSet", "publisher")
    assert settings_of(objects, deployment)["L0GC_INSECURE_NO_AUTH"] == "true"
    assert "L0GC_AUTH_TOKEN_FILE" not in env_of(pod_spec(deployment)["containers"][0])


# --- publisher authentication and TLS --------------------------------------------------


def test_publisher_tokens_from_values_become_a_mounted_token_file(
    renders: dict[str, Render],
) -> None:
    """publisher.auth.tokens: a chart Secret with ROLE:TOKEN lines, mounted read-only."""
    objects = rendered(renders, "publisher-tokens-values.yaml")
    (secret,) = of_kind(objects, "Secret")
    lines = base64.b64decode(secret["data"]["tokens"]).decode().splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        "writer:0123456789abcdef0123456789abcdef",
        "reconciler:fedcba9876543210fedcba9876543210",
        "admin-token-0123456789abcdef",  # no role: the CLI makes it admin
    ]
    deployment = one(objects, "StatefulSet", "publisher")
    spec = pod_spec(deployment)
    container = spec["containers"][0]
    assert "--register" not in container["args"]
    path = Path(env_of(container)["L0GC_AUTH_TOKEN_FILE"]["value"])
    mount = next(m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent)
    assert mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    # New tokens roll the pod (the file is read at start-up).
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert len(annotations["checksum/auth"]) == 64
    assert not of_kind(objects, "Deployment", "sweeper")


def test_publisher_mutual_tls_from_existing_secrets(renders: dict[str, Render]) -> None:
    """TLS and client-CA files are mounted from existing Secrets; https scraping; TCP probes."""
    objects = rendered(renders, "publisher-tls-values.yaml")
    deployment = one(objects, "StatefulSet", "publisher")
    spec = pod_spec(deployment)
    container = spec["containers"][0]
    env = env_of(container)
    secret_of = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for var, secret, key in (
        ("L0GC_TLS_CERT_FILE", "l0gc-publisher-tls", "tls.crt"),
        ("L0GC_TLS_KEY_FILE", "l0gc-publisher-tls", "tls.key"),
        ("L0GC_TLS_CLIENT_CA_FILE", "l0gc-publisher-client-ca", "ca.crt"),
    ):
        path = Path(env[var]["value"])
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True
        assert secret_of[mount["name"]]["secretName"] == secret
        assert {"key": key, "path": path.name} in secret_of[mount["name"]]["items"]
    assert "L0GC_AUTH_TOKEN_FILE" not in env
    assert not of_kind(objects, "Secret")
    # The kubelet has no client certificate: the probes use the plain-HTTP probe port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    monitor = one(objects, "ServiceMonitor", "publisher")
    (endpoint,) = monitor["spec"]["endpoints"]
    # scraped on the probe port, plain HTTP: Prometheus needs no client certificate
    assert (endpoint["port"], "scheme" in endpoint, "tlsConfig" in endpoint) == (
        "probes",
        False,
        False,
    )
    sweeper_monitor = one(objects, "ServiceMonitor", "sweeper")
    assert "scheme" not in sweeper_monitor["spec"]["endpoints"][0]


def test_server_tls_keeps_the_probes_on_the_plain_probe_port(
    helm_env: dict[str, str],
) -> None:
    """HTTPS with tokens: the probes GET /healthz and /readyz on the probe port (plain
    HTTP, the API's TLS does not reach it)."""
    template = helm(
        helm_env,
        "template",
        RELEASE,
        str(CHART),
        *REQUIRED,
        "--set",
        "publisher.enabled=true",
        "--set",
        "publisher.auth.existingSecret=t",
        "--set",
        "publisher.tls.enabled=true",
        "--set",
        "publisher.tls.existingSecret=tls",
    )
    assert template.returncode == 0, template.stderr
    objects = [doc for doc in yaml.safe_load_all(template.stdout) if doc]
    container = pod_spec(one(objects, "StatefulSet", "publisher"))["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert "L0GC_TLS_CLIENT_CA_FILE" not in env_of(container)


# --- the one-shot sweeper's bounds ------------------------------------------------------


def test_cronjob_defaults_bound_a_run_and_accept_a_pause(helm_env: dict[str, str]) -> None:
    """cronjob mode by default: activeDeadlineSeconds 3600, `gcd sweep --paused-ok`."""
    template = helm(
        helm_env,
        "template",
        RELEASE,
        str(CHART),
        *REQUIRED,
        "--set",
        "sweeper.mode=cronjob",
        "--kube-version",
        KUBE_VERSION,
    )
    assert template.returncode == 0, template.stderr
    objects = [doc for doc in yaml.safe_load_all(template.stdout) if doc]
    cronjob = one(objects, "CronJob", "sweeper")
    job = cronjob["spec"]["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 3600
    assert "--paused-ok" in pod_spec(cronjob)["containers"][0]["args"]
    # Exit 3 (blocked: not a pause, given --paused-ok) still fails the Job at once.
    exit_rule = next(r for r in job["podFailurePolicy"]["rules"] if "onExitCodes" in r)
    assert exit_rule["onExitCodes"]["values"] == [2, 3]


# --- alerts for components that are down or missing ------------------------------------


def _rule_alerts(objects: list[Obj]) -> dict[str, Obj]:
    rule = one(objects, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


@pytest.mark.parametrize(
    ("args", "present", "absent"),
    [
        (["--set", "sweeper.mode=cronjob"], set(), {"Sweeper", "Publisher"}),
        (
            ["--set", "publisher.enabled=true", "--set", "publisher.auth.existingSecret=t"],
            {"Sweeper", "Publisher"},
            set(),
        ),
        ([], {"Sweeper"}, {"Publisher"}),
    ],
)
def test_down_and_absent_alerts_follow_what_runs(
    helm_env: dict[str, str], args: list[str], present: set[str], absent: set[str]
) -> None:
    """The down/absent alerts of a component exist only when it runs, pinned to its job."""
    template = helm(
        helm_env,
        "template",
        RELEASE,
        str(CHART),
        *REQUIRED,
        "--namespace",
        NAMESPACE,
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.publisherJob=pub",
        *args,
    )
    assert template.returncode == 0, template.stderr
    alerts = _rule_alerts([doc for doc in yaml.safe_load_all(template.stdout) if doc])
    jobs = {"Sweeper": "l0gc-sweeper", "Publisher": "pub"}
    for component in present:
        for kind in ("Down", "Absent", "MetricsAbsent"):
            expr = alerts[f"L0gc{component}{kind}"]["expr"]
            assert f'up{{namespace="{NAMESPACE}", job="{jobs[component]}"}}' in expr
    for component in absent:
        assert not [
            name
            for name in alerts
            if name.startswith(f"L0gc{component}") and (name.endswith(("Down", "Absent")))
        ]
    assert "L0gcSweeperBlocked" in alerts  # the metric alerts stay either way


# --- values.yaml documentation -------------------------------------------------------


def _documented_keys(path: Path) -> dict[str, str]:
    """values.yaml key path -> its `# --` comment (helm-docs style), for keys that have one."""
    documented: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    comment: list[str] | None = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and comment is not None:
            comment.append(stripped[1:].strip())
            continue
        match = re.match(r"^(\s*)([A-Za-z0-9_.-]+):", line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match.group(2)))
            if comment is not None:
                documented[".".join(key for _, key in stack)] = " ".join(comment)
        comment = None
    return documented


def _walk(
    values: dict[str, Any], schema: dict[str, Any], prefix: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema node) of every values key, descending into structured objects."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        properties = schema.get("properties", {})
        assert key in properties, f"values.yaml key {path} is not in values.schema.json"
        child = properties[key]
        yield path, child
        if isinstance(value, dict) and child.get("additionalProperties") is False:
            yield from _walk(value, child, path + ".")


def test_every_value_is_commented_and_described_in_the_schema() -> None:
    """Each values.yaml key has a `# --` comment and a schema entry with a description."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    documented = _documented_keys(CHART / "values.yaml")
    seen = set()
    for path, child in _walk(values, schema):
        seen.add(path)
        assert path in documented, f"values.yaml key {path} has no '# --' comment"
        assert child.get("description"), f"schema property {path} has no description"

    def schema_paths(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, child in node.get("properties", {}).items():
            yield f"{prefix}{key}"
            if child.get("additionalProperties") is False:
                yield from schema_paths(child, f"{prefix}{key}.")

    assert set(schema_paths(schema)) - seen == {"global"}, "schema keys missing from values.yaml"


# --- NOTES.txt ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart whose NOTES.txt also renders as a ConfigMap (helm template skips
    NOTES.txt, and an error in it would only show at `helm install`)."""
    chart = tmp_path_factory.mktemp("notes") / "l0gc"
    shutil.copytree(CHART, chart)
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "test.notes" -}}\n' + notes + "{{- end }}\n"
    )
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "test.notes" . | quote }}\n'
    )
    return chart


@pytest.mark.parametrize("name", VALUES_FILES)
def test_notes_render_and_describe_the_install(
    helm_env: dict[str, str], notes_chart: Path, name: str
) -> None:
    """NOTES.txt renders for every ci values file and names etcd and the publisher's access."""
    template = helm(
        helm_env,
        "template",
        RELEASE,
        str(notes_chart),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        *_values_args(name),
        "--show-only",
        "templates/notes.yaml",
    )
    assert template.returncode == 0, template.stderr
    notes = yaml.safe_load(template.stdout)["data"]["notes"]
    values = yaml.safe_load((CHART / "ci" / name).read_text())
    assert "etcd: " in notes
    assert f"helm test {RELEASE} --namespace {NAMESPACE} --logs" in notes
    if values.get("sweeper", {}).get("enabled", True) and values.get("azure", {}).get("enabled"):
        azure = values["azure"]
        assert (
            f"watermark namespace bind --storage azure --account-url {azure['accountUrl']} "
            f"--container {azure['container']} --root "
        ) in notes
    elif values.get("sweeper", {}).get("enabled", True) and values.get("gcs", {}).get("enabled"):
        bucket = values["gcs"]["bucket"]
        assert f"watermark namespace bind --storage gcs --bucket {bucket} --root " in notes
    elif values.get("sweeper", {}).get("enabled", True):
        bucket = values["s3"]["bucket"]
        assert f"watermark namespace bind --bucket {bucket} --root " in notes
    publisher = values.get("publisher", {})
    if publisher.get("enabled"):
        assert "\n\nPublisher (`watermark serve`)\n" in notes
        scheme = "https" if publisher.get("tls", {}).get("enabled") else "http"
        assert f"HTTP API for writers: {scheme}://l0gc-publisher.{NAMESPACE}.svc:8080" in notes
        fleet = f"{scheme}://*.l0gc-publisher-peers.{NAMESPACE}.svc.cluster.local:8080"
        replicated = publisher.get("replication", {}).get("enabled", True)
        assert (f"refuse the redirects to the other replicas:\n    {fleet}" in notes) == replicated
        if publisher.get("auth", {}).get("insecureNoAuth"):
            assert "WARNING: publisher.auth.insecureNoAuth=true" in notes
        else:
            assert "bearer token" in notes or "client certificate" in notes
    else:
        assert "Publisher" not in notes
