"""Azure Blob Inventory reports written the way Azure writes them, for the Spark tests and
the benchmark (`bench/spark_azure.py`): from a real container's blobs or synthetic rows.

The layout and fields are those of https://learn.microsoft.com/azure/storage/blobs/blob-inventory
("Inventory output", "Inventory files", the sample manifest): in the rule's destination
container, ``YYYY/MM/DD/HH-MM-SS/{rule}/`` holds the data files the manifest lists,
``{rule}-manifest.json`` and ``{rule}-manifest.checksum`` (the MD5 of the manifest); the
manifest has the sample's fields (``summary`` is ``objectCount`` and
``totalObjectSize``); a CSV file starts with the schema row; a row's Name is
``{container}/{blob}`` (https://learn.microsoft.com/azure/storage/blobs/calculate-blob-count-size
takes the container from it). Times: Parquet "timestamp_millis" (a millisecond
timestamp column, or with ``time_style="millis"`` a plain INT64 of milliseconds, the
other reading of that sentence); CSV, which the docs only show as a screenshot, as
.NET round-trip strings with seven fraction digits (``time_style="iso"``) or RFC 1123
(``time_style="rfc1123"``): the reader takes both (`gcd.storage.azure.inventory`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RUN = "2026/11/22/00-00-00"
RULE = "l0gc_rule"
FIELDS = (
    "Name",
    "Creation-Time",
    "Last-Modified",
    "Content-Length",
    "Content-MD5",
    "BlobType",
    "AccessTier",
    "Snapshot",
    "Deleted",
)


@dataclass(frozen=True, slots=True)
class Blob:
    """One row of a blob inventory: Name is container/blob."""

    container: str
    name: str
    size: int
    last_modified: datetime
    snapshot: str = ""
    deleted: bool = False


def container_blobs(client: Any) -> list[Blob]:
    """Every blob of a sync `ContainerClient`, as the inventory run would list it."""
    return [
        Blob(client.container_name, b.name, int(b.size), b.last_modified)
        for b in client.list_blobs()
    ]


def _stamp(moment: datetime, style: str = "iso") -> str:
    moment = moment.astimezone(UTC)
    if style == "rfc1123":
        return format_datetime(moment, usegmt=True)  # "Wed, 26 May 2021 13:25:36 GMT"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"  # 7 digits


def write_blob_inventory(
    destination: Path,
    endpoint: str,
    rows: Sequence[Blob],
    *,
    file_format: str = "csv",
    file_count: int = 2,
    prefix_match: Sequence[str] = (),
    status: str = "Succeeded",
    time_style: str = "iso",
    fields: Sequence[str] = FIELDS,
) -> Path:
    """A rule's run under `destination` (the destination container's root); the manifest.
    `fields`: the rule's schema fields, a subset of `FIELDS` in the files' column order."""
    run_dir = destination / RUN / RULE
    run_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(file_count):
        chunk = rows[index::file_count]
        name = f"{RULE}_{index + 1}.{file_format}"
        values = [
            {
                "Name": f"{r.container}/{r.name}",
                "Creation-Time": _stamp(r.last_modified, time_style),
                "Last-Modified": _stamp(r.last_modified, time_style),
                "Content-Length": r.size,
                "Content-MD5": "",
                "BlobType": "BlockBlob",
                "AccessTier": "Hot",
                "Snapshot": r.snapshot,
                "Deleted": "true" if r.deleted else "",
            }
            for r in chunk
        ]
        if file_format == "csv":
            text = io.StringIO()
            writer = csv.DictWriter(
                text, fieldnames=fields, lineterminator="\n", extrasaction="ignore"
            )
            writer.writeheader()
            writer.writerows(values)
            (run_dir / name).write_text(text.getvalue(), encoding="utf-8")
        else:
            columns: dict[str, Any] = {}
            for stamp in ("Creation-Time", "Last-Modified"):  # "timestamp_millis"
                moments = [r.last_modified.astimezone(UTC) for r in chunk]
                per_second = {"millis": 1000, "seconds": 1}.get(time_style)  # "seconds": wrong
                columns[stamp] = (
                    pa.array([int(m.timestamp() * per_second) for m in moments], pa.int64())
                    if per_second is not None
                    else pa.array(moments, pa.timestamp("ms", tz="UTC"))
                )
            columns["Content-Length"] = pa.array([r.size for r in chunk], pa.int64())
            columns["Deleted"] = pa.array([r.deleted for r in chunk], pa.bool_())
            pq.write_table(
                pa.table(
                    {
                        f: columns[f]
                        if f in columns
                        else pa.array([str(v[f]) for v in values], pa.string())
                        for f in fields
                    }
                ),
                run_dir / name,
            )
        files.append({"blob": f"{RUN}/{RULE}/{name}", "size": (run_dir / name).stat().st_size})
    manifest = {
        "destinationContainer": "inventory-destination",
        "endpoint": endpoint,
        "files": files,
        "inventoryCompletionTime": "2026-11-22T00:10:00Z",
        "inventoryStartTime": "2026-11-22T00:00:00Z",
        "ruleDefinition": {
            "filters": {
                "blobTypes": ["blockBlob"],
                "includeBlobVersions": False,
                "includeSnapshots": True,
                "includeDeleted": True,
                "prefixMatch": list(prefix_match),
            },
            "format": file_format,
            "objectType": "blob",
            "schedule": "daily",
            "schemaFields": list(fields),
        },
        "ruleName": RULE,
        "status": status,
        "summary": {"objectCount": len(rows), "totalObjectSize": sum(r.size for r in rows)},
        "version": "1.0",
    }
    body = json.dumps(manifest, indent=2).encode()
    path = run_dir / f"{RULE}-manifest.json"
    path.write_bytes(body)
    (run_dir / f"{RULE}-manifest.checksum").write_text(
        hashlib.md5(body, usedforsecurity=False).hexdigest()
    )  # the format's checksum
    return path
