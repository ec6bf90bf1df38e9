"""Every container the chart renders would start: its CLI accepts its arguments and env.

For the default values plus the required ones (ci/minimal-values.yaml) and every
ci/*-values.yaml, each container's command line and environment (ConfigMaps, literal
env, Secret files) goes through the real `gcd` / `watermark` parsers and settings
resolution (tests/deploy/chart.py), without connecting anywhere. A chart value the CLI
cannot take (`tickInterval: 10s` for a seconds-only option, a partition range, a
missing endpoint) fails here rather than crash-looping a pod.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    Obj,
    Parsed,
    containers,
    helm,
    helm_env,
    objects_of,
    parse_container,
)

VALUES_FILES = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's environment, in a temp home."""
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def render(env: dict[str, str], *args: str) -> list[Obj]:
    """`helm template` of the chart with `args`; fails with helm's message."""
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


def parse_all(
    objects: list[Obj], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Parsed]:
    """Each container's parse, keyed by its workload's component label."""
    parsed: dict[str, Parsed] = {}
    for index, (workload, container) in enumerate(containers(objects)):
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        with monkeypatch.context() as patch:
            root = tmp_path / f"pod-{index}"
            parsed[component] = parse_container(objects, workload, container, root, patch)
    return parsed


@pytest.mark.parametrize("name", VALUES_FILES)
def test_every_container_of_every_ci_values_file_parses(
    env: dict[str, str], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rendered container's command line and env pass the real CLI parsers."""
    objects = render(env, "-f", str(CHART / "ci" / name))
    parsed = parse_all(objects, tmp_path, monkeypatch)
    assert parsed, "no container rendered"
    for component, result in parsed.items():
        expected = {"sweeper": "gcd", "publisher": "watermark", "helm-test": "gcd"}[component]
        assert result.program == expected


def test_publisher_durations_and_partition_range_reach_the_cli(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tickInterval 10s / publishInterval 5s become 10 / 5 s; orders/0-63 is 64 partitions."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-values.yaml"))
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.tick_interval == 10.0
    assert publisher.args.publish_interval == 5.0
    assert publisher.partitions == [f"orders/{n}" for n in range(64)]
    assert publisher.args.register is True
    assert len(publisher.etcd.endpoints) == 3


def test_partition_list_and_sub_second_interval_reach_the_cli(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A YAML list with a padded range, 500ms and a 3s etcd timeout parse as meant."""
    objects = render(env, "-f", str(CHART / "ci" / "publisher-tokens-values.yaml"))
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.partitions == [*(f"orders/{n:02d}" for n in range(16)), "audit"]
    assert publisher.args.publish_interval == 0.5
    assert publisher.args.tick_interval == 30.0
    assert publisher.args.register is False
    assert publisher.etcd.timeout_s == 3.0


@pytest.mark.parametrize(
    "endpoints",
    [
        ["--set", "etcd.endpoints={etcd-0.etcd:2379,etcd-1.etcd:2379}"],
        [
            "--set",
            "etcd.endpoints[0]=etcd-0.etcd:2379",
            "--set",
            "etcd.endpoints[1]=etcd-1.etcd:2379",
        ],
        ["--set", "etcd.endpoints=etcd-0.etcd:2379\\,etcd-1.etcd:2379"],
    ],
    ids=["braces", "indexes", "escaped-comma"],
)
def test_several_etcd_endpoints_from_the_command_line(
    env: dict[str, str], endpoints: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two endpoints given with --set reach both CLIs as two endpoints."""
    objects = render(
        env,
        *endpoints,
        "--set",
        "s3.bucket=b",
        "--set",
        "publisher.enabled=true",
        "--set",
        "publisher.auth.existingSecret=tokens",
    )
    parsed = parse_all(objects, tmp_path, monkeypatch)
    for component in ("sweeper", "publisher", "helm-test"):
        assert parsed[component].etcd.endpoints == ("etcd-0.etcd:2379", "etcd-1.etcd:2379")


def test_an_unescaped_comma_in_set_is_refused_by_helm(env: dict[str, str]) -> None:
    """Why the docs use braces: helm splits `--set etcd.endpoints=a:2379,b:2379` itself."""
    done = helm(
        env,
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "s3.bucket=b",
        "--set",
        "etcd.endpoints=etcd-0.etcd:2379,etcd-1.etcd:2379",
    )
    assert done.returncode != 0


def test_cronjob_sweeps_treat_a_pause_as_success(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cronjob mode passes --paused-ok by default, and not with cronjob.pausedOk=false."""
    values = str(CHART / "ci" / "cronjob-values.yaml")
    sweeper = parse_all(render(env, "-f", values), tmp_path / "a", monkeypatch)["sweeper"]
    assert sweeper.command == "sweep"
    assert sweeper.args.paused_ok is True
    assert sweeper.args.shard_count == 3
    strict = render(env, "-f", values, "--set", "sweeper.cronjob.pausedOk=false")
    assert parse_all(strict, tmp_path / "b", monkeypatch)["sweeper"].args.paused_ok is False


def test_publisher_env_durations_reach_the_cli_as_written(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`publisher.env` values pass unconverted: watermark takes 1m, 15s and 250ms itself."""
    objects = render(
        env,
        "-f",
        str(CHART / "ci" / "publisher-values.yaml"),
        "--set",
        "publisher.env.L0GC_HOLD_TTL=1m",
        "--set",
        "publisher.env.L0GC_TICKER_LEASE_TTL=15s",
        "--set",
        "publisher.env.L0GC_HTTP_READ_TIMEOUT=250ms",
        "--set",
        "publisher.env.L0GC_NO_IDLE_ADVANCE=true",
    )
    publisher = parse_all(objects, tmp_path, monkeypatch)["publisher"]
    assert publisher.args.hold_ttl == 60.0
    assert publisher.args.ticker_lease_ttl == 15
    assert publisher.args.http_read_timeout == 0.25
    assert publisher.args.no_idle_advance is True


def test_a_bad_publisher_value_fails_naming_its_variable(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value watermark refuses fails the chart test with the CLI's message, naming it."""
    objects = render(
        env,
        "-f",
        str(CHART / "ci" / "publisher-values.yaml"),
        "--set",
        "publisher.env.L0GC_HOLD_TTL=soon",
    )
    with pytest.raises(pytest.fail.Exception, match="env L0GC_HOLD_TTL: invalid value 'soon'"):
        parse_all(objects, tmp_path, monkeypatch)
