"""GCS Storage Insights inventory reports as the listing: the manifest and its shards.

Design notes: docs/internals/spark.md, `gcd.storage.gcs.inventory`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcd.storage.rows import SOURCE_SCHEMA
from l0gc import strictjson
from l0gc.errors import ConfigError, InvalidJson

__all__ = ["GCS_INVENTORY_SCHEMA", "GcsInventoryManifest", "read_gcs_inventory"]

GCS_INVENTORY_SCHEMA = SOURCE_SCHEMA
_MANIFEST_MAX_BYTES = 64 * 1024 * 1024
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_SHARD = re.compile(r"[^/\\]+\.(csv|parquet)", re.IGNORECASE)
_DEFAULT_SEPARATORS = ("\n", "\r\n", "\r")  # what Spark's CSV reader splits on by itself


def _snake(doc: Any) -> Any:
    """`doc` with every object key in snake case (``reportConfig`` -> ``report_config``)."""
    if isinstance(doc, dict):
        return {_CAMEL.sub("_", str(k)).lower(): _snake(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_snake(v) for v in doc]
    return doc


@dataclass(frozen=True, slots=True)
class GcsInventoryManifest:
    """The parts of a Storage Insights manifest the pipeline needs."""

    source_bucket: str
    file_format: str
    """"csv" or "parquet"."""
    fields: tuple[str, ...]
    """The metadata fields (columns), as configured (JSON API names)."""
    shards: tuple[str, ...]
    snapshot_time: str | None = None
    delimiter: str = ","
    header: bool = True
    line_separator: str | None = None
    """A one-character record separator Spark must be told (None: "\n", "\r\n", "\r")."""

    @property
    def modified_field(self) -> str:
        """The column the age is read from: ``updated``, else ``timeCreated``."""
        return "updated" if "updated" in self.fields else "timeCreated"

    @classmethod
    def parse(cls, raw: bytes | str, *, where: str) -> GcsInventoryManifest:
        """Parse a manifest document; ConfigError naming `where` and the problem."""
        try:
            doc = strictjson.loads(
                raw, what=f"inventory manifest {where}", max_bytes=_MANIFEST_MAX_BYTES, max_depth=12
            )
        except InvalidJson as exc:
            raise ConfigError(f"inventory manifest {where} is not valid JSON ({exc})") from None
        doc = _snake(doc)
        config = doc.get("report_config") if isinstance(doc, dict) else None
        if not isinstance(config, dict):
            raise ConfigError(
                f"inventory manifest {where}: no 'report_config' object; give "
                "the *_manifest.json of a Storage Insights inventory report"
            )
        options = config.get("object_metadata_report_options")
        options = options if isinstance(options, dict) else {}
        filters = options.get("storage_filters")
        bucket = filters.get("bucket") if isinstance(filters, dict) else None
        if not isinstance(bucket, str) or not bucket:
            raise ConfigError(
                f"inventory manifest {where}: report_config has no "
                "object_metadata_report_options.storage_filters.bucket"
            )
        fields = options.get("metadata_fields")
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ConfigError(
                f"inventory manifest {where}: report_config has no "
                "object_metadata_report_options.metadata_fields list"
            )
        missing = [f for f in ("name", "size") if f not in fields]
        if missing or not {"updated", "timeCreated"} & set(fields):
            raise ConfigError(
                f"inventory manifest {where}: metadata_fields {fields} lack "
                f"{missing or ['updated']}; configure the report with at least name, size "
                "and updated"
            )
        csv_options = config.get("csv_options")
        if isinstance(config.get("parquet_options"), dict):
            file_format = "parquet"
        elif isinstance(csv_options, dict):
            file_format = "csv"
        else:
            raise ConfigError(
                f"inventory manifest {where}: report_config has neither "
                "csv_options nor parquet_options"
            )
        csv_options = csv_options if isinstance(csv_options, dict) else {}
        delimiter = csv_options.get("delimiter") or ","
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ConfigError(
                f"inventory manifest {where}: csv_options.delimiter "
                f"{delimiter!r} must be one character"
            )
        separator = csv_options.get("record_separator") or "\n"
        if not isinstance(separator, str) or (
            separator not in _DEFAULT_SEPARATORS and len(separator) != 1
        ):
            raise ConfigError(
                f"inventory manifest {where}: csv_options.record_separator "
                f"{separator!r} cannot be read: configure the report with "
                "'\\n' or '\\r\\n' (gcloud --csv-separator)"
            )
        shards = doc.get("report_shards_file_names")
        if shards is None and isinstance(doc.get("report_names"), list):  # full paths
            shards = [str(n).rstrip("/").rsplit("/", 1)[-1] for n in doc["report_names"]]
        if (
            not isinstance(shards, list)
            or not shards
            or not all(isinstance(s, str) and _SHARD.fullmatch(s) for s in shards)
        ):
            raise ConfigError(
                f"inventory manifest {where}: report_shards_file_names must be "
                f"a non-empty list of .csv/.parquet file names, got {shards!r}"
            )
        snapshot = doc.get("snapshot_time")
        return cls(
            bucket,
            file_format,
            tuple(fields),
            tuple(shards),
            snapshot if isinstance(snapshot, str) else None,
            delimiter,
            csv_options.get("header_required", True) is not False,
            None if separator in _DEFAULT_SEPARATORS else separator,
        )

    @classmethod
    def load(cls, path: str | Path) -> GcsInventoryManifest:
        """Read and parse a local manifest file."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            msg = (
                f"cannot read inventory manifest {str(path)!r} ({exc.strerror or exc}); "
                "give --inventory PATH"
            )
            raise ConfigError(msg) from exc
        return cls.parse(raw, where=str(path))


