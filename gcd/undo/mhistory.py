"""M's history in etcd, for the undo window on stores without versions (`gcd.rules.undo`).

Keys, one per change of the global M (`gcd.rules.undo.should_record`):

    {ns}/gc/m-history/{at in ms, 16 digits}   {"m": M, "at": unix seconds, "window_s": W}

A sweeper with an undo window records M where it reads it, at the start of each round
(`MHistory.observe`): it writes an entry when M went down, or went up and the last entry
is older than `spacing` (window / 100), create-if-absent, so concurrent sweepers never
overwrite each other's; then it deletes the entries no window in use needs
(`gcd.rules.undo.prunable`). The history therefore holds about 100 entries per window,
a few KiB. An entry that cannot be decoded is an error: the round that needs the
history is blocked (fail closed), never given a guess.
"""

from __future__ import annotations

import json

import structlog

from gcd.rules.undo import MEntry, prunable, should_record
from l0gc.contract.kv import KV, Compare, Delete, Put
from l0gc.errors import InvalidRecord

__all__ = ["HISTORY_SPACING_FRACTION", "MHistory", "history_prefix"]

log = structlog.get_logger("gcd.mhistory")

HISTORY_SPACING_FRACTION = 0.01
"""A rise of M is recorded at most every window x this (100 entries per window)."""


def history_prefix(namespace: str) -> str:
    """Where M's history lives under a namespace."""
    return f"{namespace}/gc/m-history/"


class MHistory:
    """Reads, records and prunes M's history of one namespace."""

    def __init__(self, kv: KV, namespace: str, window_s: float) -> None:
        self.kv = kv
        self.prefix = history_prefix(namespace)
        self.window_s = window_s

    async def read(self) -> list[MEntry]:
        """Every entry, oldest first; InvalidRecord for one that cannot be decoded."""
        result = await self.kv.range_prefix(self.prefix)
        entries = [_decode(item.key, item.value) for item in result.items]
        return sorted(entries, key=lambda entry: entry.at)

    async def observe(self, current: int, now: float) -> list[MEntry]:
        """Record `current` if it is a change worth an entry, prune, and return the
        history as it stands (with the new entry)."""
        history = await self.read()
        if should_record(history, current, now, self.window_s * HISTORY_SPACING_FRACTION):
            entry = MEntry(current, round(now, 3), self.window_s)
            key = f"{self.prefix}{int(entry.at * 1000):016d}"
            raw = json.dumps({"m": entry.m, "at": entry.at, "window_s": entry.window_s})
            result = await self.kv.txn([Compare(key, 0)], [Put(key, raw.encode())])
            if result.succeeded:
                history.append(entry)
                log.info("undo.m_recorded", m=current, at=entry.at)
        old = prunable(history, now, self.window_s)
        if old:
            keys = [f"{self.prefix}{int(entry.at * 1000):016d}" for entry in old]
            await self.kv.txn([], [Delete(key) for key in keys])
            history = [entry for entry in history if entry not in old]
        return history


def _decode(key: str, raw: bytes) -> MEntry:
    try:
        doc = json.loads(raw)
        entry = MEntry(int(doc["m"]), float(doc["at"]), float(doc.get("window_s", 0.0)))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRecord(
            f"M history entry {key} cannot be read ({exc}): delete it "
            "with etcdctl del, the next round writes a fresh one"
        ) from exc
    return entry
