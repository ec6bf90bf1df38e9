"""What a round found about its store, said once at its end: detection, locks, undo window.

Design notes: docs/internals/sweep.md, `gcd.sweep.findings`.
"""

from __future__ import annotations

from typing import Final

import structlog

from gcd.observe.report import RoundCounts, iso_utc
from gcd.observe.telemetry import UndoPendingCounted
from gcd.rules.versions import split_target
from gcd.storage.objectstore import DetectingStore, ObjectStore, VersionedStore
from gcd.sweep.roundstate import RoundState
from l0gc.events import Hook

__all__ = ["LOCK_PROBES", "locked_report", "store_report", "undo_report"]

log = structlog.get_logger("gcd.sweeper")

LOCK_PROBES: Final = 20
"""Locked versions per round whose reason and retain-until are asked (one HEAD each)."""


def store_report(
    store: ObjectStore, run: RoundState, *, unordered_listing: bool
) -> dict[str, object] | None:
    """The summary's `store`: what was detected, and how this round listed."""
    if not isinstance(store, DetectingStore):
        return None
    report = store.detected.to_dict()
    if unordered_listing:
        report["listing"] = "unordered"
    report["versions"] = (
        "reclaim"
        if run.versioned
        else "markers-only"
        if report["versioning"] in {"Enabled", "Suspended"}
        else "none"
    )
    return report


async def locked_report(
    store: ObjectStore, counts: RoundCounts
) -> tuple[dict[str, int] | None, str | None]:
    """Reasons and the earliest retain-until of the round's locked versions, logged
    once (at most `LOCK_PROBES` asked; the others count as "not examined")."""
    if not counts.locked:
        return None, None
    reasons: dict[str, int] = {}
    earliest: float | None = None
    probes = counts.locked_targets[:LOCK_PROBES]
    if isinstance(store, VersionedStore):
        for target in probes:
            key, version_id = split_target(target)
            if version_id is None:
                continue
            reason, until = await store.lock_state(key, version_id)
            reasons[reason] = reasons.get(reason, 0) + 1
            if until is not None and (earliest is None or until < earliest):
                earliest = until
    examined = sum(reasons.values())
    if counts.locked > examined:
        reasons["not examined"] = counts.locked - examined
    first = None if earliest is None else iso_utc(earliest)
    log.warning(
        "sweep.locked_versions",
        count=counts.locked,
        reasons=reasons,
        earliest_retain_until=first,
        bypassed=False,
    )
    return reasons, first


def undo_report(run: RoundState, window_s: float, emit: Hook) -> dict[str, object]:
    """The summary's `undo` for a round with an undo window; its gauges go to `emit`."""
    counts = run.counts
    oldest = counts.oldest_pending_s
    emit(UndoPendingCounted(counts.pending_keys, counts.pending_bytes, oldest))
    note = None
    if run.ceiling == -1:
        note = (
            "no M history one window old yet: nothing deleted until M has been "
            "recorded for a whole window"
        )
    return {
        "window_s": window_s,
        "rule": run.undo_rule,
        "delayed_safe_epoch": None if run.ceiling in (None, -1) else run.ceiling,
        "pending_keys": counts.pending_keys,
        "pending_bytes": counts.pending_bytes,
        "oldest_pending": None if oldest is None else iso_utc(oldest),
        "foreign_markers": counts.foreign_markers,
        "note": note,
        "store_retention_s": run.soft_delete_s,
    }
