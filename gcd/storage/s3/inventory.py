"""S3 Inventory as the listing: read a `manifest.json` and its data files with Spark.

Design notes: docs/internals/spark.md, `gcd.storage.s3.inventory`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from gcd.storage.rows import SOURCE_SCHEMA
from l0gc import strictjson
from l0gc.errors import ConfigError, InvalidJson

__all__ = [
    "INVENTORY_SCHEMA",
    "InventoryFile",
    "InventoryFormat",
    "InventoryManifest",
    "read_inventory",
    "resolve_data_paths",
]

INVENTORY_SCHEMA = SOURCE_SCHEMA
_REQUIRED = ("key", "size", "last_modified_date")
VERSION_FIELDS = ("version_id", "is_latest", "is_delete_marker")
"""The columns of a report that includes all versions."""
_PARQUET_FIELD = re.compile(r"(?:required|optional|repeated)\s+\w+\s+(\w+)")
_ORC_FIELD = re.compile(r"(?:^|,)\s*(\w+)\s*:")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")

_MANIFEST_MAX_BYTES = 64 * 1024 * 1024  # S3 Inventory manifests list file keys: generous


class InventoryFormat(Enum):
    """Data file formats of an S3 Inventory report that we read."""

    CSV = "CSV"
    PARQUET = "Parquet"
    ORC = "ORC"


@dataclass(frozen=True, slots=True)
class InventoryFile:
    """One data file of a report: its key in the destination bucket and size in bytes."""

    key: str
    size: int | None = None


@dataclass(frozen=True, slots=True)
class InventoryManifest:
    """The parts of an S3 Inventory `manifest.json` the pipeline needs."""

    source_bucket: str
    destination_bucket: str
    file_format: InventoryFormat
    columns: tuple[str, ...]
    """Column names in snake case (`last_modified_date`), in file order for CSV."""
    files: tuple[InventoryFile, ...]
    creation_timestamp_ms: int | None = None

    @property
    def has_versions(self) -> bool:
        """True for a report that includes all versions (VersionId, IsLatest, IsDeleteMarker)."""
        return all(name in self.columns for name in VERSION_FIELDS)

    @classmethod
    def parse(cls, raw: bytes | str, *, where: str = "manifest.json") -> InventoryManifest:
        """Parse a manifest document; ConfigError naming `where` and the problem."""
        try:
            doc = strictjson.loads(
                raw, what=f"inventory manifest {where}", max_bytes=_MANIFEST_MAX_BYTES, max_depth=8
            )
        except InvalidJson as exc:
            raise ConfigError(f"inventory manifest {where} is not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"inventory manifest {where} must be a JSON object")
        source = _text(doc, "sourceBucket", where)
        destination = _text(doc, "destinationBucket", where).removeprefix("arn:aws:s3:::")
        fmt_name = _text(doc, "fileFormat", where)
        schema = _text(doc, "fileSchema", where)
        formats = {f.value.upper(): f for f in InventoryFormat}
        if fmt_name.upper() not in formats:
            msg = (
                f"inventory manifest {where}: unknown fileFormat {fmt_name!r}; "
                "expected CSV, ORC or Parquet"
            )
            raise ConfigError(msg)
        file_format = formats[fmt_name.upper()]
        if file_format is InventoryFormat.PARQUET:
            columns = tuple(name.lower() for name in _PARQUET_FIELD.findall(schema))
        elif file_format is InventoryFormat.ORC:
            inner = schema.strip().removeprefix("struct<").removesuffix(">")
            columns = tuple(name.lower() for name in _ORC_FIELD.findall(inner))
        else:
            columns = tuple(_snake(name.strip()) for name in schema.split(","))
        missing = [name for name in _REQUIRED if name not in columns]
        if missing:
            msg = (
                f"inventory manifest {where}: fileSchema {schema!r} lacks {missing}; add the "
                "optional fields Size and LastModifiedDate to the inventory configuration"
            )
            raise ConfigError(msg)
        return cls(
            source_bucket=source,
            destination_bucket=destination,
            file_format=file_format,
            columns=columns,
            files=_files(doc, where),
            creation_timestamp_ms=_timestamp(doc.get("creationTimestamp")),
        )

    @classmethod
    def load(cls, path: str | Path) -> InventoryManifest:
        """Read and parse a local manifest file."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            msg = f"cannot read inventory manifest {str(path)!r} ({exc}); give --inventory PATH"
            raise ConfigError(msg) from exc
        return cls.parse(raw, where=str(path))


def _text(doc: dict[str, Any], name: str, where: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"inventory manifest {where}: field {name!r} must be a non-empty string")
    return value


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def _timestamp(value: object) -> int | None:
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return int(text) if text.isascii() and text.isdigit() else None


def _files(doc: dict[str, Any], where: str) -> tuple[InventoryFile, ...]:
    entries = doc.get("files")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"inventory manifest {where}: 'files' must be a non-empty list")
    files: list[InventoryFile] = []
    for entry in entries:
        key = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(key, str) or not key or key.startswith("/") or ".." in key.split("/"):
            raise ConfigError(f"inventory manifest {where}: bad file entry {entry!r}")
        size = entry.get("size")
        files.append(InventoryFile(key, size if type(size) is int else None))
    return tuple(files)


