"""`gcd spark-sweep` end to end on a real S3 server and a real etcd: it deletes exactly
the eligible keys (inventory CSV/Parquet or distributed listing), a dry run deletes
nothing, stale inventory rows are harmless, an undefined M fails closed, and a bucket
that cannot be listed fails before any Spark work (exit 2)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gcd.cli.main import main
from gcd.spark.pipeline import summary_from_counts
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0gc.contract.kv import Put
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.faultproxy import FaultConfig, ThreadedFaultProxy
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind

from .conftest import Listed, publish_safe_epoch

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SAFE_EPOCH = 10
CLUSTER_EPOCH = 20
CLAIM = claim_key("level_zero/data")  # the namespace binding's claim, kept by every sweep


def key(prefix: int, epoch: int, name: str = "obj") -> str:
    """A key of the default layout."""
    return f"level_zero/data/{prefix:03d}/{epoch:018d}/{name}"


ELIGIBLE = {key(1, 5), key(1, 10), key(500, 3, "a b+c"), key(999, 0), key(7, 9)}
LIVE = {key(1, 11), key(2, 15), key(500, 20), key(7, 30), key(7, 31), key(7, 32)}
YOUNG = {key(3, 4)}
UNPARSABLE = {
    "level_zero/data/123/notanepoch/x",
    "level_zero/data/12/000000000000000005/x",
    "level_zero/data/123/00000000000005/x",
    "level_zero/data/v2/5/x",
    "level_zero/data/123/000000000000000005/x/y",
}
OUTSIDE = {
    "other/001/000000000000000005/x",
    "level_zero/database/001/000000000000000005/x",
    "level_zero/data",
}


def seed_mixed(s3_server: LocalS3, bucket: str) -> None:
    """Old objects below/at/above M, young ones, unparsable keys and keys outside the root."""
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, sorted(ELIGIBLE | LIVE | UNPARSABLE | OUTSIDE), last_modified=old)
    s3_server.seed(bucket, sorted(YOUNG), body=b"young")


def gcd_args(
    s3_server: LocalS3 | LocalSeaweedFS, bucket: str, output: Path, *extra: str
) -> list[str]:
    """`gcd spark-sweep` arguments for this bucket."""
    return [
        "spark-sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
        "--output",
        str(output),
        "--json",
        *extra,
    ]


def etcd_args(etcd_server: LocalEtcd, namespace: str) -> list[str]:
    """The etcd flags of this test's namespace."""
    return ["--etcd", etcd_server.endpoint, "--namespace", namespace]


async def gcd(argv: list[str]) -> int:
    """Run the real entry point (it runs its own event loop, so in a thread)."""
    return await asyncio.to_thread(main, argv)


def decisions(output: Path) -> dict[str, str]:
    """key -> action from the decisions Parquet."""
    frame = pd.read_parquet(output / "decisions")
    return dict(zip(frame["key"], frame["action"], strict=True))


def summary(output: Path) -> dict[str, Any]:
    """The summary.json the sweep wrote."""
    return dict(json.loads((output / "summary.json").read_text()))


async def test_inventory_csv_sweep_deletes_exactly_the_eligible_keys(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    inventory: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """Only epoch <= M and old objects go; stale rows (already deleted keys) are fine."""
    seed_mixed(s3_server, bucket)
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)
    manifest = inventory("CSV")
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    s3.delete_object(Bucket=bucket, Key=key(1, 5))  # stale eligible row
    s3.delete_object(Bucket=bucket, Key=key(2, 15))  # stale live row
    out = tmp_path / "out"
    code = await gcd(
        gcd_args(
            s3_server,
            bucket,
            out,
            "--inventory",
            str(manifest),
            "--batch-size",
            "2",
            "--delete-concurrency",
            "4",
            "--max-deletes-per-second",
            "1000",
            *etcd_args(etcd_server, namespace),
        )
    )
    assert code == exitcodes.OK
    everything = ELIGIBLE | LIVE | YOUNG | UNPARSABLE | OUTSIDE
    assert s3_server.keys(bucket) - {CLAIM} == everything - ELIGIBLE - {key(2, 15)}
    actions = decisions(out)
    assert {k for k, a in actions.items() if a == "deleted"} == ELIGIBLE
    assert {k for k, a in actions.items() if a == "kept_not_eligible"} == LIVE
    assert {k for k, a in actions.items() if a == "kept_too_young"} == YOUNG
    assert {k for k, a in actions.items() if a == "kept_unparsable"} == UNPARSABLE
    assert {k for k, a in actions.items() if a == "kept_outside_root"} == OUTSIDE
    done = summary(out)
    assert done["version"] == 1
    assert (done["safe_epoch"], done["cluster_epoch"], done["dry_run"]) == (10, 20, False)
    assert (done["eligible"], done["deleted"], done["errors"]) == (5, 5, 0)
    assert done["deleted_bytes"] == 5
    assert (done["skipped_not_eligible"], done["skipped_young"]) == (len(LIVE), 1)
    assert (done["unparsable"], done["outside_root"]) == (len(UNPARSABLE), len(OUTSIDE))
    assert done["listed"] == len(everything) - len(OUTSIDE)
    assert done["delete_requests"] >= 3  # 5 keys in batches of 2
    assert done["source"] == "inventory"


