"""`gcd status` on a pinning partition's owner: whether it runs.

`gone_owners` names the pinning partitions more than two
epochs behind the cluster epoch whose recorded owner no running process holds: no
liveness key and no publish for `RECENT_PUBLISH_S` (`l0gc.etcd.liveness.live_owner`; an
owner that waits refreshes its record every 30 s, `watermark.service.hosted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from l0gc.contract.record import PartitionRecord
from l0gc.etcd.liveness import live_owner
from l0gc.etcd.store import WatermarkStore

__all__ = ["gone_owners"]


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
