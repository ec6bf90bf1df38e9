"""`watermark namespace export FILE` and `import FILE`: one namespace's state, backed up
and restored without restoring the whole etcd (docs/upgrades.md).

Design notes: docs/internals/sweep.md, `gcd.service.backup`.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from pathlib import Path
from typing import Any

from l0gc.contract.kv import Compare, Put
from l0gc.contract.namespace import pause_marker
from l0gc.errors import ConfigError
from l0gc.etcd.store import WatermarkStore

__all__ = [
    "EXPORT_VERSION",
    "NamespaceNotEmpty",
    "export_namespace",
    "import_namespace",
    "read_export",
    "write_export",
]

EXPORT_VERSION = 1
_DURABLE = ("epoch", "binding", "gc/paused")
_DURABLE_PREFIXES = ("partitions/", "journal/")
_BATCH = 100  # keys per create-only transaction (etcd allows 128 operations)
_IMPORT_REASON = "watermark namespace import: check it, re-bind, make the epoch monotonic"


class NamespaceNotEmpty(ConfigError):
    """Import refused: the target namespace already holds keys."""


def _durable(relative: str) -> bool:
    return relative in _DURABLE or relative.startswith(_DURABLE_PREFIXES)


async def export_namespace(store: WatermarkStore) -> dict[str, Any]:
    """The export document of `store`'s namespace (see the module docstring)."""
    prefix = store.namespace + "/"
    result = await store.kv.range_prefix(prefix)
    keys = [
        {"key": item.key[len(prefix) :], "value": base64.b64encode(item.value).decode()}
        for item in result.items
        if _durable(item.key[len(prefix) :])
    ]
    if not any(entry["key"] == "epoch" for entry in keys):
        raise ConfigError(
            f"nothing to export: namespace {store.namespace!r} has no cluster epoch in this "
            "etcd; is --namespace right?"
        )
    return {
        "version": EXPORT_VERSION,
        "namespace": store.namespace,
        "revision": result.revision,
        "exported_at": time.time(),
        "keys": keys,
    }


def write_export(path: Path, doc: dict[str, Any]) -> None:
    """Write the export document to `path` (mode 0600: it holds the namespace's state)."""
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read_export(path: Path) -> list[tuple[str, bytes]]:
    """The (relative key, value) pairs of an export file; ConfigError naming what is wrong."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the export file {str(path)!r}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != EXPORT_VERSION:
        raise ConfigError(f"{str(path)!r} is not a namespace export of version {EXPORT_VERSION}")
    pairs: list[tuple[str, bytes]] = []
    for index, entry in enumerate(doc.get("keys") or []):
        key = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(key, str) or not _durable(key) or ".." in key.split("/"):
            raise ConfigError(f"{str(path)!r}: keys[{index}] is not a key an export holds")
        try:
            pairs.append((key, base64.b64decode(entry.get("value", ""), validate=True)))
        except (binascii.Error, TypeError) as exc:
            raise ConfigError(f"{str(path)!r}: keys[{index}].value is not base64") from exc
    if "epoch" not in {key for key, _ in pairs}:
        raise ConfigError(f"{str(path)!r} holds no cluster epoch: not a namespace export")
    return pairs


async def import_namespace(store: WatermarkStore, pairs: list[tuple[str, bytes]]) -> int:
    """Write `pairs` into `store`'s empty namespace, paused, the epoch last; the number of
    keys written (the pause marker included)."""
    prefix = store.namespace + "/"
    present = await store.kv.range_prefix(prefix)
    if present.items:
        raise NamespaceNotEmpty(
            f"namespace {store.namespace!r} already holds {len(present.items)} keys in this "
            "etcd: import only into an empty namespace (choose another --namespace, or "
            "delete the old one's keys first if you mean to replace it)"
        )
    paused = pause_marker(_IMPORT_REASON, time.time())
    ordered = [("gc/paused", paused)]
    ordered += [(k, v) for k, v in pairs if k not in ("gc/paused", "epoch")]
    ordered += [(k, v) for k, v in pairs if k == "epoch"]
    for start in range(0, len(ordered), _BATCH):
        batch = ordered[start : start + _BATCH]
        keys = [prefix + key for key, _ in batch]
        puts = [Put(k, v) for k, (_, v) in zip(keys, batch, strict=True)]
        done = await store.kv.txn([Compare(k, 0) for k in keys], puts)
        if not done.succeeded:
            raise NamespaceNotEmpty(
                f"namespace {store.namespace!r}: a key appeared during the import (another "
                f"writer?); {start} keys were written, the namespace is paused and has no "
                "epoch yet: find the other writer, delete the namespace's keys, import again"
            )
    return len(ordered)
