"""The operator commands' live-owner rule: what `repair` and `deregister` may do to a
partition whose owner is running.

A partition's owner admits writes through its fencing window and promises nothing it
has not published. An operator who raises M(p) or deletes the record under a running
owner makes objects the owner still admits deletable (red-team round 4: a writer one
epoch behind fenced E-1 and committed after `repair --watermark E-1`, and the next sweep
deleted that committed object). So:

- An owner counts as *live* when it holds a liveness key (`{ns}/owners/{id}`, every
  non-replicated `watermark serve`) or a replica member record
  (`{ns}/replicas/members/{id}`), or when its record was published within the last
  `RECENT_PUBLISH_S` seconds (an embedded publisher of the Python API holds no key).
- `repair` that raises M(p) or lowers owner_epoch, and `deregister`, refuse a live
  owner's partition (exit 2, naming the owner and why it counts as live) unless
  `--force`. With `--force` the owner is *revoked first*: one compare-and-swap clears
  the owner and bumps owner_epoch, M(p) unchanged; the owner sees it within one publish
  interval (`watermark.service.records`) and drops the partition, taking back its
  fences; after `--revoke-wait` the change itself is written, compared against the
  revocation (if anyone adopted the partition meanwhile, nothing is written: exit 1).
- An owner that learns of a raised M(p) anyway (a raise with nobody live, then a new
  owner; or a writer outside l0gc) raises its fencing floor to it at once
  (`watermark.service.hosted.HostedPartition.learn_stored_watermark`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence

import structlog

from watermark.core.kv import KV, Compare, KeyValue, Put
from watermark.core.record import PartitionRecord
from watermark.errors import EpochConflict, InvalidRecord, LiveOwner
from watermark.etcd.store import WatermarkStore
from watermark.options import Option, boolean, duration, text
from watermark.service.liveness import Liveness

__all__ = [
    "DEFAULT_REVOKE_WAIT_S",
    "FORCE_OPTIONS",
    "RECENT_PUBLISH_S",
    "deregister",
    "live_owner",
    "refuse_live",
    "revoke",
]

RECENT_PUBLISH_S = 60.0
"""A record published this recently counts as having a live owner."""
DEFAULT_REVOKE_WAIT_S = 5.0
"""How long `--force` waits after revoking a live owner (its publish interval, 1 s by
default, is when it notices; the rest is margin for a slow etcd)."""
_log = structlog.get_logger("watermark.repair")

FORCE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--force",
        boolean,
        False,
        "allow it under a live owner (revoked first, see --revoke-wait) or, for repair, "
        "lowering M(p) or owner_epoch; logs an audit line with --reason",
        switch=True,
    ),
    Option("--reason", text, "", "why (written to the audit log line of --force)", "TEXT"),
    Option(
        "--revoke-wait",
        duration,
        DEFAULT_REVOKE_WAIT_S,
        "with --force under a live owner: how long to wait after revoking it before "
        "writing (more than the owner's --publish-interval)",
        "DURATION",
    ),
)
"""The flags of the operator commands that can override the live-owner rule."""


async def live_owner(
    kv: KV, namespace: str, record: PartitionRecord, *, now: float | None = None
) -> str | None:
    """Why `record`'s owner counts as live (see the module docstring), None if not."""
    owner = record.owner
    if owner is None:
        return None
    if await Liveness(kv, namespace, owner, 1).alive([owner]):
        return f"owner {owner!r} is running (it holds a liveness key or a member record)"
    now = time.time() if now is None else now
    if record.updated_at is not None and now - record.updated_at < RECENT_PUBLISH_S:
        return f"owner {owner!r} published {now - record.updated_at:.0f} s ago"
    return None


def refuse_live(partition: str, action: str, why: str) -> LiveOwner:
    """The error of an action refused under a live owner (exit 2; HTTP 409 live_owner)."""
    return LiveOwner(partition, action, why)


