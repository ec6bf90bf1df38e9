"""The undo window's wiring for `gcd sweep` and `gcd daemon` (`--undo-window`).

`undo_keeper` builds the sweeper's `gcd.sweep.undo.UndoKeeper` when the window is not 0:
the delete markers l0gc wrote, read from the deletion journal (`--journal-dir`, and the
segments shipped to `--journal-prefix`), and M's history in etcd
(`gcd.sweep.mhistory.MHistory`, on a connection of its own). A dry run deletes nothing
and needs neither. Of the shipped segments only those of the last window and a day
(`LEDGER_MARGIN_S`) are read at start; the rest once, if a round meets a marker older.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog

from gcd.sweep.journal import check_audit_prefix, read_journal, read_journal_objects
from gcd.sweep.mhistory import MHistory
from gcd.sweep.undo import UndoKeeper
from watermark.etcd.settings import open_kv

__all__ = ["LEDGER_MARGIN_S", "MAX_SEGMENT_READ", "undo_fields", "undo_keeper"]

log = structlog.get_logger("gcd.cli.undo")

MAX_SEGMENT_READ = 1 << 30
LEDGER_MARGIN_S = 86_400.0
"""Shipped segments older than now - window - this are not read at start: a marker
they name is normally reclaimed long before. A round that finds an unknown marker
older than that on an eligible key reads them all once (`UndoKeeper.older_marker`)."""


@contextlib.asynccontextmanager
async def undo_keeper(
    args: argparse.Namespace, setup: Any, objects: Any
) -> AsyncIterator[UndoKeeper | None]:
    """The keeper of a sweeping command's undo window (None without one); `setup` is its
    `gcd.cli.sweep.RoundSetup`, `objects` its store (the shipped journal is read from it)."""
    window = setup.round.undo_window_s
    if not window or setup.round.dry_run:
        yield None
        return
    keeper = UndoKeeper(window)
    local = Path(args.journal_dir)
    found = keeper.ledger.load(read_journal([local])) if local.is_dir() else 0  # noqa: ASYNC240 - once, at start
    if args.journal_prefix is not None:
        prefix = check_audit_prefix(args.journal_prefix, setup.round.layout.root)
        since = time.time() - window - LEDGER_MARGIN_S
        shipped = await read_journal_objects(objects, prefix, max_bytes=MAX_SEGMENT_READ,
                                             newer_than=since)  # fmt: skip
        found += keeper.ledger.load(shipped)
        keeper.ledger_from = since
        keeper.load_rest = functools.partial(read_journal_objects, objects, prefix,
                                             max_bytes=MAX_SEGMENT_READ)  # fmt: skip
    log.info("undo.ledger_loaded", markers=found, keys=len(keeper.ledger.markers),
             window_s=window)  # fmt: skip
    if setup.etcd is None:
        yield keeper
        return
    kv = await open_kv(setup.etcd, connect=False)
    try:
        keeper.history = MHistory(kv, setup.etcd.namespace, window)
        yield keeper
    finally:
        await kv.close()


def undo_fields(undo: dict[str, Any]) -> dict[str, str | bool | None]:
    """The last round's undo report as flat, short fields of the shard announcement's
    `store` (`gcd status` shows them)."""
    oldest = undo.get("oldest_pending")
    pending = f"{undo.get('pending_keys', 0)} keys, {undo.get('pending_bytes', 0)} bytes"
    return {"undo_window": f"{float(undo.get('window_s') or 0):g}s",
            "undo_rule": None if undo.get("rule") is None else str(undo["rule"]),
            "undo_pending": pending,
            "undo_oldest_pending": None if oldest is None else str(oldest)}  # fmt: skip
