"""What a Spark job does about bucket versioning: list versions or keys, delete by id or not.

Design notes: docs/internals/spark.md, `gcd.spark.versioning`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcd.rules.versions import VersionMode
from gcd.storage.objectstore import StoreFeatures
from l0gc.errors import ConfigError

__all__ = ["VersionPlan", "plan_versions"]


@dataclass(frozen=True, slots=True)
class VersionPlan:
    """How the job treats versions."""

    versions: bool
    """Every version and delete marker is a row, deleted by its version id."""
    object_lock: bool = False
    """The bucket has Object Lock: refused versions are `locked`."""
    store: dict[str, Any] | None = None
    """The summary's `store` (as `gcd sweep --json`), when the features were read."""


def plan_versions(
    *,
    mode: VersionMode,
    features: StoreFeatures | None,
    source: str,
    inventory_has_versions: bool = False,
    deleting: bool,
    bucket: str,
    inventory: str | None = None,
) -> VersionPlan:
    """The plan for one job; ConfigError for the refusal of the module docstring."""
    versioned = features is not None and features.versioned
    reclaim = mode is VersionMode.RECLAIM
    if source == "list":
        versions = versioned and reclaim
    elif reclaim and inventory_has_versions:
        versions = True
    elif reclaim and deleting and versioned:
        assert features is not None
        raise ConfigError(
            f"bucket {bucket!r} has versioning {features.versioning} but inventory "
            f"{inventory!r} lists current versions only: deleting by key would only add "
            "delete markers and free no bytes. Configure the S3 Inventory with "
            "IncludedObjectVersions All (VersionId, IsLatest, IsDeleteMarker), or use --list, "
            "or --versions markers-only to delete current keys only"
        )
    else:
        versions = False
    store = None
    if features is not None:
        store = features.to_dict()
        store["versions"] = "reclaim" if versions else "markers-only" if versioned else "none"
    lock = bool(features is not None and features.object_lock)
    return VersionPlan(versions=versions, object_lock=lock, store=store)
