"""Inventory reports written in each cloud's documented format, for the Spark tests.

S3 Inventory with all versions (`IncludedObjectVersions: All`): the manifest and data
files of https://docs.aws.amazon.com/AmazonS3/latest/userguide/storage-inventory-location.html
(manifest examples for CSV, ORC and Parquet) with the version fields of
https://docs.aws.amazon.com/AmazonS3/latest/userguide/storage-inventory.html#storage-inventory-contents
(VersionId, IsLatest, IsDeleteMarker; CSV fields quoted, keys URL-encoded; a delete
marker has no Size).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

__all__ = ["Version", "list_versions", "write_versions_inventory"]

CSV_SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate"
PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (STRING); required binary key (STRING); "
    "optional binary version_id (STRING); optional boolean is_latest; optional boolean "
    "is_delete_marker; optional int64 size; optional int64 last_modified_date "
    "(TIMESTAMP(MILLIS,true)); }"
)
ORC_SCHEMA = (
    "struct<bucket:string,key:string,version_id:string,is_latest:boolean,"
    "is_delete_marker:boolean,size:bigint,last_modified_date:timestamp>"
)


@dataclass(frozen=True, slots=True)
class Version:
    """One version or delete marker as ListObjectVersions (and the inventory) give it."""

    key: str
    version_id: str
    is_latest: bool
    delete_marker: bool
    size: int
    last_modified: datetime


def list_versions(client: Any, bucket: str) -> list[Version]:
    """Every version and delete marker of the bucket, over HTTP."""
    found: list[Version] = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for marker, items in (
            (False, page.get("Versions", [])),
            (True, page.get("DeleteMarkers", [])),
        ):
            found += [
                Version(
                    item["Key"],
                    item["VersionId"],
                    bool(item["IsLatest"]),
                    marker,
                    int(item.get("Size", 0)),
                    item["LastModified"],
                )
                for item in items
            ]
    return found


def _table(bucket: str, rows: Sequence[Version]) -> pa.Table:
    return pa.table(
        {
            "bucket": pa.array([bucket] * len(rows), pa.string()),
            "key": pa.array([r.key for r in rows], pa.string()),
            "version_id": pa.array([r.version_id for r in rows], pa.string()),
            "is_latest": pa.array([r.is_latest for r in rows], pa.bool_()),
            "is_delete_marker": pa.array([r.delete_marker for r in rows], pa.bool_()),
            "size": pa.array([None if r.delete_marker else r.size for r in rows], pa.int64()),
            "last_modified_date": pa.array(
                [r.last_modified for r in rows], pa.timestamp("ms", tz="UTC")
            ),
        }
    )


def write_versions_inventory(
    destination: Path, bucket: str, rows: Sequence[Version], file_format: str, files: int = 2
) -> Path:
    """An all-versions S3 Inventory report (CSV, ORC or Parquet); the manifest's path."""
    config_dir = destination / "inventory" / bucket / "versions"
    (config_dir / "data").mkdir(parents=True, exist_ok=True)
    entries = []
    for index in range(files):
        chunk = rows[index::files]
        suffix = {"CSV": "csv.gz", "ORC": "orc", "Parquet": "parquet"}[file_format]
        name = f"data/{uuid.uuid4()}.{suffix}"
        path = config_dir / name
        if file_format == "CSV":
            text = io.StringIO()
            writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
            for row in chunk:
                stamp = row.last_modified.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
                writer.writerow(
                    [
                        bucket,
                        quote_plus(row.key, safe=""),
                        row.version_id,
                        str(row.is_latest).lower(),
                        str(row.delete_marker).lower(),
                        "" if row.delete_marker else row.size,
                        stamp,
                    ]
                )
            path.write_bytes(gzip.compress(text.getvalue().encode()))
        elif file_format == "ORC":
            orc.write_table(_table(bucket, chunk), str(path))
        else:
            pq.write_table(_table(bucket, chunk), path)
        payload = path.read_bytes()
        entries.append(
            {
                "key": f"inventory/{bucket}/versions/{name}",
                "size": len(payload),
                "MD5checksum": hashlib.md5(payload).hexdigest(),
            }
        )
    schema = {"CSV": CSV_SCHEMA, "ORC": ORC_SCHEMA, "Parquet": PARQUET_SCHEMA}[file_format]
    manifest = {
        "sourceBucket": bucket,
        "destinationBucket": "arn:aws:s3:::inventory-destination",
        "version": "2016-11-30",
        "creationTimestamp": "1795305600000",
        "fileFormat": file_format,
        "fileSchema": schema,
        "files": entries,
    }
    stamp_dir = config_dir / "2026-11-22T00-00Z"
    stamp_dir.mkdir(exist_ok=True)
    (stamp_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return stamp_dir / "manifest.json"
