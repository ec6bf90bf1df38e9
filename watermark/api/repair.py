"""Repair a partition record: write a validated one by compare-and-swap.

Design notes: docs/internals/publisher.md, `watermark.api.repair`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import structlog

from l0gc.contract.kv import KV, Compare, Put
from l0gc.contract.record import PartitionRecord
from l0gc.errors import (
    ConfigError,
    EpochConflict,
    InvalidRecord,
    PartitionNotRegistered,
)
from l0gc.etcd.liveness import live_owner
from l0gc.etcd.store import WatermarkStore
from watermark.api.owners import DEFAULT_REVOKE_WAIT_S, refuse_live, revoke

__all__ = ["RecordChanges", "plan", "repair_partition"]

_log = structlog.get_logger("watermark.repair")


@dataclass(frozen=True, slots=True)
class RecordChanges:
    """What to change in a partition record, and how carefully (the repair flags)."""

    watermark: int | None = None
    created_epoch: int | None = None
    owner: str | None = None
    owner_epoch: int | None = None
    no_owner: bool = False
    reset_tracker: bool = False
    force: bool = False
    reason: str = ""
    revoke_wait_s: float = DEFAULT_REVOKE_WAIT_S
    dry_run: bool = False


def plan(
    name: str,
    current: PartitionRecord | None,
    changes: RecordChanges,
    cluster_epoch: int,
    now: float,
) -> PartitionRecord:
    """The record to write (pure): `current` (None: malformed) with `changes` applied,
    validated; ConfigError naming the flag, or a lowered M(p) without --force."""
    if current is None:
        watermark, created = changes.watermark, changes.created_epoch
        if watermark is None or created is None:
            given = (("--watermark", watermark), ("--created-epoch", created))
            missing = [flag for flag, value in given if value is None]
            raise ConfigError(
                f"partition {name!r}: the stored record does not decode, so a new one is "
                f"written from the flags: give {' and '.join(missing)}"
            )
        base = PartitionRecord(name, watermark, created)
    else:
        base = current
    if changes.owner is not None and changes.no_owner:
        raise ConfigError("give --owner ID or --no-owner, not both")
    record = dataclasses.replace(
        base,
        watermark=base.watermark if changes.watermark is None else changes.watermark,
        created_epoch=(
            base.created_epoch if changes.created_epoch is None else changes.created_epoch
        ),
        updated_at=now,
        sealed_owner_epoch=None,
    )
    if changes.owner is not None or changes.no_owner:
        owner = None if changes.no_owner else changes.owner
        record = dataclasses.replace(record, owner=owner, owner_epoch=base.owner_epoch + 1)
    if changes.reset_tracker:
        record = dataclasses.replace(
            record, tracker=None, owner=None, owner_epoch=base.owner_epoch + 1
        )
    if changes.owner_epoch is not None:
        record = dataclasses.replace(record, owner_epoch=changes.owner_epoch)
    if not -1 <= record.watermark < cluster_epoch:
        raise ConfigError(
            f"--watermark {record.watermark}: M(p) must be >= -1 and below the cluster epoch "
            f"{cluster_epoch} (sweepers treat a higher one as malformed)"
        )
    if not 0 <= record.created_epoch <= cluster_epoch:
        raise ConfigError(
            f"--created-epoch {record.created_epoch}: must be in [0, cluster epoch {cluster_epoch}]"
        )
    if current is not None and record.watermark < current.watermark and not changes.force:
        raise ConfigError(
            f"partition {name!r}: refusing to lower M(p) from {current.watermark} to "
            f"{record.watermark}: objects up to {current.watermark} may already be deleted; "
            "pass --force (and --reason) only if you know why it must go down"
        )
    if current is not None and record.owner_epoch < current.owner_epoch and not changes.force:
        raise ConfigError(
            f"partition {name!r}: refusing to lower owner_epoch from {current.owner_epoch} to "
            f"{record.owner_epoch}: an owner that acquired it since could then be shadowed "
            "by an older one; pass --force (and --reason) only if you know why"
        )
    raw = record.encode()
    PartitionRecord.decode(raw, partition=name)  # the sweepers' decoder accepts it
    return record


async def repair_partition(
    store: WatermarkStore, kv: KV, name: str, changes: RecordChanges
) -> dict[str, Any]:
    """Write partition `name`'s record with `changes` by CAS (see the module docstring);
    what was done, JSON-able."""
    key = store.partition_key(name)
    item = await kv.get(key)
    if item is None:
        raise PartitionNotRegistered(name)
    malformed: str | None = None
    try:
        current: PartitionRecord | None = PartitionRecord.decode(item.value, partition=name)
    except InvalidRecord as exc:
        current, malformed = None, str(exc)
    record = plan(name, current, changes, await store.get_cluster_epoch(), time.time())
    lowered = current is not None and record.watermark < current.watermark
    revoked = False
    if current is not None and _needs_owner_gone(current, record):
        why = await live_owner(kv, store.namespace, current)
        if why is not None and not changes.force:
            raise refuse_live(name, "raise M(p) or lower owner_epoch", why)
        if why is not None and not changes.dry_run:
            item = await revoke(
                kv, item, current, wait_s=changes.revoke_wait_s, reason=changes.reason
            )
            record = dataclasses.replace(
                record,
                owner=None if record.owner == current.owner else record.owner,
                owner_epoch=max(record.owner_epoch, current.owner_epoch + 1),
            )
            revoked = True
    written = False
    if not changes.dry_run:
        result = await kv.txn([Compare(key, item.mod_revision)], [Put(key, record.encode())])
        if not result.succeeded:
            raise EpochConflict(key, "the record changed since it was read: run repair again")
        written = True
        if lowered:
            assert current is not None
            _log.warning(
                "watermark.partition_repair_forced",
                partition=name,
                previous_watermark=current.watermark,
                watermark=record.watermark,
                reason=changes.reason or "(none given)",
            )
        _log.info("watermark.partition_repaired", partition=name, watermark=record.watermark)
    return {
        "partition": name,
        "previous": None if current is None else json.loads(current.encode()),
        "malformed": malformed,
        "record": json.loads(record.encode()),
        "forced": lowered,
        "owner_revoked": revoked,
        "written": written,
    }


def _needs_owner_gone(current: PartitionRecord, record: PartitionRecord) -> bool:
    """True when the change is unsafe under a live owner: M(p) raised (the owner still
    admits epochs up to it), or owner_epoch lowered while the owner stays named."""
    return record.watermark > current.watermark or (
        record.owner is not None and record.owner_epoch < current.owner_epoch
    )
