"""Spark fixtures: ONE local[2] session for the whole run, and S3 Inventory reports
written the way AWS writes them (manifest.json + data files) from a real bucket.

The CLI under test reuses this session (`gcd.spark.session.spark_session` never stops
a session it did not make).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import boto3
import pytest

pytest.importorskip("pyspark", reason="the Spark extra is not installed")

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from l0gc.etcd.client import EtcdKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalS3
from tests.binding import bind


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one SparkSession of the test run: local[2], quiet, small."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    session = (
        SparkSession.builder.master("local[2]")
        .appName("l0gc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@dataclass(frozen=True, slots=True)
class Listed:
    """One object of the bucket as an inventory row carries it."""

    key: str
    size: int
    last_modified: datetime


def bucket_contents(s3_server: LocalS3, bucket: str) -> list[Listed]:
    """Every object of the bucket, listed over HTTP."""
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [
        Listed(item["Key"], int(item["Size"]), item["LastModified"])
        for page in pages
        for item in page.get("Contents", [])
    ]


_PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (STRING); required binary key (STRING); "
    "optional int64 size; optional int64 last_modified_date (TIMESTAMP(MILLIS,true)); }"
)


def write_inventory(
    destination: Path,
    source_bucket: str,
    rows: Sequence[Listed],
    *,
    file_format: str = "CSV",
    file_count: int = 2,
) -> Path:
    """An S3 Inventory report as AWS lays it out in the destination bucket; the manifest path.

    {destination}/inventory/{source}/daily/data/{uuid}.csv.gz|.parquet and
    {destination}/inventory/{source}/daily/2026-11-22T00-00Z/manifest.json (+ .checksum).
    CSV fields are all quoted and keys URL-encoded (space as '+'), as S3 writes them.
    """
    config_dir = destination / "inventory" / source_bucket / "daily"
    (config_dir / "data").mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(file_count):
        chunk = rows[index::file_count]
        if file_format == "CSV":
            name = f"data/{uuid.uuid4()}.csv.gz"
            text = io.StringIO()
            writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
            for row in chunk:
                stamp = row.last_modified.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
                writer.writerow([source_bucket, quote_plus(row.key, safe=""), row.size, stamp])
            (config_dir / name).write_bytes(gzip.compress(text.getvalue().encode()))
        else:
            name = f"data/{uuid.uuid4()}.parquet"
            table = pa.table(
                {
                    "bucket": pa.array([source_bucket] * len(chunk), pa.string()),
                    "key": pa.array([r.key for r in chunk], pa.string()),
                    "size": pa.array([r.size for r in chunk], pa.int64()),
                    "last_modified_date": pa.array(
                        [r.last_modified for r in chunk], pa.timestamp("ms", tz="UTC")
                    ),
                }
            )
            pq.write_table(table, config_dir / name)
        payload = (config_dir / name).read_bytes()
        files.append(
            {
                "key": f"inventory/{source_bucket}/daily/{name}",
                "size": len(payload),
                "MD5checksum": hashlib.md5(payload).hexdigest(),
            }
        )
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": "arn:aws:s3:::inventory-destination",
        "version": "2016-11-30",
        "creationTimestamp": "1795305600000",
        "fileFormat": "CSV" if file_format == "CSV" else "Parquet",
        "fileSchema": "Bucket, Key, Size, LastModifiedDate"
        if file_format == "CSV"
        else _PARQUET_SCHEMA,
        "files": files,
    }
    stamp_dir = config_dir / "2026-11-22T00-00Z"
    stamp_dir.mkdir(exist_ok=True)
    body = json.dumps(manifest, indent=2).encode()
    (stamp_dir / "manifest.json").write_bytes(body)
    (stamp_dir / "manifest.checksum").write_text(hashlib.md5(body).hexdigest())
    return stamp_dir / "manifest.json"


@pytest.fixture
def inventory(s3_server: LocalS3, bucket: str, tmp_path: Path) -> Callable[..., Path]:
    """Write an inventory report of the bucket as it is now; returns the manifest path."""

    def write(
        file_format: str = "CSV", *, extra: Sequence[Listed] = (), file_count: int = 2
    ) -> Path:
        rows = [*bucket_contents(s3_server, bucket), *extra]
        return write_inventory(
            tmp_path / f"dest-{file_format.lower()}",
            bucket,
            rows,
            file_format=file_format,
            file_count=file_count,
        )

    return write


@pytest.fixture
async def watermark_store(etcd_server: Any, namespace: str) -> Any:
    """A WatermarkStore on the real etcd in this test's namespace (client closed after)."""
    kv = EtcdKV([etcd_server.endpoint], timeout_s=5.0)
    yield WatermarkStore(kv, namespace)
    await kv.close()


async def publish_safe_epoch(store: WatermarkStore, safe_epoch: int, cluster_epoch: int) -> None:
    """Make the global M `safe_epoch` under cluster epoch `cluster_epoch` (one partition)."""
    assert cluster_epoch > safe_epoch
    await store.init_cluster_epoch(safe_epoch + 1)
    record = await store.register_partition("orders-0")
    assert record.watermark == safe_epoch
    for _ in range(cluster_epoch - safe_epoch - 1):
        await store.advance_cluster_epoch()
    read = await store.read_safe_epoch()
    assert (read.safe_epoch, read.cluster_epoch) == (safe_epoch, cluster_epoch)


@pytest.fixture
def set_safe_epoch(
    watermark_store: WatermarkStore, etcd_server: Any, namespace: str, s3_server: Any, bucket: str
) -> Callable[[int, int], Any]:
    """Async helper: publish M and the cluster epoch to this test's namespace, bound to
    this test's bucket as an operator binds it."""

    async def apply(safe_epoch: int, cluster_epoch: int) -> None:
        await publish_safe_epoch(watermark_store, safe_epoch, cluster_epoch)
        await bind(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)

    return apply
