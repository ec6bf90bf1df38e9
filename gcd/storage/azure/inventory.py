"""Azure Blob Inventory as the listing: read a rule's manifest and its CSV/Parquet files.

Design notes: docs/internals/spark.md, `gcd.storage.azure.inventory`.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcd.storage.azure.settings import redact_url
from gcd.storage.s3.inventory import (
    InventoryFile,
    InventoryFormat,
    InventoryManifest,
    resolve_data_paths,
)
from l0gc import strictjson
from l0gc.errors import ConfigError, InvalidJson

__all__ = ["BlobInventoryManifest", "read_blob_inventory"]

REQUIRED_FIELDS = ("Name", "Content-Length", "Last-Modified")
_MANIFEST_MAX_BYTES = 64 * 1024 * 1024
_FORMATS = {"csv": InventoryFormat.CSV, "parquet": InventoryFormat.PARQUET}


@dataclass(frozen=True, slots=True)
class BlobInventoryManifest:
    """The parts of a Blob Inventory manifest the pipeline needs."""

    endpoint: str
    destination_container: str
    file_format: InventoryFormat
    fields: tuple[str, ...]
    files: tuple[InventoryFile, ...]
    prefixes: tuple[str, ...] = ()
    """The rule's ``filters.prefixMatch`` (empty: the whole account)."""
    completion_time: str | None = None

    @classmethod
    def parse(cls, raw: bytes | str, *, where: str = "manifest.json") -> BlobInventoryManifest:
        """Parse a manifest document; ConfigError naming `where` and the problem."""
        what = f"Blob Inventory manifest {where}"
        try:
            doc = strictjson.loads(raw, what=what, max_bytes=_MANIFEST_MAX_BYTES, max_depth=8)
        except InvalidJson as exc:
            raise ConfigError(f"{what} is not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{what} must be a JSON object")
        status = doc.get("status")
        if status != "Succeeded":
            raise ConfigError(
                f"{what}: the inventory run's status is {status!r}, not "
                "'Succeeded': its files are incomplete; use a completed run"
            )
        rule = doc.get("ruleDefinition")
        if not isinstance(rule, dict):
            raise ConfigError(f"{what}: 'ruleDefinition' must be an object")
        if str(rule.get("objectType", "")).lower() != "blob":
            raise ConfigError(
                f"{what}: objectType {rule.get('objectType')!r} is not 'blob': "
                "give the report of a rule with objectType blob"
            )
        fmt = _FORMATS.get(str(rule.get("format", "")).lower())
        if fmt is None:
            raise ConfigError(
                f"{what}: unknown format {rule.get('format')!r}; expected csv or parquet"
            )
        fields = rule.get("schemaFields")
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ConfigError(f"{what}: 'schemaFields' must be a list of field names")
        missing = [name for name in REQUIRED_FIELDS if name not in fields]
        if missing:
            raise ConfigError(
                f"{what}: schemaFields {fields} lack {missing}; add them to the inventory rule"
            )
        filters = rule.get("filters") if isinstance(rule.get("filters"), dict) else {}
        prefixes = filters.get("prefixMatch") or []  # type: ignore[union-attr]
        return cls(
            endpoint=_text(doc, "endpoint", what),
            destination_container=_text(doc, "destinationContainer", what),
            file_format=fmt,
            fields=tuple(fields),
            files=_files(doc, what),
            prefixes=tuple(str(p) for p in prefixes if isinstance(p, str)),
            completion_time=doc.get("inventoryCompletionTime"),
        )

    @classmethod
    def load(cls, path: str | Path) -> BlobInventoryManifest:
        """Read and parse a local manifest file."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            msg = (
                f"cannot read Blob Inventory manifest {str(path)!r} ({exc}); give --inventory PATH"
            )
            raise ConfigError(msg) from exc
        return cls.parse(raw, where=str(path))

    def check_covers(self, account_url: str, container: str, *, where: str) -> None:
        """ConfigError unless the report is of `account_url` and may list `container`."""
        if _account(self.endpoint) != _account(account_url):
            raise ConfigError(
                f"inventory {where!r} is of account {self.endpoint!r}, not --account-url "
                f"{redact_url(account_url)!r}: give the report of the account being swept"
            )
        head = container + "/"
        if self.prefixes and not any(
            head.startswith(p) or p.startswith(head) for p in self.prefixes
        ):
            raise ConfigError(
                f"inventory {where!r} covers the prefixes {list(self.prefixes)}, none in "
                f"container {container!r}: give the report of a rule that includes it"
            )


def _account(url: str) -> str:
    """An account endpoint compared without scheme or host case, or a trailing '/'."""
    parts = urllib.parse.urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def _text(doc: dict[str, Any], name: str, what: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what}: field {name!r} must be a non-empty string")
    return value


def _files(doc: dict[str, Any], what: str) -> tuple[InventoryFile, ...]:
    entries = doc.get("files")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{what}: 'files' must be a non-empty list")
    files = []
    for entry in entries:
        name = entry.get("blob") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
            raise ConfigError(f"{what}: bad file entry {entry!r}")
        size = entry.get("size")
        files.append(InventoryFile(name, size if type(size) is int else None))
    return tuple(files)


def read_blob_inventory(
    spark: Any,
    manifest_path: str | Path,
    *,
    account_url: str,
    container: str,
    inventory_root: str | None = None,
) -> Any:
    """The container's base blobs in the report as `SOURCE_SCHEMA` rows (module docs)."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    manifest = BlobInventoryManifest.load(manifest_path)
    manifest.check_covers(account_url, container, where=str(manifest_path))
    as_s3 = InventoryManifest(
        source_bucket=container,
        destination_bucket=manifest.destination_container,
        file_format=manifest.file_format,
        columns=manifest.fields,
        files=manifest.files,
    )
    paths = resolve_data_paths(as_s3, manifest_path, inventory_root)
    if manifest.file_format is InventoryFormat.CSV:
        schema = ", ".join(f"`{name}` string" for name in manifest.fields)
        # RFC 4180 quoting: a '"' in a name is doubled (Spark's default escape is '\\').
        raw = spark.read.csv(
            paths, schema=schema, header=True, mode="PERMISSIVE", escape='"', multiLine=True
        )  # a blob name may hold a line break
    else:
        raw = spark.read.parquet(*paths)
    fields = set(manifest.fields)

    def text(name: str) -> Any:
        return F.col(f"`{name}`").cast("string")

    def flag(name: str) -> Any:
        return F.coalesce(F.lower(F.trim(text(name))) == F.lit("true"), F.lit(False))

    dropped = F.lit(False)
    for name in ("Deleted", "hdi_isfolder"):
        if name in fields:
            dropped = dropped | flag(name)
    if "IsCurrentVersion" in fields:  # empty on an account without versioning: current
        current = F.lower(F.trim(text("IsCurrentVersion")))
        dropped = dropped | F.coalesce(current == F.lit("false"), F.lit(False))
    if "Snapshot" in fields:
        dropped = dropped | (F.coalesce(F.length(F.trim(text("Snapshot"))), F.lit(0)) > 0)
    head = container + "/"
    name = text("Name")
    raw = raw.where(~dropped & name.startswith(head))
    stamp = _modified(F, F.col("`Last-Modified`"), dict(raw.dtypes).get("Last-Modified"))
    return raw.select(
        F.substring(name, len(head) + 1, 1 << 30).alias("key"),
        F.coalesce(F.col("`Content-Length`").try_cast("long"), F.lit(0)).alias("size"),
        (F.unix_micros(stamp) / F.lit(1e6)).alias("last_modified_s"),
        F.lit(None).cast("string").alias("version_id"),
        F.lit(True).alias("is_latest"),
        F.lit(False).alias("delete_marker"),
    )


