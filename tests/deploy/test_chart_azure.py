"""The chart with azure.enabled: the sweeper gets --storage azure, the account URL and the
container; workload identity is the ServiceAccount annotation and the pod label; a
connection string comes from an existing Secret as a read-only file; the CLI takes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import CHART, Obj, helm, helm_env
from tests.deploy.test_chart_cli import parse_all, render

AZURE = str(CHART / "ci" / "azure-values.yaml")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's environment, in a temp home."""
    return helm_env(tmp_path_factory.mktemp("helm-home"))


def _one(objects: list[Obj], kind: str) -> Obj:
    (found,) = [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == "sweeper"
    ]
    return found


def test_workload_identity_and_the_sweepers_flags(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client id on the ServiceAccount, the use label on the pod, and a CLI parse of the
    pod's configuration that selects Azure with no bucket."""
    objects = render(env, "-f", AZURE)
    account = _one(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000000"
    }
    pod = _one(objects, "Deployment")["spec"]["template"]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    config = _one(objects, "ConfigMap")["data"]
    assert (config["L0GC_STORAGE"], config["L0GC_CONTAINER"]) == ("azure", "l0-objects")
    assert "L0GC_BUCKET" not in config
    args = parse_all(objects, tmp_path, monkeypatch)["sweeper"].args
    assert (args.storage, args.container, args.bucket) == ("azure", "l0-objects", None)
    assert args.account_url == "https://l0gcexample.blob.core.windows.net"


def test_a_connection_string_secret_is_mounted_as_a_file(env: dict[str, str]) -> None:
    """azure.connectionString.existingSecret: a read-only Secret volume, and the flag's
    variable pointing at the file; no workload identity label then."""
    objects = render(
        env,
        "-f",
        AZURE,
        "--set",
        "azure.workloadIdentityClientId=",
        "--set",
        "azure.connectionString.existingSecret=l0gc-azure",
    )
    config = _one(objects, "ConfigMap")["data"]
    assert config["L0GC_AZURE_CONNECTION_STRING_FILE"] == "/var/run/l0gc/azure/connection-string"
    pod = _one(objects, "Deployment")["spec"]["template"]
    assert "azure.workload.identity/use" not in pod["metadata"]["labels"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "azure-connection-string"]
    assert volume["secret"]["secretName"] == "l0gc-azure"
    (mount,) = [
        m
        for m in pod["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "azure-connection-string"
    ]
    assert (mount["mountPath"], mount["readOnly"]) == ("/var/run/l0gc/azure", True)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "s3.bucket=b"], "s3.bucket must stay empty with azure.enabled"),
        (["--set", "azure.container="], "azure.container is required"),
        (["--set", "azure.accountUrl=ftp://x"], "azure.accountUrl"),
    ],
)
def test_values_that_cannot_work_refuse_to_render(
    env: dict[str, str], extra: list[str], message: str
) -> None:
    """A bucket beside azure.enabled, no container, an account URL that is not one."""
    done = helm(env, "template", "t", str(CHART), "-f", AZURE, *extra)
    assert done.returncode != 0
    assert message in done.stderr
