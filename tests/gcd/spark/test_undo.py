"""The undo window on Spark (`gcd.spark.undo`, `gcd.spark.window`): on a versioned
bucket a run hides every eligible key behind a delete marker the journal names, `gcd
restore` brings each back with its bytes, and a later run, once the window has passed,
reclaims every version and l0gc's markers; another writer's marker is never touched. On
a store without versions the job deletes only up to the M of one window ago."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from gcd.spark.undo import JobUndo, planned_rows
from gcd.storage.rows import Action
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3

from .test_sweep import etcd_args, gcd, gcd_args, summary

PREFIX = "l0gc-audit/journal"
ROOT = "level_zero/data"
CLAIM = claim_key(ROOT)
ELIGIBLE = [f"{ROOT}/{p:03d}/{3:018d}/seg{p}.log" for p in range(12)]
LIVE = [f"{ROOT}/{p:03d}/{15:018d}/seg{p}.log" for p in range(4)]
FOREIGN = ELIGIBLE[:2]
"""Eligible keys someone else deleted (a delete marker no journal names)."""


def _versions(client: Any, bucket: str) -> dict[str, list[tuple[str, bool]]]:
    """key -> [(version id, is a delete marker)] of every key under the root."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=ROOT):
        for marker, items in (
            (False, page.get("Versions", ())),
            (True, page.get("DeleteMarkers", ())),
        ):
            for item in items:
                if item["Key"] != CLAIM:
                    found.setdefault(item["Key"], []).append((item["VersionId"], marker))
    return found


def _live(client: Any, bucket: str) -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=ROOT)
    return {item["Key"] for page in pages for item in page.get("Contents", ())} - {CLAIM}


def _age(s3_server: LocalS3, bucket: str, by: timedelta) -> None:
    """Every version and marker in the bucket written `by` earlier (the store's clock)."""
    keys = s3_server._backend().get_bucket(bucket).keys
    for key in list(keys.keys()):
        for version in keys.getlist(key, []):
            version.last_modified = version.last_modified - by