_INTEGERS = {"tinyint", "smallint", "int", "bigint"}
_MIN_MILLIS = 100_000_000_000
"""1973-03-03 in milliseconds: a smaller integer Last-Modified is no blob's time in
milliseconds but most likely seconds (today's seconds read as milliseconds are January
1970, which would make every blob look old enough to pass the grace period): NULL, so
the blob is kept."""


def _modified(F: Any, column: Any, dtype: str | None) -> Any:  # noqa: N803 - pyspark's F
    """``Last-Modified`` as a timestamp (module docs, "Times"), NULL when unreadable."""
    if dtype in _INTEGERS:  # Parquet INT64 without the timestamp annotation: milliseconds
        return F.when(column >= F.lit(_MIN_MILLIS), F.timestamp_millis(column))
    if dtype != "string":  # Parquet TIMESTAMP(MILLIS), or any timestamp type
        return column.try_cast("timestamp")
    # ISO 8601: .NET writes 7 fraction digits ("...36.4870000Z"); Spark reads up to 6.
    iso = F.try_to_timestamp(F.regexp_replace(column, r"(\.\d{6})\d+", "$1"))
    # RFC 1123: Spark 3+ cannot parse the day name ('E'), which says nothing anyway.
    rfc = F.try_to_timestamp(
        F.regexp_replace(F.trim(column), r"^[A-Za-z]{3}, ", ""), F.lit("dd MMM yyyy HH:mm:ss z")
    )
    return F.coalesce(iso, rfc)