async def test_parquet_inventory_dry_run_deletes_nothing(
    spark: Any, s3_server: LocalS3, bucket: str, inventory: Callable[..., Path], tmp_path: Path
) -> None:
    """A dry run (M from --safe-epoch, no etcd) makes no delete call and plans the same set;
    decisions keep epochs as 64-bit integers (an 18-digit epoch read back exactly)."""
    seed_mixed(s3_server, bucket)
    before = s3_server.keys(bucket)
    out = tmp_path / "out"
    far = key(4, 123_456_789_012_345_678)  # above 2**53: a float64 would change it
    stale = Listed(far, 1, datetime.now(UTC) - timedelta(hours=2))
    code = await gcd(
        gcd_args(
            s3_server,
            bucket,
            out,
            "--inventory",
            str(inventory("Parquet", extra=[stale])),
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--dry-run",
        )
    )
    assert code == exitcodes.OK
    assert s3_server.keys(bucket) == before
    actions = decisions(out)
    assert {k for k, a in actions.items() if a == "would_delete"} == ELIGIBLE
    assert "deleted" not in actions.values()
    done = summary(out)
    assert (done["dry_run"], done["deleted"], done["delete_requests"]) == (True, 0, 0)
    assert (done["would_delete"], done["eligible"]) == (5, 5)
    table = pq.read_table(out / "decisions")
    assert table.schema.field("epoch").type == pa.int64()
    frame = pd.read_parquet(out / "decisions", dtype_backend="numpy_nullable")  # as docs/spark.md
    epochs = dict(zip(frame["key"], frame["epoch"], strict=True))
    assert epochs[far] == 123_456_789_012_345_678
    assert epochs[key(500, 3, "a b+c")] == 3
    assert pd.isna(epochs["level_zero/data/123/notanepoch/x"])


async def test_list_mode_sweep_deletes_exactly_the_eligible_keys(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    tmp_path: Path,
) -> None:
    """Executors list the root; live prefix tails are skipped; the eligible set goes."""
    seed_mixed(s3_server, bucket)
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)
    out = tmp_path / "out"
    code = await gcd(
        gcd_args(
            s3_server,
            bucket,
            out,
            "--list",
            "--list-tasks",
            "10",
            *etcd_args(etcd_server, namespace),
        )
    )
    assert code == exitcodes.OK
    assert s3_server.keys(bucket) - {CLAIM} == (LIVE | YOUNG | UNPARSABLE | OUTSIDE)
    done = summary(out)
    assert (done["eligible"], done["deleted"], done["outside_root"]) == (5, 5, 0)
    assert done["source"] == "list"
    # Prefix 007: epoch 9 is deleted, 30 ends the prefix, so 31 and 32 are never listed;
    # level_zero/data/v2/... is under no 3-digit listing prefix, as in `gcd sweep`.
    assert done["listed"] == len(ELIGIBLE | LIVE | YOUNG | UNPARSABLE) - 3
    assert (done["skipped_not_eligible"], done["unparsable"]) == (len(LIVE) - 2, 4)
    assert done["list_requests"] >= 10


async def test_malformed_partition_record_fails_closed(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    watermark_store: WatermarkStore,
    set_safe_epoch: Callable[[int, int], Any],
    inventory: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """One malformed partition record: exit 3, blocked_reason names it, nothing deleted."""
    seed_mixed(s3_server, bucket)
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)
    kv = watermark_store._kv
    bad = watermark_store.partition_key("broken-7")
    assert (await kv.txn([], [Put(bad, b"{not json")])).succeeded
    before = s3_server.keys(bucket)
    out = tmp_path / "out"
    code = await gcd(
        gcd_args(
            s3_server,
            bucket,
            out,
            "--inventory",
            str(inventory()),
            *etcd_args(etcd_server, namespace),
        )
    )
    assert code == exitcodes.BLOCKED
    assert s3_server.keys(bucket) == before
    done = summary(out)
    assert done["safe_epoch"] is None
    assert "broken-7" in done["blocked_reason"]
    assert not (out / "decisions").exists()


async def test_override_above_the_cluster_epoch_is_refused(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    tmp_path: Path,
) -> None:
    """--safe-epoch above the cluster epoch read from etcd blocks the sweep (exit 3)."""
    seed_mixed(s3_server, bucket)
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)
    out = tmp_path / "out"
    code = await gcd(
        gcd_args(
            s3_server,
            bucket,
            out,
            "--list",
            "--safe-epoch",
            "25",
            *etcd_args(etcd_server, namespace),
        )
    )
    assert code == exitcodes.BLOCKED
    assert "above the cluster epoch" in summary(out)["blocked_reason"]


