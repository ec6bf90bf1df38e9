"""Versioned S3 buckets on Spark (issue 41): `gcd spark-sweep` frees every version and
delete marker of an eligible key by version id and keeps every version of a live key,
from a ListObjectVersions listing on the executors and from an S3 Inventory of all
versions (CSV, ORC, Parquet); `--versions markers-only`; Object Lock refusals counted
`locked`; `spark-report` splits current and non-current bytes; an undo window is
refused; the plan of what a job does about versions is pinned without Spark."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pytest
from botocore.config import Config

from gcd.cli.main import main
from gcd.rules.versions import VersionMode
from gcd.spark.versioning import plan_versions
from gcd.storage.objectstore import StoreFeatures
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0gc.errors import ConfigError
from l0lab.testing.local_servers import LocalEtcd, LocalS3

from .inventories import Version, list_versions, write_versions_inventory

SAFE_EPOCH = 4
CLUSTER_EPOCH = 20
ROOT = "level_zero/data"
CLAIM = claim_key(ROOT)
_names = itertools.count()


def client_for(endpoint: str) -> Any:
    """A boto3 client that does not add checksums moto's Object Lock path refuses."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def new_bucket(client: Any, *, lock: bool = False) -> str:
    """A fresh versioned bucket (Object Lock implies versioning)."""
    name = f"l0gc-spark-versions-{next(_names)}-{random.randrange(10**6)}"
    client.create_bucket(Bucket=name, **({"ObjectLockEnabledForBucket": True} if lock else {}))
    if not lock:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def key(prefix: int, epoch: int, name: str) -> str:
    """A key of the default layout."""
    return f"{ROOT}/{prefix:03d}/{epoch:018d}/{name}"


def seed_versions(client: Any, bucket: str) -> tuple[set[str], set[str]]:
    """Eligible and live keys with two versions each, every third one deleted (a delete
    marker on top): (eligible keys, live keys)."""
    eligible: set[str] = set()
    live: set[str] = set()
    for n, (prefix, epoch) in enumerate(itertools.product((1, 2, 417), range(1, 9))):
        name = key(prefix, epoch, f"seg{n}.log")
        (eligible if epoch <= SAFE_EPOCH else live).add(name)
        client.put_object(Bucket=bucket, Key=name, Body=b"first version")
        client.put_object(Bucket=bucket, Key=name, Body=b"second, larger version")
        if n % 3 == 0:
            client.delete_object(Bucket=bucket, Key=name)
    return eligible, live


def entries(client: Any, bucket: str) -> set[tuple[str, str, bool]]:
    """(key, version id, is a delete marker) of every version in the bucket."""
    return {(v.key, v.version_id, v.delete_marker) for v in list_versions(client, bucket)}


def sweep_args(s3: LocalS3, bucket: str, out: Path, *extra: str) -> list[str]:
    """`gcd spark-sweep` on this bucket; every object is past a zero grace."""
    return [
        "spark-sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3.endpoint_url,
        "--region",
        "us-east-1",
        "--output",
        str(out),
        "--json",
        "--grace",
        "0s",
        *extra,
    ]


async def gcd(argv: list[str]) -> int:
    """Run the real entry point (it runs its own event loop, so in a thread)."""
    return await asyncio.to_thread(main, argv)


def summary(out: Path, name: str = "summary.json") -> dict[str, Any]:
    """The JSON document the command wrote."""
    return dict(json.loads((out / name).read_text()))


# -- the plan (no Spark) ----------------------------------------------------------------

VERSIONED = StoreFeatures(versioning="Enabled", object_lock=True)
PLAIN = StoreFeatures(versioning="off")


