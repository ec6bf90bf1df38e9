"""S3 Inventory reports: manifests are parsed strictly, data files are found and read
(CSV.gz with URL-encoded keys, Parquet) into exactly the bucket's objects."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gcd.storage.s3.inventory import (
    InventoryFormat,
    InventoryManifest,
    read_inventory,
    resolve_data_paths,
)
from l0gc.errors import ConfigError
from l0lab.testing.local_servers import LocalS3

pytestmark = [pytest.mark.spark, pytest.mark.integration]

_BASE = {
    "sourceBucket": "src",
    "destinationBucket": "arn:aws:s3:::dest",
    "fileFormat": "CSV",
    "fileSchema": "Bucket, Key, Size, LastModifiedDate, ETag, IsMultipartUploaded",
    "files": [{"key": "inv/src/cfg/data/a.csv.gz", "size": 10, "MD5checksum": "x"}],
}


def manifest(**changes: Any) -> bytes:
    """A manifest document with some fields changed."""
    return json.dumps({**_BASE, **changes}).encode()


def test_manifest_fields_are_parsed() -> None:
    """Bucket names, format, snake-case columns and files come out of a CSV manifest."""
    parsed = InventoryManifest.parse(manifest(creationTimestamp="1514944800000"))
    assert parsed.source_bucket == "src"
    assert parsed.destination_bucket == "dest"
    assert parsed.file_format is InventoryFormat.CSV
    assert parsed.columns == (
        "bucket",
        "key",
        "size",
        "last_modified_date",
        "e_tag",
        "is_multipart_uploaded",
    )
    assert parsed.files[0].key == "inv/src/cfg/data/a.csv.gz"
    assert parsed.creation_timestamp_ms == 1514944800000


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"fileFormat": "ORC", "fileSchema": "struct<bucket:string,key:string>"},
            "Size and LastModifiedDate",
        ),
        ({"fileSchema": "Bucket, Key"}, "Size and LastModifiedDate"),
        ({"files": []}, "non-empty list"),
        ({"files": [{"key": "../etc/passwd"}]}, "bad file entry"),
        ({"sourceBucket": 3}, "sourceBucket"),
        ({"fileFormat": "XML"}, "unknown fileFormat"),
    ],
)
def test_bad_manifests_are_refused_with_a_reason(changes: dict[str, Any], words: str) -> None:
    """Missing Size/LastModifiedDate (any format), bad file lists and fields raise ConfigError."""
    with pytest.raises(ConfigError, match=words):
        InventoryManifest.parse(manifest(**changes))


@pytest.mark.parametrize(
    ("file_format", "schema"),
    [
        ("CSV", "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate"),
        (
            "Parquet",
            (
                "message s3.inventory { required binary bucket (UTF8); required binary "
                "key (UTF8); optional binary version_id (UTF8); optional boolean "
                "is_latest; optional boolean is_delete_marker; optional int64 size; "
                "optional int64 last_modified_date (TIMESTAMP_MILLIS); }"
            ),
        ),
        (
            "ORC",
            (
                "struct<bucket:string,key:string,version_id:string,is_latest:boolean,"
                "is_delete_marker:boolean,size:bigint,last_modified_date:timestamp>"
            ),
        ),
    ],
)
def test_a_report_of_all_versions_is_recognised_in_each_format(
    file_format: str, schema: str
) -> None:
    """The manifests AWS documents for IncludedObjectVersions All (storage-inventory-
    location.html) name the version columns in every format."""
    parsed = InventoryManifest.parse(manifest(fileFormat=file_format, fileSchema=schema))
    assert parsed.has_versions
    assert parsed.columns[:4] == ("bucket", "key", "version_id", "is_latest")
    current = InventoryManifest.parse(
        manifest(
            fileFormat=file_format,
            fileSchema=schema.replace("version_id", "v").replace("VersionId", "V"),
        )
    )
    assert not current.has_versions


def test_data_files_resolve_in_a_partial_copy(tmp_path: Path) -> None:
    """A copy of only {config}/ (aws s3 sync) and an explicit --inventory-root both resolve."""
    (tmp_path / "copy" / "data").mkdir(parents=True)
    (tmp_path / "copy" / "2026-11-22T00-00Z").mkdir()
    (tmp_path / "copy" / "data" / "a.csv.gz").write_bytes(b"0123456789")
    manifest_path = tmp_path / "copy" / "2026-11-22T00-00Z" / "manifest.json"
    manifest_path.write_bytes(manifest())
    parsed = InventoryManifest.load(manifest_path)
    assert resolve_data_paths(parsed, manifest_path) == [
        str((tmp_path / "copy" / "data" / "a.csv.gz").resolve())
    ]
    root = tmp_path / "bucket-root"
    (root / "inv" / "src" / "cfg" / "data").mkdir(parents=True)
    shutil.copy(tmp_path / "copy" / "data" / "a.csv.gz", root / "inv/src/cfg/data/a.csv.gz")
    assert resolve_data_paths(parsed, manifest_path, str(root)) == [
        str(root / "inv/src/cfg/data/a.csv.gz")
    ]
    (root / "inv/src/cfg/data/a.csv.gz").write_bytes(b"short")
    with pytest.raises(ConfigError, match="incomplete"):
        resolve_data_paths(parsed, manifest_path, str(root))


@pytest.mark.parametrize("file_format", ["CSV", "Parquet"])
def test_inventory_rows_are_the_bucket_objects(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    inventory: Callable[..., Path],
    file_format: str,
) -> None:
    """Every object comes back with its decoded key, size and LastModified (to the ms)."""
    when = datetime(2026, 11, 1, 12, 30, 15, tzinfo=UTC)
    keys = {
        "level_zero/data/001/000000000000000001/a b+c": b"12345",
        "level_zero/data/002/000000000000000002/caf\u00e9 %41": b"1",
        "elsewhere/x": b"",
    }
    s3_server.seed(bucket, keys, last_modified=when)
    s3_server.seed(bucket, ["level_zero/data/003/young"], last_modified=when + timedelta(days=1))
    frame = read_inventory(spark, inventory(file_format), expected_bucket=bucket)
    rows = {(r["key"], r["size"], r["last_modified_s"]) for r in frame.collect()}
    expected = {(k, len(v), when.timestamp()) for k, v in keys.items()}
    expected.add(("level_zero/data/003/young", 1, (when + timedelta(days=1)).timestamp()))
    assert rows == expected


def test_inventory_of_another_bucket_is_refused(
    spark: Any, s3_server: LocalS3, bucket: str, inventory: Callable[..., Path]
) -> None:
    """A report whose sourceBucket is not --bucket is refused before anything is read."""
    s3_server.seed(bucket, ["k"])
    with pytest.raises(ConfigError, match="not --bucket"):
        read_inventory(spark, inventory(), expected_bucket="another-bucket")


@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000, b'{"sourceBucket": "a", "sourceBucket": "b"}', b'{"creationTimestamp": NaN}'],
)
def test_hostile_manifests_are_refused_not_crashing(raw: bytes) -> None:
    """A deeply nested, duplicate-key or NaN manifest is a ConfigError, never RecursionError."""
    with pytest.raises(ConfigError, match="not valid JSON"):
        InventoryManifest.parse(raw)


def test_malformed_rows_are_kept_and_counted_as_unparsable(spark: Any, tmp_path: Path) -> None:
    """Issue 51: a row whose IsLatest or IsDeleteMarker is neither true nor false used to
    read as false, so without `versions` it was dropped as a non-current version, unseen.
    Now every malformed row comes back with a NULL key (kept_unparsable, counted), and a
    well-formed non-current version is still left out."""
    data = tmp_path / "inv" / "src" / "cfg" / "data" / "a.csv.gz"
    data.parent.mkdir(parents=True)
    good = "level_zero/data/001/000000000000000001/"
    lines = [
        f'"src","{good}a","v1","true","false","5","2026-11-01T12:00:00.000Z"',
        f'"src","{good}a","v0","false","false","5","2026-11-01T11:00:00.000Z"',  # non-current
        f'"src","{good}b","v1","maybe","false","5","2026-11-01T12:00:00.000Z"',
        f'"src","{good}c","v1","true","","5","2026-11-01T12:00:00.000Z"',
        '"src","%zz","v1","true","false","5","2026-11-01T12:00:00.000Z"',
    ]
    data.write_bytes(gzip.compress("\n".join(lines).encode() + b"\n"))
    schema = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate"
    files = [{"key": "inv/src/cfg/data/a.csv.gz", "size": data.stat().st_size, "MD5checksum": "x"}]
    path = tmp_path / "inv" / "src" / "cfg" / "2026-11-22T00-00Z" / "manifest.json"
    path.parent.mkdir()
    path.write_bytes(manifest(fileSchema=schema, files=files))
    current = [r["key"] for r in read_inventory(spark, path, expected_bucket="src").collect()]
    assert sorted(current, key=str) == sorted([f"{good}a", None, None, None], key=str)
    every = read_inventory(spark, path, expected_bucket="src", versions=True).collect()
    assert sorted((r["key"], r["version_id"]) for r in every if r["key"] is not None) == [
        (f"{good}a", "v0"),
        (f"{good}a", "v1"),
    ]
    assert sum(r["key"] is None for r in every) == 3