def shard_paths(
    manifest: GcsInventoryManifest, manifest_path: str | Path, inventory_root: str | None = None
) -> list[str]:
    """Where Spark reads each shard; ConfigError naming a missing one.

    GCS names shards after the snapshot time, with ':' in it, which a Hadoop path of a
    local file cannot carry (its checksum file's name parses as a URI scheme). Such a
    shard is read through a symbolic link without ':' in `LINK_DIR` beside it."""
    if (
        inventory_root is not None
        and "://" in inventory_root
        and not inventory_root.startswith("file://")
    ):
        return [inventory_root.rstrip("/") + "/" + name for name in manifest.shards]
    base = (
        Path(inventory_root.removeprefix("file://"))
        if inventory_root is not None
        else Path(manifest_path).resolve().parent
    )
    paths = []
    for name in manifest.shards:
        path = base / name
        if not path.is_file():
            raise ConfigError(
                f"inventory shard {name!r} not found at {str(path)!r}; copy the "
                "whole report, or give --inventory-root (the directory of the "
                "shards)"
            )
        paths.append(str(_hadoop_safe(path)))
    return paths


LINK_DIR = "l0gc-shard-links"
"""The directory, beside the shards, of links to the shards whose names have a ':'."""


def _hadoop_safe(path: Path) -> Path:
    """`path`, or a link to it whose name has no ':' (module docs of `shard_paths`)."""
    if ":" not in path.name:
        return path
    link = path.parent / LINK_DIR / path.name.replace(":", "-")
    try:
        link.parent.mkdir(exist_ok=True)
        if not (link.is_symlink() and link.resolve() == path.resolve()):
            link.unlink(missing_ok=True)
            link.symlink_to(path.resolve())
    except OSError as exc:
        raise ConfigError(
            f"inventory shard {str(path)!r} has ':' in its name, which Spark cannot read, and "
            f"no link without it could be made in {str(link.parent)!r} ({exc.strerror or exc}); "
            "copy the report to a writable directory, or rename the shards without ':' and "
            "list the new names in the manifest"
        ) from exc
    return link


def _require_columns(columns: list[str], modified: str, where: str) -> None:
    """ConfigError unless the shards have the columns the manifest promised."""
    missing = [name for name in ("name", "size", modified) if name not in columns]
    if missing:
        raise ConfigError(
            f"inventory shard {where!r} has no column {missing} (it has "
            f"{columns}): the report does not match its manifest"
        )


def read_gcs_inventory(
    spark: Any,
    manifest_path: str | Path,
    *,
    inventory_root: str | None = None,
    expected_bucket: str | None = None,
) -> Any:
    """The report's objects as `SOURCE_SCHEMA` rows (live objects, no version ids)."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    manifest = GcsInventoryManifest.load(manifest_path)
    if expected_bucket is not None and manifest.source_bucket != expected_bucket:
        raise ConfigError(
            f"inventory {str(manifest_path)!r} lists bucket {manifest.source_bucket!r}, not "
            f"--bucket {expected_bucket!r}: give the report of the bucket being swept"
        )
    paths = shard_paths(manifest, manifest_path, inventory_root)
    modified_name = manifest.modified_field
    if manifest.file_format == "csv":
        # RFC 4180 quoting: a '"' in a name is doubled inside a quoted field (Spark's
        # default escape is '\\', which would misread such a name; a '\\' stays literal).
        options = {"escape": '"'}
        if manifest.line_separator is not None:
            options["lineSep"] = manifest.line_separator
        if manifest.header:  # columns by their names in the header row, in any order
            raw = spark.read.csv(
                paths,
                header=True,
                inferSchema=False,
                sep=manifest.delimiter,
                multiLine=True,
                mode="PERMISSIVE",
                **options,
            )
            _require_columns(raw.columns, modified_name, paths[0])
        else:  # in the configured order
            schema = ", ".join(f"`{name}` string" for name in manifest.fields)
            raw = spark.read.csv(
                paths,
                schema=schema,
                header=False,
                sep=manifest.delimiter,
                multiLine=True,
                mode="PERMISSIVE",
                **options,
            )
        modified = F.try_to_timestamp(F.col(modified_name))
    else:
        raw = spark.read.parquet(*paths)
        _require_columns(raw.columns, modified_name, paths[0])
        modified = F.col(modified_name).try_cast("timestamp")
    return raw.select(
        F.col("name").cast("string").alias("key"),
        F.coalesce(F.col("size").try_cast("long"), F.lit(0)).alias("size"),
        (F.unix_micros(modified) / F.lit(1e6)).alias("last_modified_s"),
        F.lit(None).cast("string").alias("version_id"),
        F.lit(True).alias("is_latest"),
        F.lit(False).alias("delete_marker"),
    )
