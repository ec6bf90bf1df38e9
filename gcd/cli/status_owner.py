"""`gcd status` on a pinning partition's owner: what it waits on, and whether it runs.

`waiting_text` renders the record's `waiting` (written by the owner,
`l0gc.contract.record`). `gone_owners` names the pinning partitions more than two
epochs behind the cluster epoch whose recorded owner no running process holds: no
liveness key and no publish for `RECENT_PUBLISH_S` (`l0gc.etcd.liveness.live_owner`; an
owner that waits refreshes its record every 30 s, `watermark.service.hosted`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gcd.cli.output import utc_text
from l0gc.contract.record import PartitionRecord
from l0gc.etcd.liveness import live_owner
from l0gc.etcd.store import WatermarkStore

__all__ = ["gone_owners", "waiting_text"]

_WAITS = {
    "log_end": "its log end: its reconciler must send log_end_offset once asked "
    "(docs/operations.md#log-end-unknown)",
    "reconciler": "its reconciler: committed through offset {committed_offset}, reconciled "
    "through {reconciled_offset} (docs/operations.md#m-not-advancing)",
    "fences": "{fences} fence(s) in flight: an idle partition advances with none held",
    "fencing_violation": "an operator: frozen by a fencing violation "
    "(docs/operations.md#fencing-violation)",
}


def waiting_text(waiting: Mapping[str, Any], now: float) -> str:
    """One line: what the owner waits on, since when, and where the fix is."""
    on = str(waiting.get("on"))
    try:
        what = _WAITS[on].format(**waiting)
    except (KeyError, IndexError, ValueError):
        what = on
    since = waiting.get("since")
    at = utc_text(since) if isinstance(since, int | float) else None
    if at is None or not isinstance(since, int | float):
        return f"waiting for {what}"
    return f"waiting since {at} ({max(0.0, now - since):.0f} s) for {what}"


async def gone_owners(store: WatermarkStore, pinning: Sequence[Any], now: float) -> set[str]:
    """The pinning partitions more than two epochs behind the cluster epoch (lag > 2: an
    owner that runs publishes such a partition at least every 30 s) whose recorded owner
    no running process holds (`l0gc.etcd.liveness.live_owner` says not live)."""
    gone = set()
    for p in pinning:
        if p.owner is None or p.lag_epochs is None or p.lag_epochs <= 2:
            continue
        record = PartitionRecord(
            p.partition, p.watermark, p.created_epoch or 0, owner=p.owner, updated_at=p.updated_at
        )
        if await live_owner(store.kv, store.namespace, record, now=now) is None:
            gone.add(p.partition)
    return gone