def test_a_listing_lists_versions_exactly_on_a_versioned_bucket_with_reclaim() -> None:
    """--list: versions on a versioned (or suspended) bucket with reclaim, never else."""

    def plan(features: StoreFeatures, mode: VersionMode) -> Any:
        return plan_versions(mode=mode, features=features, source="list", deleting=True, bucket="b")

    assert plan(VERSIONED, VersionMode.RECLAIM).versions is True
    assert plan(StoreFeatures(versioning="Suspended"), VersionMode.RECLAIM).versions is True
    assert plan(VERSIONED, VersionMode.MARKERS_ONLY).versions is False
    assert plan(PLAIN, VersionMode.RECLAIM).versions is False
    assert plan(StoreFeatures(versioning="unknown"), VersionMode.RECLAIM).versions is False
    assert plan(VERSIONED, VersionMode.RECLAIM).object_lock is True
    assert plan(PLAIN, VersionMode.RECLAIM).object_lock is False
    assert plan(VERSIONED, VersionMode.RECLAIM).store == {
        "versioning": "Enabled",
        "object_lock": True,
        "listing": "ordered",
        "batch_delete": True,
        "versions": "reclaim",
    }
    assert plan(VERSIONED, VersionMode.MARKERS_ONLY).store["versions"] == "markers-only"
    assert plan(PLAIN, VersionMode.RECLAIM).store["versions"] == "none"