def resolve_data_paths(
    manifest: InventoryManifest, manifest_path: str | Path, inventory_root: str | None = None
) -> list[str]:
    """Where Spark reads each data file (see module docs); ConfigError if one is missing."""
    if (
        inventory_root is not None
        and "://" in inventory_root
        and not inventory_root.startswith("file://")
    ):
        # A remote file system (hdfs://, abfs://...): Spark checks the paths when it reads.
        return [inventory_root.rstrip("/") + "/" + f.key for f in manifest.files]
    if inventory_root is not None:
        base, strip = Path(inventory_root.removeprefix("file://")), 0
    else:
        base, strip = _find_base(Path(manifest_path).resolve().parent, manifest.files[0].key)
    paths = []
    for entry in manifest.files:
        path = base.joinpath(*entry.key.split("/")[strip:])
        if not path.is_file():
            msg = (
                f"inventory data file {entry.key!r} not found at {str(path)!r}; copy the whole "
                "report, or give --inventory-root (the destination bucket's root)"
            )
            raise ConfigError(msg)
        if entry.size is not None and path.stat().st_size != entry.size:
            msg = (
                f"inventory data file {str(path)!r} has {path.stat().st_size} bytes, the manifest "
                f"says {entry.size}: the copy is incomplete, copy it again"
            )
            raise ConfigError(msg)
        paths.append(str(path))
    return paths


def _find_base(directory: Path, key: str) -> tuple[Path, int]:
    parts = key.split("/")
    for strip in range(len(parts)):
        for ancestor in (directory, *directory.parents):
            if ancestor.joinpath(*parts[strip:]).is_file():
                return ancestor, strip
    msg = (
        f"inventory data file {key!r} was not found next to the manifest in {str(directory)!r} "
        "or its parents; give --inventory-root (the destination bucket's root)"
    )
    raise ConfigError(msg)


def read_inventory(
    spark: Any,
    manifest_path: str | Path,
    *,
    inventory_root: str | None = None,
    expected_bucket: str | None = None,
    versions: bool = False,
) -> Any:
    """The report's objects as `SOURCE_SCHEMA` rows; every version with `versions`."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    manifest = InventoryManifest.load(manifest_path)
    if expected_bucket is not None and manifest.source_bucket != expected_bucket:
        msg = (
            f"inventory {str(manifest_path)!r} lists bucket {manifest.source_bucket!r}, not "
            f"--bucket {expected_bucket!r}: give the report of the bucket being swept"
        )
        raise ConfigError(msg)
    paths = resolve_data_paths(manifest, manifest_path, inventory_root)
    if manifest.file_format is InventoryFormat.CSV:
        schema = ", ".join(f"`{name}` string" for name in manifest.columns)
        raw = spark.read.csv(paths, schema=schema, header=False, mode="PERMISSIVE")
        key = F.try_url_decode(F.col("key"))
        modified = F.try_to_timestamp(F.col("last_modified_date"))

        def flag(name: str) -> Any:  # true, false, or NULL for anything else (malformed)
            text = F.lower(F.trim(F.col(name)))
            return F.when(text == F.lit("true"), True).when(text == F.lit("false"), False)
    else:
        # DataFrameReader.orc takes a list (its second argument is mergeSchema).
        parquet = manifest.file_format is InventoryFormat.PARQUET
        raw = spark.read.parquet(*paths) if parquet else spark.read.orc(paths)
        key = F.col("key")
        modified = F.col("last_modified_date").try_cast("timestamp")

        def flag(name: str) -> Any:
            return F.col(name).try_cast("boolean")

    columns = manifest.columns
    # A row the report does not give whole (no key, or an IsLatest / IsDeleteMarker that
    # is neither true nor false) is malformed: it is never dropped unseen nor deleted, but
    # kept and counted as unparsable (its key becomes NULL).
    malformed = key.isNull()
    for name in ("is_delete_marker", "is_latest"):
        if name in columns:
            malformed = malformed | flag(name).isNull()
    marker = (
        F.coalesce(flag("is_delete_marker"), F.lit(False))
        if "is_delete_marker" in columns
        else F.lit(False)
    )
    latest = F.coalesce(flag("is_latest"), F.lit(True)) if "is_latest" in columns else F.lit(True)
    if versions and "version_id" in columns:
        given = F.col("version_id").cast("string")
        # An empty VersionId is the "null" version (written before versioning was on).
        version_id = F.when(F.coalesce(F.length(given), F.lit(0)) > 0, given).otherwise(
            F.lit("null")
        )
    else:
        raw = raw.where(malformed | (~marker & latest))
        version_id = F.lit(None).cast("string")
    return raw.select(
        F.when(~malformed, key).alias("key"),
        F.coalesce(F.col("size").try_cast("long"), F.lit(0)).alias("size"),
        (F.unix_micros(modified) / F.lit(1e6)).alias("last_modified_s"),
        version_id.alias("version_id"),
        latest.alias("is_latest"),
        marker.alias("delete_marker"),
    )
