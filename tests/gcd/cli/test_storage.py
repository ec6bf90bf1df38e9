"""The store options end to end: `gcd sweep --versions/--listing` and what the JSON says
it detected; `gcd spark-sweep` refusing a current-only inventory of a versioned bucket
(real moto server)."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest

from gcd.cli.main import main
from gcd.cli.storage import store_settings
from gcd.rules.layout import KeyLayout
from gcd.service.runtime import SweepRuntime, SweepSettings
from gcd.storage.azure.settings import AzureSettings
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig
from l0gc import exitcodes
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

LAYOUT = KeyLayout.default("level_zero/data")


@pytest.fixture
def bucket(s3_server: LocalS3, request: pytest.FixtureRequest) -> str:
    """A versioned bucket of this test's own (moto cannot empty one through the backend)."""
    name = f"l0gc-stores-cli-{request.node.name[5:30].replace('_', '-')}"
    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def test_sweep_json_says_what_it_detected_and_markers_only_is_honoured(
    s3_server: LocalS3, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = [LAYOUT.format(p, 2, "g") for p in (1, 2)]
    s3_server.seed(bucket, garbage, last_modified=datetime.now(UTC) - timedelta(hours=2))
    code = main(
        [
            "sweep",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--safe-epoch",
            "5",
            "--versions",
            "markers-only",
            "--listing",
            "unordered",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == exitcodes.OK
    assert summary["deleted"] == len(garbage)
    assert summary["deleted_markers"] == 0
    assert summary["store"] == {
        "versioning": "Enabled",
        "object_lock": False,
        "listing": "unordered",
        "batch_delete": True,
        "versions": "markers-only",
    }


def test_a_bad_versions_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--bucket", "b", "--safe-epoch", "5", "--versions", "all"])
    assert code == exitcodes.USAGE
    assert "--versions" in capsys.readouterr().err


def test_spark_sweep_refuses_a_current_only_inventory_of_a_versioned_bucket(
    s3_server: LocalS3, bucket: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 41: Spark deletes every version by id (from ListObjectVersions or an
    inventory of all versions); an inventory of current versions cannot name them, so a
    deleting sweep from one refuses before starting Spark, naming the fix."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "sourceBucket": bucket,
                "destinationBucket": "arn:aws:s3:::dest",
                "fileFormat": "CSV",
                "fileSchema": "Bucket, Key, Size, LastModifiedDate",
                "files": [{"key": "inventory/data/a.csv.gz", "size": 1}],
            }
        )
    )
    code = main(
        [
            "spark-sweep",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--safe-epoch",
            "5",
            "--inventory",
            str(manifest),
            "--output",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == exitcodes.USAGE
    assert "versioning Enabled" in err
    assert "IncludedObjectVersions All" in err


async def test_status_shows_what_a_running_sweeper_detected(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 28: a running sweeper announces what its preflight detected (real etcd and a
    versioned moto bucket), and `gcd status` shows it beside the sweeper."""
    etcd = EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace)
    s3 = S3Settings(bucket, s3_server.endpoint_url, "us-east-1")
    settings = SweepSettings(RoundConfig(layout=LAYOUT), s3, etcd, shard_ttl_s=3)
    async with SweepRuntime.open(settings) as runtime:  # announces shard 0 of 1 while open
        await runtime.sweeper.store.detect()

        async def shown() -> bool:
            await asyncio.to_thread(
                main, ["status", "--etcd", etcd_server.endpoint, "--namespace", namespace]
            )
            return (
                "store          versioning Enabled, object lock off, listing ordered"
                in capsys.readouterr().out
            )

        await wait_until(shown, timeout_s=60, what="gcd status shows the detection")


def _flags(**given: object) -> argparse.Namespace:
    """Resolved store flags as a command holds them (unset ones at their defaults)."""
    defaults: dict[str, object] = {
        "storage": "s3",
        "bucket": None,
        "endpoint_url": None,
        "region": None,
        "account_url": None,
        "container": None,
        "azure_connection_string_file": None,
        "gcs_credentials_file": None,
        "gcs_anonymous": False,
    }
    return argparse.Namespace(**{**defaults, **given})


def test_the_store_flags_make_one_store_settings_value() -> None:
    """`store_settings`: --bucket (S3, with the sweep's pool size), --storage azure, or
    --storage gcs, each to its own settings type; what is missing or mixed is refused."""
    s3 = store_settings(
        _flags(bucket="b", endpoint_url="http://127.0.0.1:9000", region="eu-west-1"),
        max_pool_connections=40,
    )
    assert s3 == S3Settings("b", "http://127.0.0.1:9000", "eu-west-1", max_pool_connections=40)
    azure = store_settings(
        _flags(storage="azure", account_url="https://a.blob.core.windows.net", container="l0c")
    )
    assert azure == AzureSettings("https://a.blob.core.windows.net", "l0c")
    gcs = store_settings(_flags(storage="gcs", bucket="l0g", gcs_anonymous=True))
    assert gcs == GcsSettings("l0g", None, None, anonymous=True)
    with pytest.raises(
        ConfigError,
        match=r"^no bucket given: pass --bucket NAME or set "
        r"L0GC_BUCKET \(or --storage azure",
    ):
        store_settings(_flags())
    with pytest.raises(ConfigError, match=r"^just this$"):
        store_settings(_flags(), no_bucket="just this")
    with pytest.raises(ConfigError, match="--container is for Azure Blob Storage"):
        store_settings(_flags(bucket="b", container="l0c"))
    with pytest.raises(ConfigError, match="--storage gcs needs --bucket NAME"):
        store_settings(_flags(storage="gcs"))
