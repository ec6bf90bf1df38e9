"""After each admitted round, add its request counts and what it freed (objects, versions
and markers deleted, not keys only hidden by the undo window; bytes) to the shard's usage
record in etcd (`gcd.rules.usage`), for `gcd status`'s cost lines.

A compare-and-swap on the record's revision, retried a few times; a failure is logged and
never fails the round (the figures are a report, not a safety rail).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog

from gcd.observe.report import RoundSummary
from gcd.rules.prices import PriceTable
from gcd.rules.usage import Usage
from l0gc.contract.kv import KV, Compare, Put
from l0gc.errors import InvalidRecord, L0gcError

__all__ = ["UsageRecorder", "usage_key", "usage_prefix"]

log = structlog.get_logger("gcd.usage")
_ATTEMPTS: Final = 3


def usage_prefix(namespace: str) -> str:
    """Where the shards' usage records live."""
    return f"{namespace}/usage/"


def usage_key(namespace: str, index: int, count: int) -> str:
    """The usage record of shard `index` of `count`."""
    return f"{usage_prefix(namespace)}{index}-of-{count}"


@dataclass(eq=False)
class UsageRecorder:
    """Adds rounds to one shard's usage record (an awaitable callback per round)."""

    kv: KV
    key: str
    prices: PriceTable
    clock: Callable[[], float] = time.time

    async def __call__(self, summary: RoundSummary) -> None:
        """Add `summary`'s counts (rounds that were refused request nothing)."""
        # A key hidden behind l0gc's marker (the undo window) frees nothing: not counted as
        # reclaimed; its versions are, once the window passed (issue 55).
        counts = (
            summary.list_requests,
            summary.delete_requests,
            summary.deleted - summary.markers_written,
            summary.deleted_bytes,
        )
        if not any(counts):
            return
        hour = int(self.clock() // 3600)
        for _ in range(_ATTEMPTS):
            try:
                item = await self.kv.get(self.key)
                usage = Usage(self.prices)
                if item is not None:
                    try:
                        usage = Usage.decode(item.value, self.key)
                    except InvalidRecord as exc:
                        log.warning("usage.record_replaced", key=self.key, error=str(exc))
                usage.prices = self.prices
                usage.add(hour, counts)
                revision = 0 if item is None else item.mod_revision
                result = await self.kv.txn(
                    [Compare(self.key, revision)], [Put(self.key, usage.encode())]
                )
                if result.succeeded:
                    return
            except (L0gcError, OSError) as exc:
                log.warning("usage.write_failed", key=self.key, error=str(exc))
                return
        log.warning("usage.write_conflict", key=self.key, attempts=_ATTEMPTS)