def test_an_inventory_of_current_versions_cannot_reclaim_a_versioned_bucket() -> None:
    """A deleting reclaim sweep from a current-only inventory of a versioned bucket is
    refused; a dry run (no features), markers-only and an all-versions report are not."""
    with pytest.raises(ConfigError, match="IncludedObjectVersions All"):
        plan_versions(
            mode=VersionMode.RECLAIM,
            features=VERSIONED,
            source="inventory",
            deleting=True,
            bucket="b",
            inventory="m.json",
        )
    for features, mode, deleting, has in (
        (None, VersionMode.RECLAIM, False, False),
        (VERSIONED, VersionMode.RECLAIM, False, False),
        (VERSIONED, VersionMode.MARKERS_ONLY, True, False),
        (PLAIN, VersionMode.RECLAIM, True, False),
    ):
        assert not plan_versions(
            mode=mode,
            features=features,
            source="inventory",
            inventory_has_versions=has,
            deleting=deleting,
            bucket="b",
        ).versions
    assert plan_versions(
        mode=VersionMode.RECLAIM,
        features=VERSIONED,
        source="inventory",
        inventory_has_versions=True,
        deleting=True,
        bucket="b",
    ).versions
    assert not plan_versions(
        mode=VersionMode.MARKERS_ONLY,
        features=None,
        source="inventory",
        inventory_has_versions=True,
        deleting=False,
        bucket="b",
    ).versions


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [("env", "10m", "600s"), ("config", "1h", "3600s"), ("flag", "2s", "2s")],
)
def test_an_undo_window_without_a_journal_is_refused_clearly(
    where: str,
    value: str,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A non-zero undo window from the flag, the env or the config file, without
    --journal-prefix (the journal names l0gc's markers; restore reads it), stops the
    command with exit 2 before any Spark or S3 work, naming both."""
    argv = [
        "spark-sweep",
        "--bucket",
        "b",
        "--list",
        "--safe-epoch",
        "3",
        "--output",
        str(tmp_path / "out"),
    ]
    if where == "env":
        monkeypatch.setenv("L0GC_UNDO_WINDOW", value)
    elif where == "flag":
        argv += ["--undo-window", value]
    else:
        config = tmp_path / "gcd.toml"
        config.write_text(f'undo_window = "{value}"\n')
        argv += ["--config", str(config)]
    assert main(argv) == exitcodes.USAGE
    error = capsys.readouterr().err
    assert f"--undo-window {said} needs --journal-prefix PREFIX" in error


def test_a_zero_undo_window_is_no_window(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """L0GC_UNDO_WINDOW=0s is accepted (nothing to honour): the command goes on to its
    next check (here the missing --output)."""
    monkeypatch.setenv("L0GC_UNDO_WINDOW", "0s")
    assert main(["spark-sweep", "--bucket", "b", "--list", "--safe-epoch", "3"]) == (
        exitcodes.USAGE
    )
    error = capsys.readouterr().err
    assert "--output" in error
    assert "undo window" not in error


# -- listings on moto ---------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.integration
async def test_list_sweep_frees_every_version_of_eligible_keys_and_keeps_live_ones(
    spark: Any,
    s3_server: LocalS3,
    etcd_server: LocalEtcd,
    namespace: str,
    watermark_store: Any,
    tmp_path: Path,
) -> None:
    """The issue's Show on a versioned moto bucket: every version and delete marker of
    the eligible keys goes, by version id; both versions (and markers) of every live key
    stay; the summary counts versions and markers as `gcd sweep --json` does."""
    from tests.binding import bind  # noqa: PLC0415

    from .conftest import publish_safe_epoch  # noqa: PLC0415

    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client)
    eligible, live = seed_versions(client, bucket)
    await publish_safe_epoch(watermark_store, SAFE_EPOCH, CLUSTER_EPOCH)
    await bind(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
    before = entries(client, bucket)
    out = tmp_path / "out"
    code = await gcd(
        sweep_args(
            s3_server,
            bucket,
            out,
            "--list",
            "--list-tasks",
            "4",
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
        )
    )
    assert code == exitcodes.OK
    after = entries(client, bucket)
    assert {e for e in after if e[0] in eligible} == set()
    assert {e for e in before if e[0] in live} == {e for e in after if e[0] != CLAIM}
    gone = before - after
    markers = sum(1 for e in gone if e[2])
    done = summary(out)
    assert done["deleted"] == len(gone) == done["deleted_versions"] + done["deleted_markers"]
    assert done["deleted_markers"] == markers == 4
    assert (done["errors"], done["locked"]) == (0, 0)
    assert done["store"]["versions"] == "reclaim"
    assert done["store"]["versioning"] == "Enabled"
    frame = pd.read_parquet(out / "decisions")
    deleted = frame[frame["action"] == "deleted"]
    assert deleted["version_id"].notna().all()
    assert (
        set(zip(deleted["key"], deleted["version_id"], deleted["delete_marker"], strict=True))
        == gone
    )


@pytest.mark.spark
@pytest.mark.integration
async def test_markers_only_deletes_current_keys_and_keeps_every_version(
    spark: Any, s3_server: LocalS3, tmp_path: Path
) -> None:
    """--versions markers-only: one delete marker per current eligible key, every old
    version kept (bytes still billed), as `gcd sweep --versions markers-only`."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client)
    eligible, _ = seed_versions(client, bucket)
    before = entries(client, bucket)
    current = {k for k, _, m in before if k in eligible} - {k for k, _, m in before if m}
    out = tmp_path / "out"
    code = await gcd(
        sweep_args(
            s3_server,
            bucket,
            out,
            "--list",
            "--list-tasks",
            "2",
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--versions",
            "markers-only",
        )
    )
    assert code == exitcodes.OK
    after = entries(client, bucket)
    assert before <= after
    assert {k for k, _, marker in after - before if marker} == current
    done = summary(out)
    assert done["deleted"] == len(current)
    assert (done["deleted_versions"], done["deleted_markers"]) == (0, 0)
    assert done["store"]["versions"] == "markers-only"


@pytest.mark.spark
@pytest.mark.integration
async def test_object_lock_refusals_are_counted_locked_not_errors(
    spark: Any, s3_server: LocalS3, tmp_path: Path
) -> None:
    """Retained and legal-hold versions of eligible keys are kept and counted `locked`;
    the rest goes; exit 0."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client, lock=True)
    eligible, live = seed_versions(client, bucket)
    until = datetime.now(UTC) + timedelta(days=2)
    retained, held = key(2, 3, "retained.log"), key(417, 1, "held.log")
    client.put_object(
        Bucket=bucket,
        Key=retained,
        Body=b"r",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=until,
        ChecksumAlgorithm="CRC32",
    )
    client.put_object(
        Bucket=bucket,
        Key=held,
        Body=b"h",
        ObjectLockLegalHoldStatus="ON",
        ChecksumAlgorithm="CRC32",
    )
    before = entries(client, bucket)
    out = tmp_path / "out"
    code = await gcd(
        sweep_args(
            s3_server, bucket, out, "--list", "--list-tasks", "2", "--safe-epoch", str(SAFE_EPOCH)
        )
    )
    assert code == exitcodes.OK
    after = entries(client, bucket)
    assert {k for k, _, _ in after} == {retained, held} | live
    assert {e for e in before if e[0] in live} <= after
    done = summary(out)
    assert (done["locked"], done["errors"]) == (2, 0)
    assert done["store"]["object_lock"] is True
    frame = pd.read_parquet(out / "decisions")
    assert set(frame[frame["action"] == "locked"]["key"]) == {retained, held}
    assert not eligible & {k for k, _, _ in after}


@pytest.mark.spark
@pytest.mark.integration
async def test_report_splits_current_and_noncurrent_bytes(
    spark: Any, s3_server: LocalS3, tmp_path: Path
) -> None:
    """spark-report --list on a versioned bucket counts every version and marker, and
    splits bytes (all and garbage) into current and non-current exactly."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client)
    eligible, _ = seed_versions(client, bucket)
    rows = list_versions(client, bucket)
    out = tmp_path / "report"
    code = await gcd(
        [
            "spark-report",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--output",
            str(out),
            "--json",
            "--grace",
            "0s",
            "--list",
            "--safe-epoch",
            str(SAFE_EPOCH),
        ]
    )
    assert code == exitcodes.OK
    doc = summary(out, "report.json")

    def total(picked: list[Version]) -> tuple[int, int]:
        return len(picked), sum(v.size for v in picked)

    current = [v for v in rows if v.is_latest and not v.delete_marker]
    noncurrent = [v for v in rows if not v.is_latest and not v.delete_marker]
    assert doc["versions"] is True
    assert (doc["current_objects"], doc["current_bytes"]) == total(current)
    assert (doc["noncurrent_objects"], doc["noncurrent_bytes"]) == total(noncurrent)
    assert doc["delete_markers"] == sum(v.delete_marker for v in rows) == 8
    assert doc["objects"] == len(rows)
    garbage = [v for v in noncurrent if v.key in eligible]
    assert (doc["garbage_noncurrent_objects"], doc["garbage_noncurrent_bytes"]) == total(garbage)
    assert doc["garbage_bytes"] == sum(v.size for v in rows if v.key in eligible)
    assert doc["noncurrent_bytes"] > 0


# -- inventories of all versions ----------------------------------------------------------


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.parametrize("file_format", ["CSV", "ORC", "Parquet"])
async def test_an_inventory_of_all_versions_frees_every_version_of_eligible_keys(
    spark: Any, s3_server: LocalS3, tmp_path: Path, file_format: str
) -> None:
    """From a generated all-versions inventory (each format as S3 writes it), every
    version and marker of the eligible keys goes by version id; live keys keep all."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client)
    eligible, live = seed_versions(client, bucket)
    before = entries(client, bucket)
    manifest = write_versions_inventory(
        tmp_path / "inv", bucket, list_versions(client, bucket), file_format
    )
    out = tmp_path / "out"
    code = await gcd(
        sweep_args(
            s3_server, bucket, out, "--inventory", str(manifest), "--safe-epoch", str(SAFE_EPOCH)
        )
    )
    assert code == exitcodes.OK
    after = entries(client, bucket)
    assert {e for e in after if e[0] in eligible} == set()
    assert {e for e in before if e[0] in live} == after
    done = summary(out)
    assert done["deleted"] == len(before - after)
    assert done["deleted_markers"] == 4
    assert done["source"] == "inventory"


@pytest.mark.spark
@pytest.mark.integration
async def test_a_current_only_inventory_of_a_versioned_bucket_is_refused(
    spark: Any, s3_server: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting by key from a current-only inventory would only add markers: exit 2
    before any Spark work, naming IncludedObjectVersions All; nothing changes."""
    from .conftest import Listed, write_inventory  # noqa: PLC0415

    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client)
    seed_versions(client, bucket)
    before = entries(client, bucket)
    rows = [
        Listed(v.key, v.size, v.last_modified)
        for v in list_versions(client, bucket)
        if v.is_latest and not v.delete_marker
    ]
    manifest = write_inventory(tmp_path / "inv", bucket, rows)
    code = await gcd(
        sweep_args(
            s3_server,
            bucket,
            tmp_path / "out",
            "--inventory",
            str(manifest),
            "--safe-epoch",
            str(SAFE_EPOCH),
        )
    )
    assert code == exitcodes.USAGE
    assert "IncludedObjectVersions All" in capsys.readouterr().err
    assert entries(client, bucket) == before
