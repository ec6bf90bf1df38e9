"""The operator commands' live-owner rule: what `repair` and `deregister` may do to a
partition whose owner is running.

Design notes: docs/internals/publisher.md, `watermark.api.owners`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence

import structlog

from l0gc.contract.kv import KV, Compare, KeyValue, Put
from l0gc.contract.record import PartitionRecord
from l0gc.errors import EpochConflict, InvalidRecord, LiveOwner
from l0gc.etcd.liveness import live_owner
from l0gc.etcd.store import WatermarkStore
from l0gc.options import Option, boolean, duration, text

__all__ = [
    "DEFAULT_REVOKE_WAIT_S",
    "FORCE_OPTIONS",
    "deregister",
    "refuse_live",
    "revoke",
]

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
