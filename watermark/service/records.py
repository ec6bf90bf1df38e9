"""What an owner learns from its partitions' records in etcd between its own publishes.

Design notes: docs/internals/publisher.md, `watermark.service.records`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import structlog

from l0gc.contract.kv import PrefixWatch
from l0gc.contract.record import PartitionRecord
from l0gc.errors import InvalidRecord, L0gcError
from l0gc.etcd.store import WatermarkStore
from watermark.service.hosted import HostedPartition

__all__ = ["RecordWatch"]

_log = structlog.get_logger("watermark.publisher")


class RecordWatch:
    """The hosted records others changed since the last call (see the module docstring)."""

    def __init__(self, store: WatermarkStore, owner_id: str) -> None:
        self._store = store
        self._owner_id = owner_id
        self._watch: PrefixWatch | None = None

    async def changed(
        self, hosted: Mapping[str, HostedPartition]
    ) -> dict[str, PartitionRecord | InvalidRecord | None]:
        """The current record (None: deregistered) of each hosted partition whose record
        someone else may have written since the last call. Raises what the reads raise
        (EtcdUnavailable): the caller's round goes on and the next call checks again."""
        if not hosted:
            return {}
        if self._watch is None:
            try:
                self._watch = await self._store.watch_partitions()
            except L0gcError as exc:
                _log.warning("watermark.records_watch_failed", error=str(exc))
            suspects = set(hosted)
        else:
            try:
                changes, _ = await self._watch.sync()
            except L0gcError as exc:
                _log.warning("watermark.records_watch_lost", error=str(exc))
                await self.close()
                suspects = set(hosted)
            else:
                prefix = self._store.partitions_prefix
                suspects = {
                    name
                    for change in changes
                    if (name := change.key[len(prefix) :]) in hosted
                    and not self._own_write(hosted[name], change.value)
                }
        if not suspects:
            return {}
        return await self._store.read_partitions(sorted(suspects))

    def _own_write(self, hosted: HostedPartition, raw: bytes | None) -> bool:
        """True when `raw` is a record this owner could have published (same owner and
        owner_epoch, M(p) not above the one it knows): nothing to learn from it."""
        if raw is None:
            return False
        try:
            record = PartitionRecord.decode(raw, partition=hosted.partition)
        except InvalidRecord:
            return False
        return (
            record.owner == self._owner_id
            and record.owner_epoch == hosted.owner_epoch
            and record.watermark <= hosted.published_watermark
        )

    async def close(self) -> None:
        """Stop watching (the next `changed` reads every hosted record again)."""
        watch, self._watch = self._watch, None
        if watch is not None:
            with contextlib.suppress(L0gcError):
                await watch.close()