@pytest.mark.spark
@pytest.mark.integration
async def test_a_versioned_run_hides_restore_brings_back_and_a_later_run_reclaims(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Any,
    watermark_store: WatermarkStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    s3_server.set_versioning(bucket, enabled=True)
    for key in ELIGIBLE + LIVE:
        client.put_object(Bucket=bucket, Key=key, Body=b"first " + key.encode())
        client.put_object(Bucket=bucket, Key=key, Body=b"second " + key.encode())
    for key in FOREIGN:
        client.delete_object(Bucket=bucket, Key=key)
    await set_safe_epoch(10, 20)
    etcd = etcd_args(etcd_server, namespace)

    def sweep(out: str, window: str) -> list[str]:
        argv = gcd_args(s3_server, bucket, tmp_path / out, "--list", "--grace", "0s")
        return [*argv, "--undo-window", window, "--journal-prefix", PREFIX, *etcd]

    # 1. A run with a window hides: a marker on top of each eligible key, every byte kept.
    assert await gcd(sweep("hide", "1h")) == exitcodes.OK
    done = summary(tmp_path / "hide")
    hidden = sorted(set(ELIGIBLE) - set(FOREIGN))
    assert done["undo"]["rule"] == "hide-then-reclaim"
    assert (done["markers_written"], done["deleted"]) == (len(hidden), 0)
    assert done["undo"]["foreign_markers"] == len(FOREIGN)
    assert _live(client, bucket) == set(LIVE)
    versions = _versions(client, bucket)
    assert all(len(versions[key]) == 3 for key in hidden)  # two versions and our marker

    # explain names the application and says the key can come back.
    capsys.readouterr()
    store = ["--bucket", bucket, "--endpoint-url", s3_server.endpoint_url, "--region", "us-east-1"]
    assert await gcd(["explain", *store, "--journal-prefix", PREFIX, *etcd, hidden[0]]) == 0
    told = capsys.readouterr().out
    assert f"by Spark application {done['application']}" in told
    assert f"gcd restore --key {hidden[0]}" in told

    # 2. gcd restore (GC paused) of the run's round brings every key back with its bytes.
    assert await gcd(["pause", "--reason", "a wrong M(p)", *etcd]) == exitcodes.OK
    restore = ["restore", *store, "--journal-prefix", PREFIX, *etcd, "--json"]
    capsys.readouterr()
    assert await gcd([*restore, "--round", done["journal"]["round"]]) == exitcodes.OK
    assert json.loads(capsys.readouterr().out)["restored"] == len(hidden)
    assert _live(client, bucket) == set(LIVE) | set(hidden)
    for key in hidden:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert body == b"second " + key.encode()
    assert await gcd(["resume", *etcd]) == exitcodes.OK

    # 3. Hidden again, then once the markers are older than the window a later run
    # reclaims every version and our marker; the foreign markers' keys stay as they are.
    assert await gcd(sweep("again", "1h")) == exitcodes.OK
    assert summary(tmp_path / "again")["markers_written"] == len(hidden)
    before = _versions(client, bucket)
    _age(s3_server, bucket, timedelta(hours=2))
    assert await gcd(sweep("reclaim", "1h")) == exitcodes.OK
    done = summary(tmp_path / "reclaim")
    after = _versions(client, bucket)
    assert set(after) == set(LIVE) | set(FOREIGN)
    assert all(after[key] == before[key] for key in after)
    reclaimed = sum(len(before[key]) for key in hidden)
    assert (done["deleted"], done["markers_written"]) == (reclaimed, 0)
    assert done["deleted_markers"] == len(hidden)
    verify = ["journal", "verify", *store, "--journal-prefix", PREFIX, *etcd, "--json"]
    capsys.readouterr()
    assert await gcd(verify) == exitcodes.OK
    assert json.loads(capsys.readouterr().out)["verdict"] == "OK"


@pytest.mark.spark
@pytest.mark.integration
async def test_a_store_without_versions_deletes_only_what_was_garbage_for_a_window(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Any,
    tmp_path: Path,
) -> None:
    """Without M's history one window old the job deletes nothing and says why; the
    history it records is what a later job reads (the M of one window ago)."""
    s3_server.seed(bucket, ELIGIBLE + LIVE, last_modified=datetime.now(UTC) - timedelta(hours=2))
    await set_safe_epoch(10, 20)
    argv = gcd_args(s3_server, bucket, tmp_path / "out", "--list", "--undo-window", "1h")
    argv += ["--journal-prefix", PREFIX, *etcd_args(etcd_server, namespace)]
    assert await gcd(argv) == exitcodes.OK
    done = summary(tmp_path / "out")
    assert done["undo"]["rule"] == "delayed-m"
    assert done["undo"]["delayed_safe_epoch"] is None
    assert "no M history one window old yet" in done["undo"]["note"]
    assert done["deleted"] == 0
    assert s3_server.keys(bucket) >= set(ELIGIBLE)


def _row(
    version: str, *, marker: bool = False, latest: bool = False, age_s: float = 7200
) -> dict[str, Any]:
    return {
        "key": "k",
        "version_id": version,
        "delete_marker": marker,
        "is_latest": latest,
        "last_modified_s": 10_000.0 - age_s,
        "size": 0 if marker else 5,
        "action": Action.DELETE.value,
    }


def test_each_version_of_a_key_gets_its_plans_action() -> None:
    """The daemon's plan (`plan_key`) row by row: hide the latest data version (the rest
    held), reclaim our old marker and every version, hold a young one, leave a foreign
    one, wait on a version in its grace period."""

    def actions(rows: list[dict[str, Any]], ours: tuple[str, ...]) -> list[tuple[str, Any]]:
        planned = planned_rows(rows, ours, 10_000.0, 3600.0)
        return [(row["action"], row["hides"]) for row in planned]

    data = [_row("v2", latest=True), _row("v1")]
    assert actions(data, ()) == [("hide", ["v2", "v1"]), ("kept_undo_window", None)]
    marked = [_row("m1", marker=True, latest=True), _row("v1"), _row("x0", marker=True)]
    assert actions(marked, ("m1",)) == [
        ("delete", None),
        ("delete", None),
        ("kept_foreign_marker", None),
    ]
    young = [_row("m1", marker=True, latest=True, age_s=60), _row("v1")]
    assert [a for a, _ in actions(young, ("m1",))] == ["kept_undo_window"] * 2
    assert [a for a, _ in actions(marked, ())] == ["kept_foreign_marker"] * 3
    waiting = [_row("v2", latest=True), {**_row("v1"), "action": Action.KEPT_TOO_YOUNG.value}]
    assert [a for a, _ in actions(waiting, ())] == ["kept_too_young"] * 2


def test_a_delayed_window_deletes_up_to_the_m_of_one_window_ago() -> None:
    assert JobUndo(60.0, "delayed-m", delayed_safe_epoch=7).limit(10) == 7
    assert JobUndo(60.0, "delayed-m", delayed_safe_epoch=12).limit(10) == 10
    assert JobUndo(60.0, "delayed-m").limit(10) == -1  # no history a window old: nothing
    assert JobUndo(60.0, "hide-then-reclaim").limit(10) == 10
