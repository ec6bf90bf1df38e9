"""Azure Blob Inventory manifests (`gcd.spark.azinventory`), parsed without Spark: what
a completed blob rule's manifest gives, and a clear error for every manifest that cannot
be swept from (format of https://learn.microsoft.com/azure/storage/blobs/blob-inventory)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gcd.spark.azinventory import BlobInventoryManifest
from gcd.spark.inventory import InventoryFormat
from watermark.errors import ConfigError

from .azinventories import RULE, RUN, Blob, write_blob_inventory

ENDPOINT = "https://acct.blob.core.windows.net"


def manifest_doc(tmp_path: Path, file_format: str = "csv") -> dict[str, Any]:
    rows = [Blob("ctr", "level_zero/data/001/000000000000000001/x", 3, datetime.now(UTC))]
    path = write_blob_inventory(tmp_path, ENDPOINT, rows, file_format=file_format, file_count=1)
    return dict(json.loads(path.read_text()))


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_a_completed_blob_rule_manifest_is_read(tmp_path: Path, file_format: str) -> None:
    parsed = BlobInventoryManifest.parse(json.dumps(manifest_doc(tmp_path, file_format)))
    assert parsed.file_format is {"csv": InventoryFormat.CSV,
                                  "parquet": InventoryFormat.PARQUET}[file_format]  # fmt: skip
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
        (lambda d: d["ruleDefinition"]["schemaFields"].remove("Last-Modified"),
         "lack ['Last-Modified']"),
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