async def deregister(
    store: WatermarkStore,
    names: Sequence[str],
    *,
    force: bool = False,
    revoke_wait_s: float = DEFAULT_REVOKE_WAIT_S,
    reason: str = "",
) -> list[str]:
    """Delete the records of `names` (those deleted, in order; an absent one is skipped).

    Every name is checked before anything is deleted: a live owner's partition raises
    `LiveOwner` unless `force`, which revokes that owner first (`revoke`). The one rule
    behind `watermark partition deregister` and ``DELETE /v1/partitions/{partition}``.

    Each delete is compared against the very record that was checked: a record that
    changed in between (a register's adopt: a live owner now) is read and checked
    again, never deleted unchecked (issue 51: a register racing a deregister let a
    fence and a commit through on a partition whose record was then deleted).
    """
    plans = [(name, *await _checked(store, name, force)) for name in names]
    deleted: list[str] = []
    for name, item, live in plans:
        if await _delete_checked(
            store, name, item, live, force=force, revoke_wait_s=revoke_wait_s, reason=reason
        ):
            deleted.append(name)
    return deleted


_DELETE_ATTEMPTS = 5


async def _delete_checked(
    store: WatermarkStore,
    name: str,
    item: KeyValue | None,
    live: bool,
    *,
    force: bool,
    revoke_wait_s: float,
    reason: str,
) -> bool:
    """Delete exactly the record `item` that was checked (True), or none (False: not
    registered). A record that changed meanwhile is checked again; a forced delete of a
    live owner's record revokes it first and then deletes only the revoked record."""
    for _ in range(_DELETE_ATTEMPTS):
        if item is None:
            return False
        if live:  # only with force (`_checked`); a new adopter after the revoke: exit 1
            record = PartitionRecord.decode(item.value, partition=name)
            revoked = await revoke(store.kv, item, record, wait_s=revoke_wait_s, reason=reason)
            return await store.deregister_partition(name, expected=revoked)
        try:
            return await store.deregister_partition(name, expected=item)
        except EpochConflict:
            item, live = await _checked(store, name, force)
    raise EpochConflict(
        store.partition_key(name),
        f"the record kept changing during deletion "
        f"({_DELETE_ATTEMPTS} tries): run the command again",
    )


async def _checked(store: WatermarkStore, name: str, force: bool) -> tuple[KeyValue | None, bool]:
    """(the record's item, whether its owner is live) as read now; `LiveOwner` when it
    is live and not `force`."""
    item = await store.kv.get(store.partition_key(name))
    why = None
    if item is not None:
        with contextlib.suppress(InvalidRecord):  # a malformed record has no owner
            record = PartitionRecord.decode(item.value, partition=name)
            why = await live_owner(store.kv, store.namespace, record)
    if why is not None and not force:
        raise refuse_live(name, "deregister it", why)
    return item, why is not None


async def revoke(
    kv: KV, item: KeyValue, record: PartitionRecord, *, wait_s: float, reason: str
) -> KeyValue:
    """Clear `record`'s owner (owner_epoch + 1, nothing else changes) by compare-and-swap
    against `item`, wait `wait_s` for the owner to drop the partition, and return the
    revision written as the item to compare the real change against."""
    key = item.key
    revoked = dataclasses.replace(
        record, owner=None, owner_epoch=record.owner_epoch + 1, sealed_owner_epoch=None
    )
    raw = revoked.encode()
    result = await kv.txn([Compare(key, item.mod_revision)], [Put(key, raw)])
    if not result.succeeded:
        raise EpochConflict(key, "the record changed since it was read: run the command again")
    _log.warning(
        "watermark.owner_revoked",
        partition=record.partition,
        owner=record.owner,
        owner_epoch=revoked.owner_epoch,
        reason=reason or "(none given)",
        wait_s=wait_s,
    )
    await asyncio.sleep(wait_s)  # the owner's next round sees it (not a test's synchronisation)
    return KeyValue(key, raw, result.revision, item.create_revision)
