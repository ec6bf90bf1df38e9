"""Which undo rule a Spark job follows, decided on the driver before the job starts.

The rule is the daemon's (`gcd.rules.undo.undo_rule`): a versioned bucket whose versions
are listed hides, then reclaims (`gcd.spark.undo`); Azure with a blob soft delete that
keeps the whole window deletes plainly (`gcd restore` undeletes); every other store
deletes only what was garbage for the whole window (the M of one window ago, from M's
history in etcd). GCS's soft delete is not relied on: Spark's GCS rows carry no
generation, and objects.restore needs the journal to name one. Design notes:
docs/internals/spark.md, `gcd.spark.window`.
"""

from __future__ import annotations

import time

import structlog

from gcd.journal.records import read_journal_objects
from gcd.rules.undo import delayed_safe_epoch, store_keeps, undo_rule
from gcd.service.runtime import MAX_SEGMENT_READ, check_lifecycle
from gcd.spark.undo import JobUndo
from gcd.storage.backend import StoreSettings
from gcd.storage.objectstore import SoftDeleteStore, StoreFeatures
from gcd.storage.registry import open_store
from gcd.undo.mhistory import MHistory
from gcd.undo.window import journal_markers
from l0gc.contract.kv import KV
from l0gc.errors import StorageError

__all__ = ["plan_window"]

log = structlog.get_logger("gcd.spark")


async def plan_window(
    *,
    window_s: float,
    settings: StoreSettings,
    root: str,
    features: StoreFeatures | None,
    versions_listed: bool,
    journal_prefix: str,
    etcd: tuple[KV, str] | None,
    safe_epoch: int,
) -> JobUndo:
    """The job's rule and what it needs: the ledger (read from every segment under
    `journal_prefix`), the store's retention, or M's history (recorded as a sweeper
    records it; `etcd` None: no history, nothing is deleted)."""
    versioning = None if features is None else features.versioning
    retention = None
    async with open_store(settings) as objects:
        if settings.kind == "azure" and isinstance(objects, SoftDeleteStore):
            try:
                retention = await objects.soft_delete_retention()
            except StorageError as exc:  # unreadable: the delayed M, never a guess
                log.warning("undo.store_retention_unreadable", error=str(exc))
        rule = undo_rule(
            versioning=versioning,
            versions_listed=versions_listed,
            soft_delete_covers=store_keeps(retention, window_s),
        )
        if rule == "hide-then-reclaim":
            await check_lifecycle(objects, root, window_s)
            read = await read_journal_objects(objects, journal_prefix, max_bytes=MAX_SEGMENT_READ)
            ledger: dict[str, set[str]] = {}
            for key, marker in journal_markers(read):
                ledger.setdefault(key, set()).add(marker)
            frozen = {key: tuple(sorted(markers)) for key, markers in ledger.items()}
            log.info("undo.ledger_loaded", markers=sum(map(len, frozen.values())), keys=len(frozen))
            return JobUndo(window_s, rule, ledger=frozen)
    if rule != "delayed-m":
        return JobUndo(window_s, rule, store_retention_s=retention)
    delayed = None
    if etcd is not None:
        now = time.time()
        history = await MHistory(etcd[0], etcd[1], window_s).observe(safe_epoch, now)
        delayed = delayed_safe_epoch(history, safe_epoch, now, window_s)
    note = None
    if delayed is None:
        note = (
            "no M history one window old yet: nothing deleted until M has been "
            "recorded for a whole window"
        )
    return JobUndo(
        window_s, rule, delayed_safe_epoch=delayed, store_retention_s=retention, note=note
    )
