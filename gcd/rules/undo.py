"""The undo window: which deletions stay reversible, and for how long (pure).

Design notes: docs/internals/rules.md, `gcd.rules.undo`.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "KeyPlan",
    "MEntry",
    "UndoAction",
    "VersionEntry",
    "delayed_safe_epoch",
    "lifecycle_conflicts",
    "plan_key",
    "prunable",
    "should_record",
    "store_keeps",
    "undo_rule",
]


@dataclass(frozen=True, slots=True)
class MEntry:
    """One change of the global M: its value, when a sweeper first saw it, and the undo
    window (seconds) of that sweeper (the longest in use decides what is pruned)."""

    m: int
    at: float
    window_s: float = 0.0


def delayed_safe_epoch(
    history: Sequence[MEntry], current: int, now: float, window_s: float
) -> int | None:
    """The M a round may delete up to when every deletion must have been garbage for
    `window_s`: the lowest M in force at any time in [now - window_s, now] (the entry in
    force at the window's start, every later entry, and `current`). None when no entry
    is that old: nothing is known to have been garbage for the whole window."""
    start = now - window_s
    ordered = sorted(history, key=lambda entry: entry.at)
    in_force = [entry for entry in ordered if entry.at <= start]
    if not in_force:
        return None
    later = [entry.m for entry in ordered if entry.at > start]
    return min([in_force[-1].m, *later, current])


def should_record(history: Sequence[MEntry], current: int, now: float, spacing_s: float) -> bool:
    """Whether a sweeper that reads M = `current` at `now` adds an entry: always when there
    is none or M went down (a repair); when M went up, only `spacing_s` after the last
    entry. Recording a rise late only makes the delayed M lower (safe), and keeps the
    history small: about window / spacing entries."""
    if not history:
        return True
    last = max(history, key=lambda entry: entry.at)
    if current < last.m:
        return True
    return current > last.m and now - last.at >= spacing_s


def prunable(history: Sequence[MEntry], now: float, window_s: float) -> list[MEntry]:
    """The entries no window in use needs any more: older than the entry in force at
    now - longest window (the longest of `window_s` and every entry's own window)."""
    longest = max([window_s, *(entry.window_s for entry in history)])
    ordered = sorted(history, key=lambda entry: entry.at)
    start = now - longest
    in_force = [index for index, entry in enumerate(ordered) if entry.at <= start]
    return ordered[: in_force[-1]] if in_force else []


def store_keeps(retention_s: float | None, window_s: float) -> bool:
    """Whether a store's own soft delete, `retention_s` (None: unreadable; 0: off), keeps
    every deleted object restorable for the whole window."""
    return retention_s is not None and retention_s > 0 and retention_s >= window_s


def undo_rule(*, versioning: str | None, versions_listed: bool, soft_delete_covers: bool) -> str:
    """Which rule a round with an undo window follows on its store (docs/reliability.md,
    "The undo window"): "hide-then-reclaim" (a versioned bucket whose versions are
    listed), "markers-only" (versioned, versions not listed: every delete is a marker),
    "store-soft-delete" (the store's own soft delete keeps the whole window: plain
    deletes) or "delayed-m" (the M of one window ago). Suspended versioning gets the
    delayed M: a delete without a version id there replaces the key's "null" version."""
    if versioning == "Suspended":
        return "delayed-m"
    if versions_listed:
        return "hide-then-reclaim"
    if versioning == "Enabled":
        return "markers-only"
    return "store-soft-delete" if soft_delete_covers else "delayed-m"


def lifecycle_conflicts(rules: Sequence[object], root: str, window_s: float) -> list[str]:
    """The enabled S3 lifecycle rules (GetBucketLifecycleConfiguration's ``Rules``) that
    would free a hidden version before the undo window ends: they expire noncurrent
    versions (``NoncurrentVersionExpiration``: a hidden version becomes noncurrent at
    its hide) after fewer days than the window, and their filter's prefix overlaps the
    root (a tag filter may select any key: counted as overlapping). One line per rule."""
    found = []
    for rule in rules:
        if not isinstance(rule, dict) or rule.get("Status") != "Enabled":
            continue
        expiry = rule.get("NoncurrentVersionExpiration")
        days = expiry.get("NoncurrentDays") if isinstance(expiry, dict) else None
        if type(days) is not int or days * 86400 >= window_s:
            continue
        prefix = _rule_prefix(rule)
        if prefix.startswith(root) or root.startswith(prefix):
            found.append(
                f"lifecycle rule {rule.get('ID', '(no ID)')!r} (prefix {prefix!r}) "
                f"expires noncurrent versions after {days} days"
            )
    return found


def _rule_prefix(rule: dict[str, object]) -> str:
    """The key prefix a lifecycle rule selects ("" = the whole bucket)."""
    where = rule.get("Filter")
    if isinstance(where, dict):
        inner = where.get("And") if isinstance(where.get("And"), dict) else where
        assert isinstance(inner, dict)
        return str(inner.get("Prefix") or "")
    return str(rule.get("Prefix") or "")  # the older form, without Filter


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """One listed version or delete marker of a key."""

    version_id: str
    marker: bool
    latest: bool
    last_modified_s: float
    size: int = 0
    young: bool = False
    """Inside the grace period: the whole key waits."""


class UndoAction(enum.Enum):
    """What a versioned round with an undo window does with one eligible key."""

    HIDE = "hide"
    """Delete without a version id: a delete marker, every version kept."""
    RECLAIM = "reclaim"
    """l0gc's marker is older than the window: delete its versions and l0gc's markers."""
    PENDING = "pending"
    """l0gc's marker is younger than the window: keep, count."""
    FOREIGN = "foreign"
    """Another writer's marker is on top: never touched."""
    WAIT = "wait"
    """A version is inside the grace period, or the listing named no latest entry."""


@dataclass(frozen=True, slots=True)
class KeyPlan:
    """`plan_key`'s answer: the action, the versions to delete (RECLAIM), the versions a
    new marker hides (HIDE, newest first), and for PENDING (FOREIGN) the bytes held and
    the time l0gc's (the other writer's) marker was written."""

    action: UndoAction
    targets: tuple[VersionEntry, ...] = ()
    hides: tuple[str, ...] = ()
    held_bytes: int = 0
    marker_at: float | None = None


def plan_key(
    versions: Sequence[VersionEntry], ours: Collection[str], now: float, window_s: float
) -> KeyPlan:
    """What to do with every listed version of one eligible key (see the theory above);
    `ours` are the version ids of the delete markers l0gc wrote on this key."""
    data = sorted((v for v in versions if not v.marker), key=lambda v: -v.last_modified_s)
    if any(v.young for v in versions):
        return KeyPlan(UndoAction.WAIT)
    latest = [v for v in versions if v.latest]
    if len(latest) != 1:
        return KeyPlan(UndoAction.WAIT)
    top = latest[0]
    held = sum(v.size for v in data)
    if not top.marker:
        return KeyPlan(UndoAction.HIDE, hides=tuple(v.version_id for v in data), held_bytes=held)
    if top.version_id not in ours:
        return KeyPlan(UndoAction.FOREIGN, held_bytes=held, marker_at=top.last_modified_s)
    if now - top.last_modified_s < window_s:
        return KeyPlan(UndoAction.PENDING, held_bytes=held, marker_at=top.last_modified_s)
    mine = tuple(v for v in versions if v.marker and v.version_id in ours)
    return KeyPlan(
        UndoAction.RECLAIM, targets=(*data, *mine), held_bytes=held, marker_at=top.last_modified_s
    )