def test_missing_pyspark_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without the Spark extra the command exits 2 and says to install l0gc[spark]."""
    real_import = __import__

    def no_pyspark(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", no_pyspark)
    code = main(["spark-sweep", "--bucket", "b", "--list", "--output", str(tmp_path)])
    assert code == exitcodes.USAGE
    assert "l0gc[spark]" in capsys.readouterr().err


def test_summary_counts_failed_deletes_as_errors() -> None:
    """Failed keys are eligible and errors; kept rows land in their skip counters."""
    counts = {
        "deleted": (3, 30),
        "failed": (2, 20),
        "kept_not_eligible": (4, 40),
        "kept_too_young": (1, 1),
        "kept_unparsable": (5, 5),
        "kept_outside_root": (6, 6),
    }
    done = summary_from_counts(
        counts,
        safe_epoch=7,
        cluster_epoch=9,
        dry_run=False,
        list_requests=2,
        delete_requests=4,
        duration_s=1.0,
    )
    assert (done["eligible"], done["deleted"], done["deleted_bytes"], done["errors"]) == (
        5,
        3,
        30,
        2,
    )
    assert (done["listed"], done["outside_root"], done["would_delete"]) == (15, 6, 0)


@pytest.mark.parametrize("mode", [["--list"], ["--inventory", "manifest.json"]])
def test_a_bucket_that_cannot_be_listed_exits_2_before_spark(
    s3_server: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: list[str]
) -> None:
    """A missing bucket, when the job would list or delete: exit 2 in the driver's preflight,
    one line naming the bucket, no Spark job, no summary written."""
    out = tmp_path / "out"
    code = main(gcd_args(s3_server, "no-such-bucket-l0gc", out, *mode, "--safe-epoch", "5"))
    assert code == exitcodes.USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "bucket 'no-such-bucket-l0gc' does not exist" in lines[0]
    assert not (out / "summary.json").exists()


async def test_a_failed_listing_is_a_partial_failure(
    spark: Any, s3_server: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A listing that fails on the executors (after the preflight passed) fails the Spark
    job: exit 1, the S3 error in summary.json, nothing deleted."""
    seed_mixed(s3_server, bucket)
    before = s3_server.keys(bucket)
    out = tmp_path / "out"
    # Seed 15: the first LIST (the preflight) passes, the second (an executor's) is denied.
    denied = FaultConfig(
        share=0.9, codes=("AccessDenied",), operations=frozenset({"list"}), seed=15
    )
    with ThreadedFaultProxy(s3_server.endpoint_url, denied) as proxy:
        code = await gcd(
            [
                "spark-sweep",
                "--bucket",
                bucket,
                "--endpoint-url",
                proxy.endpoint_url,
                "--region",
                "us-east-1",
                "--output",
                str(out),
                "--list",
                "--list-tasks",
                "2",
                "--safe-epoch",
                "5",
            ]
        )
        assert proxy.proxy.faults["AccessDenied"] >= 1
    assert code == exitcodes.PARTIAL_FAILURE
    done = summary(out)
    assert "AccessDenied" in done["job_error"]
    assert done["deleted"] == 0
    assert s3_server.keys(bucket) == before


async def test_list_mode_sweep_on_seaweedfs_deletes_exactly_the_eligible_keys(
    spark: Any,
    seaweedfs_server: LocalSeaweedFS,
    etcd_server: LocalEtcd,
    namespace: str,
    watermark_store: WatermarkStore,
    tmp_path: Path,
) -> None:
    """Spark's listing and delete path on a real S3 server (SeaweedFS, whose objects
    cannot be back-dated: grace 0): the eligible set goes, everything else stays."""
    bucket = "l0gc-spark-sw"
    seaweedfs_server.create_bucket(bucket)
    try:
        seaweedfs_server.seed(bucket, sorted(ELIGIBLE | LIVE | UNPARSABLE | OUTSIDE))
        await publish_safe_epoch(watermark_store, SAFE_EPOCH, CLUSTER_EPOCH)
        await bind(etcd_server.endpoint, namespace, seaweedfs_server.endpoint_url, bucket)
        out = tmp_path / "out"
        code = await gcd(
            gcd_args(
                seaweedfs_server,
                bucket,
                out,
                "--list",
                "--list-tasks",
                "4",
                "--grace",
                "0s",
                *etcd_args(etcd_server, namespace),
            )
        )
        assert code == exitcodes.OK
        left = seaweedfs_server.keys(bucket) - {CLAIM}
        assert left == LIVE | UNPARSABLE | OUTSIDE
        done = summary(out)
        assert (done["eligible"], done["deleted"], done["errors"]) == (5, 5, 0)
    finally:
        seaweedfs_server.delete_bucket_contents(bucket)
