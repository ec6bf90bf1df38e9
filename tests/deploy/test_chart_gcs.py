"""The chart with gcs.enabled: the sweeper gets --storage gcs and the bucket; GKE
workload identity is the ServiceAccount annotation; a key file comes from an existing
Secret as a read-only file; the CLI takes the pod's configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import CHART, Obj, helm, helm_env
from tests.deploy.test_chart_cli import parse_all, render

GCS = str(CHART / "ci" / "gcs-values.yaml")


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
    """The Google service account on the ServiceAccount, no key file, and a CLI parse of
    the pod's configuration that selects GCS with gcs.bucket."""
    objects = render(env, "-f", GCS)
    account = _one(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "l0gc-sweeper@l0gc-example.iam.gserviceaccount.com"
    }
    config = _one(objects, "ConfigMap")["data"]
    assert (config["L0GC_STORAGE"], config["L0GC_BUCKET"]) == ("gcs", "l0-objects")
    assert "L0GC_GCS_CREDENTIALS_FILE" not in config
    pod = _one(objects, "Deployment")["spec"]["template"]
    assert "gcs-credentials" not in [v["name"] for v in pod["spec"]["volumes"]]
    args = parse_all(objects, tmp_path, monkeypatch)["sweeper"].args
    assert (args.storage, args.bucket, args.endpoint_url) == ("gcs", "l0-objects", None)
    assert args.gcs_credentials_file is None


def test_a_key_file_secret_is_mounted_as_a_file(env: dict[str, str]) -> None:
    """gcs.credentials.existingSecret: a read-only Secret volume, and the flag's variable
    pointing at the file."""
    objects = render(
        env,
        "-f",
        GCS,
        "--set",
        "gcs.workloadIdentityServiceAccount=",
        "--set",
        "gcs.credentials.existingSecret=l0gc-gcs",
    )
    config = _one(objects, "ConfigMap")["data"]
    assert config["L0GC_GCS_CREDENTIALS_FILE"] == "/var/run/l0gc/gcs/key.json"
    assert "annotations" not in _one(objects, "ServiceAccount")["metadata"]
    pod = _one(objects, "Deployment")["spec"]["template"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "gcs-credentials"]
    assert volume["secret"]["secretName"] == "l0gc-gcs"
    assert volume["secret"]["items"] == [{"key": "key.json", "path": "key.json"}]
    (mount,) = [
        m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "gcs-credentials"
    ]
    assert (mount["mountPath"], mount["readOnly"]) == ("/var/run/l0gc/gcs", True)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "s3.bucket=b"], "s3.bucket must stay empty with gcs.enabled"),
        (["--set", "gcs.bucket="], "gcs.bucket is required"),
        (["--set", "gcs.bucket=gs://x"], "gcs.bucket"),
        (
            [
                "--set",
                "azure.enabled=true",
                "--set",
                "azure.accountUrl=https://a",
                "--set",
                "azure.container=abc",
            ],
            "choose one",
        ),
        (["--set", "s3.endpointUrl=http://minio:9000"], "s3.endpointUrl must stay empty"),
        (
            ["--set", "gcs.workloadIdentityServiceAccount=sweeper"],
            "gcs.workloadIdentityServiceAccount",
        ),
        (["--set", "gcs.project=p"], "project"),
    ],
)
def test_values_that_cannot_work_refuse_to_render(
    env: dict[str, str], extra: list[str], message: str
) -> None:
    """A bucket beside gcs.enabled, no bucket or gs:// in it, Azure too, an S3 endpoint,
    a service account that is not one, an unknown key (the schema is strict)."""
    done = helm(env, "template", "t", str(CHART), "-f", GCS, *extra)
    assert done.returncode != 0
    assert message in done.stderr
