"""Azure Blob Inventory reports (`gcd.storage.azure.inventory`): what a completed blob rule's
manifest gives, a clear error for every manifest that cannot be swept from, and the rows
Spark reads from each documented form of the data files (format of
https://learn.microsoft.com/azure/storage/blobs/blob-inventory, fixtures in
`l0lab.testing.azinventory`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gcd.storage.azure.inventory import BlobInventoryManifest, read_blob_inventory
from gcd.storage.s3.inventory import InventoryFormat
from l0gc.errors import ConfigError
from l0lab.testing.azinventory import RULE, RUN, Blob, write_blob_inventory

ENDPOINT = "https://acct.blob.core.windows.net"


def manifest_doc(tmp_path: Path, file_format: str = "csv") -> dict[str, Any]:
    rows = [Blob("ctr", "level_zero/data/001/000000000000000001/x", 3, datetime.now(UTC))]
    path = write_blob_inventory(tmp_path, ENDPOINT, rows, file_format=file_format, file_count=1)
    return dict(json.loads(path.read_text()))


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_a_completed_blob_rule_manifest_is_read(tmp_path: Path, file_format: str) -> None:
    parsed = BlobInventoryManifest.parse(json.dumps(manifest_doc(tmp_path, file_format)))
    assert (
        parsed.file_format
        is {"csv": InventoryFormat.CSV, "parquet": InventoryFormat.PARQUET}[file_format]
    )
    assert parsed.endpoint == ENDPOINT
    assert [f.key for f in parsed.files] == [f"{RUN}/{RULE}/{RULE}_1.{file_format}"]
    assert parsed.files[0].size == (tmp_path / parsed.files[0].key).stat().st_size
    assert {"Name", "Content-Length", "Last-Modified"} <= set(parsed.fields)
    parsed.check_covers(ENDPOINT + "/", "ctr", where="m")  # a trailing '/' is the same account


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(status="Failed"), "status is 'Failed'"),
        (lambda d: d["ruleDefinition"].update(objectType="container"), "is not 'blob'"),
        (lambda d: d["ruleDefinition"].update(format="orc"), "unknown format 'orc'"),
        (
            lambda d: d["ruleDefinition"]["schemaFields"].remove("Last-Modified"),
            "lack ['Last-Modified']",
        ),
        (lambda d: d.update(files=[{"blob": "../../etc/passwd", "size": 1}]), "bad file entry"),
        (lambda d: d.update(files=[]), "'files' must be a non-empty list"),
        (lambda d: d.pop("endpoint"), "field 'endpoint'"),
    ],
)
def test_a_manifest_that_cannot_be_swept_from_is_refused(
    tmp_path: Path, change: Any, message: str
) -> None:
    doc = manifest_doc(tmp_path)
    change(doc)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        BlobInventoryManifest.parse(json.dumps(doc), where="m.json")


def test_a_manifest_of_another_account_or_other_containers_is_refused(tmp_path: Path) -> None:
    doc = manifest_doc(tmp_path)
    doc["ruleDefinition"]["filters"]["prefixMatch"] = ["ctr2/", "other/level_zero"]
    parsed = BlobInventoryManifest.parse(json.dumps(doc))
    with pytest.raises(ConfigError, match="is of account"):
        parsed.check_covers("https://other.blob.core.windows.net", "ctr", where="m")
    with pytest.raises(ConfigError, match="none in container 'ctr'"):
        parsed.check_covers(ENDPOINT, "ctr", where="m")
    parsed.check_covers(ENDPOINT, "ctr2", where="m")
    doc["ruleDefinition"]["filters"]["prefixMatch"] = ["ct"]  # a prefix of the container name
    BlobInventoryManifest.parse(json.dumps(doc)).check_covers(ENDPOINT, "ctr", where="m")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("file_format", "time_style"),
    [("csv", "iso"), ("csv", "rfc1123"), ("parquet", "timestamp"), ("parquet", "millis")],
)
def test_every_documented_time_form_reads_as_the_same_instant(
    spark: Any, tmp_path: Path, file_format: str, time_style: str
) -> None:
    """Last-Modified as .NET ISO or RFC 1123 text (CSV), a millisecond timestamp or a plain
    INT64 of milliseconds (Parquet) gives the same instant; rows of another container,
    snapshots and soft-deleted rows are dropped, and Name loses its container."""
    moment = datetime(2026, 11, 20, 8, 30, 15, 123000, tzinfo=UTC)
    keep = 'level_zero/data/001/000000000000000001/x "y",\\z\nw'  # quote, comma, \\, newline
    rows = [
        Blob("ctr", keep, 3, moment),
        Blob("other", keep, 5, moment),
        Blob("ctr", keep, 3, moment - timedelta(days=1), snapshot="2026-11-19T00:00:00Z"),
        Blob("ctr", "level_zero/data/002/000000000000000001/y", 4, moment, deleted=True),
    ]
    manifest = write_blob_inventory(
        tmp_path, ENDPOINT, rows, file_format=file_format, time_style=time_style
    )
    got = read_blob_inventory(spark, manifest, account_url=ENDPOINT, container="ctr").collect()
    whole_second = time_style == "rfc1123"  # RFC 1123 has no fraction
    expected = moment.replace(microsecond=0) if whole_second else moment
    assert [(r.key, r.size) for r in got] == [(keep, 3)]
    assert got[0].last_modified_s == pytest.approx(expected.timestamp(), abs=1e-6)


@pytest.mark.spark
def test_an_integer_time_in_seconds_keeps_the_blob(spark: Any, tmp_path: Path) -> None:
    """A plain INT64 Last-Modified in SECONDS (not the documented milliseconds) would read
    as January 1970, old enough for any grace period: it is NULL instead, and the
    classifier keeps such a blob as too young."""
    moment = datetime(2026, 11, 20, 8, 30, 15, tzinfo=UTC)
    name = "level_zero/data/001/000000000000000001/x"
    manifest = write_blob_inventory(
        tmp_path,
        ENDPOINT,
        [Blob("ctr", name, 3, moment)],
        file_format="parquet",
        time_style="seconds",
    )
    got = read_blob_inventory(spark, manifest, account_url=ENDPOINT, container="ctr").collect()
    assert [(r.key, r.last_modified_s) for r in got] == [(name, None)]
