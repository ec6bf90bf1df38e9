"""Versioned buckets: what the sweeper deletes by version id, and how it names it (pure).

On a bucket with versioning enabled or suspended, DeleteObjects without a version id
only adds a delete marker: the bytes stay billed. With `VersionMode.RECLAIM` (the
default) the sweeper lists versions (ListObjectVersions) and deletes every version and
every delete marker of an eligible key by version id; the epoch rule is the key's
(`gcd.rules.decision`), so every version of a live key is kept, current or not.
`VersionMode.MARKERS_ONLY` keeps the old behaviour: one delete per current key (a
delete marker on a versioned bucket).

A version travels through the deleter, the triage of DeleteObjects answers and the
retry loop as one string, its *target*: the key alone, or the key, NUL, and the version
id. NUL never occurs in a key the deleter sends (`gcd.rules.xmlkeys` screens control
characters out), so a target always splits back into exactly what was listed.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["SEPARATOR", "VersionMode", "split_target", "version_target"]

SEPARATOR: Final = "\x00"


class VersionMode(enum.Enum):
    """What the sweeper deletes on a versioned (or suspended) bucket."""

    RECLAIM = "reclaim"
    """Every version and delete marker of an eligible key, by version id: bytes freed."""
    MARKERS_ONLY = "markers-only"
    """One delete per current key: a delete marker on a versioned bucket, bytes kept."""


def version_target(key: str, version_id: str | None) -> str:
    """The target naming one version of `key` (the key alone when `version_id` is None)."""
    return key if version_id is None else f"{key}{SEPARATOR}{version_id}"


def split_target(target: str) -> tuple[str, str | None]:
    """(key, version id or None) of a target made by `version_target`."""
    key, sep, version_id = target.partition(SEPARATOR)
    return (key, version_id) if sep else (key, None)
