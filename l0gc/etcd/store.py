"""The etcd contract of l0gc, written once on top of the small `KV` interface.

Design notes: docs/internals/kernel.md, `l0gc.etcd.store`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import structlog

from l0gc.contract.kv import KV, Compare, Delete, KeyValue, PrefixWatch, Put, RangeFold, Watchable
from l0gc.contract.namespace import (
    MAX_PARTITION_NAME,
    PUBLISH_BATCH,
    Publication,
    PublishOutcome,
    PublishStatus,
    decide_publication,
    pause_marker,
    pause_reason,
    validate_namespace,
    validate_new_partition,
    validate_partition,
)
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import (
    MAX_CLUSTER_EPOCH,
    GcView,
    SafeEpoch,
    cluster_id_text,
    compute_safe_epoch,
    parse_cluster_epoch,
)
from l0gc.errors import (
    ConfigError,
    EpochConflict,
    InvalidRecord,
    PartitionNotRegistered,
    StaleOwner,
    WatermarkRegression,
    WatermarkUnavailable,
)

__all__ = ["WatermarkStore"]

_PUBLISH_BATCH_BYTES = 1024 * 1024  # etcd's default request limit is 1.5 MiB
_RANGE_READ_MIN = 512  # publishing at least this many partitions reads the registry once
_CAS_ATTEMPTS = 5
_log = structlog.get_logger(__name__)


class WatermarkStore:
    """The etcd contract on a `KV`; see the module docstring for the rules."""

    def __init__(
        self, kv: KV, namespace: str, *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._kv = kv
        self.namespace = validate_namespace(namespace)
        self._wall_clock = wall_clock
        self.epoch_key = f"{namespace}/epoch"
        self.partitions_prefix = f"{namespace}/partitions/"
        self.paused_key = f"{namespace}/gc/paused"
        self.leader_key = f"{namespace}/leader/ticker"
        self.binding_key = f"{namespace}/binding"
        self.sweepers_prefix = f"{namespace}/sweepers/"
        self._written: dict[str, tuple[bytes, PartitionRecord]] = {}
        """The record each partition's last publish from here wrote, with its bytes: the
        next publish reads the same bytes back and need not decode them again (a record
        holding thousands of references costs milliseconds to decode)."""

    def partition_key(self, partition: str) -> str:
        """The etcd key of a partition's record (validates the name)."""
        return self.partitions_prefix + validate_partition(partition)

    # -- cluster epoch ----------------------------------------------------------------

    def _epoch_value(self, item: KeyValue | None) -> int:
        try:
            return parse_cluster_epoch(None if item is None else item.value)
        except InvalidRecord as exc:
            raise WatermarkUnavailable(f"{exc} (key {self.epoch_key})") from exc

    async def get_cluster_epoch(self) -> int:
        """The cluster epoch; WatermarkUnavailable when it is missing or malformed."""
        return self._epoch_value(await self._kv.get(self.epoch_key))

    async def init_cluster_epoch(self, initial: int = 1) -> int:
        """Create the cluster epoch at `initial` if absent; return the current epoch."""
        if initial < 1:
            raise ConfigError(f"initial cluster epoch {initial} must be >= 1")
        item = await self._kv.get(self.epoch_key)
        if item is None:
            create = Put(self.epoch_key, str(initial).encode())
            if (await self._kv.txn([Compare(self.epoch_key, 0)], [create])).succeeded:
                _log.info("watermark.epoch_initialised", namespace=self.namespace, epoch=initial)
                return initial
            item = await self._kv.get(self.epoch_key)
        return self._epoch_value(item)

    async def advance_cluster_epoch(
        self, expected: int | None = None, *, guard: Sequence[Compare] = ()
    ) -> int:
        """Move the epoch from `expected` (or the value read) to exactly +1; return it.

        Creates epoch 1 when the key is absent and `expected` is None. Raises
        EpochConflict when the epoch is not `expected` or changes before the write, or
        when one of the extra `guard` compares (e.g. the ticker's leadership) fails.
        """
        item = await self._kv.get(self.epoch_key)
        if item is None:
            if expected is not None:
                raise EpochConflict(self.epoch_key, f"expected epoch {expected}, key is absent")
            current, compare = 0, Compare(self.epoch_key, 0)
        else:
            current = self._epoch_value(item)
            if expected is not None and current != expected:
                raise EpochConflict(self.epoch_key, f"expected epoch {expected}, found {current}")
            compare = Compare(self.epoch_key, item.mod_revision)
        if current >= MAX_CLUSTER_EPOCH:
            raise ConfigError(
                f"the cluster epoch is {current}, the maximum (2**63 - 1): it cannot advance; "
                "an epoch this high was set by hand, not by l0gc's ticker"
            )
        advanced = current + 1
        write = Put(self.epoch_key, str(advanced).encode())
        if not (await self._kv.txn([compare, *guard], [write])).succeeded:
            raise EpochConflict(self.epoch_key, f"changed while advancing from {current}")
        _log.info("watermark.epoch_advanced", namespace=self.namespace, epoch=advanced)
        return advanced

    # -- registry ---------------------------------------------------------------------

    async def register_partition(self, partition: str) -> PartitionRecord:
        """Create the record (M(p) = epoch - 1) if absent; return the stored record."""
        key = self.partition_key(partition)
        for _ in range(_CAS_ATTEMPTS):
            existing = await self._kv.get(key)
            if existing is not None:
                return PartitionRecord.decode(existing.value, partition=partition)
            validate_new_partition(partition)  # only a new name: an old record stays usable
            epoch_item = await self._kv.get(self.epoch_key)
            if epoch_item is None:
                await self.init_cluster_epoch()
                continue
            epoch = self._epoch_value(epoch_item)
            record = PartitionRecord(
                partition=partition,
                watermark=epoch - 1,
                created_epoch=epoch,
                updated_at=self._wall_clock(),
                sealed_owner_epoch=0,  # registered before any write: the log is empty
            )
            guards = [Compare(key, 0), Compare(self.epoch_key, epoch_item.mod_revision)]
            if (await self._kv.txn(guards, [Put(key, record.encode())])).succeeded:
                _log.info("watermark.partition_registered", partition=partition, epoch=epoch)
                return record
        raise EpochConflict(key, f"registration raced with concurrent writes {_CAS_ATTEMPTS} times")

    async def deregister_partition(
        self, partition: str, *, expected: KeyValue | None = None
    ) -> bool:
        """Delete the partition's record; False when it was not registered. With
        `expected`, only if the record is still that one (else EpochConflict)."""
        key = self.partition_key(partition)
        for _ in range(_CAS_ATTEMPTS):
            existing = await self._kv.get(key) if expected is None else expected
            if existing is None:
                return False
            if (await self._kv.txn([Compare(key, existing.mod_revision)], [Delete(key)])).succeeded:
                _log.info("watermark.partition_deregistered", partition=partition)
                return True
            if expected is not None:
                raise EpochConflict(key, "the record changed since it was read: run it again")
        raise EpochConflict(key, f"record kept changing during deletion ({_CAS_ATTEMPTS} tries)")

    async def deregister_raw(self, name: bytes) -> bool:
        """Delete the record whose key is exactly `{ns}/partitions/` + `name` (bytes that
        need not be a valid partition name: a record written by hand, which `gcd status`
        names in hex); False when there is none."""
        if not name:
            raise ConfigError("give the name's bytes in hex, e.g. 6f72646572732f30")
        key = self.partitions_prefix + name.decode("utf-8", "surrogateescape")
        existing = await self._kv.get(key)
        if existing is None:
            return False
        if not (await self._kv.txn([Compare(key, existing.mod_revision)], [Delete(key)])).succeeded:
            raise EpochConflict(key, "the record changed since it was read: run it again")
        _log.info("watermark.partition_deregistered", partition=repr(name))
        return True

    async def get_partition(self, partition: str) -> PartitionRecord | None:
        """The stored record, None when not registered; InvalidRecord when malformed."""
        item = await self._kv.get(self.partition_key(partition))
        return None if item is None else PartitionRecord.decode(item.value, partition=partition)

    async def read_partitions(
        self, partitions: Sequence[str]
    ) -> dict[str, PartitionRecord | InvalidRecord | None]:
        """The current records of `partitions` (None: not registered; InvalidRecord: does
        not decode), read as a publish reads them (gets, or one range read for many)."""
        found = await self._read_records(partitions)
        records: dict[str, PartitionRecord | InvalidRecord | None] = {}
        for name, item in found.items():
            if item is None:
                records[name] = None
                continue
            try:
                records[name] = PartitionRecord.decode(item.value, partition=name)
            except InvalidRecord as exc:
                records[name] = exc
        return records

    async def watch_partitions(self) -> PrefixWatch | None:
        """A watch of every partition record from now on; None if the KV cannot watch."""
        kv = self._kv
        if not isinstance(kv, Watchable):
            return None
        revision = (await kv.range_prefix(self.epoch_key)).revision
        return await kv.watch_prefix(self.partitions_prefix, revision + 1)

    async def list_partitions(self) -> dict[str, PartitionRecord | InvalidRecord]:
        """Every registered partition's record, or the InvalidRecord explaining why not."""
        result = await self._kv.range_prefix(self.partitions_prefix)
        records: dict[str, PartitionRecord | InvalidRecord] = {}
        for item in result.items:
            name = item.key[len(self.partitions_prefix) :]
            try:
                records[name] = PartitionRecord.decode(item.value, partition=name)
            except InvalidRecord as exc:
                records[name] = exc
        return records

    async def acquire_ownership(self, partition: str, owner: str) -> PartitionRecord:
        """Make `owner` the partition's owner with owner_epoch + 1; the old owner is stale."""
        if not owner or len(owner) > MAX_PARTITION_NAME or not owner.isprintable():
            raise ConfigError(f"owner id {owner!r} must be 1-{MAX_PARTITION_NAME} printable chars")
        key = self.partition_key(partition)
        for _ in range(_CAS_ATTEMPTS):
            item = await self._kv.get(key)
            if item is None:
                raise PartitionNotRegistered(partition)
            current = PartitionRecord.decode(item.value, partition=partition)
            record = dataclasses.replace(
                current,
                owner=owner,
                owner_epoch=current.owner_epoch + 1,
                updated_at=self._wall_clock(),
            )
            if (
                await self._kv.txn([Compare(key, item.mod_revision)], [Put(key, record.encode())])
            ).succeeded:
                _log.info(
                    "watermark.ownership_acquired",
                    partition=partition,
                    owner=owner,
                    owner_epoch=record.owner_epoch,
                    previous_owner=current.owner,
                )
                return record
        raise EpochConflict(key, f"record kept changing during acquisition ({_CAS_ATTEMPTS} tries)")

    # -- publishing -------------------------------------------------------------------

    async def _read_records(self, partitions: Sequence[str]) -> dict[str, KeyValue | None]:
        if len(partitions) >= _RANGE_READ_MIN:
            result = await self._kv.range_prefix(self.partitions_prefix)
            stored = {item.key: item for item in result.items}
            return {p: stored.get(self.partitions_prefix + p) for p in partitions}
        # Every get runs to its end before an error is raised, so none is left orphaned.
        answers = await asyncio.gather(
            *(self._kv.get(self.partitions_prefix + p) for p in partitions),
            return_exceptions=True,
        )
        items: dict[str, KeyValue | None] = {}
        for partition, answer in zip(partitions, answers, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            items[partition] = answer
        return items

    def _decide(
        self, pub: Publication, item: KeyValue | None
    ) -> tuple[PublishOutcome, PartitionRecord | None]:
        """The outcome if not written, and the record to write when the rules allow it."""
        current: PartitionRecord | None = None
        written = self._written.pop(pub.partition, None)
        if item is not None and written is not None and written[0] == item.value:
            current = written[1]
        elif item is not None:
            try:
                current = PartitionRecord.decode(item.value, partition=pub.partition)
            except InvalidRecord as exc:
                outcome = PublishOutcome(pub.partition, PublishStatus.MALFORMED, None, str(exc))
                return outcome, None
        status = decide_publication(pub, current)
        outcome = PublishOutcome(pub.partition, status, current)
        if status is PublishStatus.REFUSED_LOWER:
            assert current is not None
            _log.warning(
                "watermark.publish_refused_lower",
                partition=pub.partition,
                attempted=pub.watermark,
                current=current.watermark,
                owner=pub.owner,
            )
        elif status is PublishStatus.STALE_OWNER:
            assert current is not None
            _log.warning(
                "watermark.publish_stale_owner",
                partition=pub.partition,
                owner=pub.owner,
                owner_epoch=pub.owner_epoch,
                current_owner=current.owner,
                current_owner_epoch=current.owner_epoch,
            )
        if status is not PublishStatus.OK:
            return outcome, None
        assert current is not None
        now = self._wall_clock()
        record = dataclasses.replace(
            current,
            watermark=pub.watermark,
            window=pub.window,
            tracker=pub.tracker,
            references=pub.references,
            updated_at=now,
            sealed_owner_epoch=pub.owner_epoch if pub.sealed else None,
            waiting=_waiting(pub.waiting, current.waiting, now),
        )
        return outcome, record

    async def publish(self, pubs: Sequence[Publication]) -> list[PublishOutcome]:
        """Apply the publish rules to each publication; outcomes in the same order.

        Allowed writes go out in transactions of up to PUBLISH_BATCH records, each
        guarded by its record's mod_revision. A batch that loses a race is re-read and
        re-decided, up to a few times (then EpochConflict). Batches already written stay
        written if a later one fails.
        """
        names = [validate_partition(pub.partition) for pub in pubs]
        if len(set(names)) != len(names):
            dupes = sorted({name for name in names if names.count(name) > 1})
            raise ConfigError(f"publish got partitions {dupes[:5]} more than once; pass each once")
        outcomes: dict[str, PublishOutcome] = {}
        pending = list(pubs)
        for _ in range(_CAS_ATTEMPTS):
            current = await self._read_records([pub.partition for pub in pending])
            writes: list[tuple[KeyValue, PartitionRecord, bytes]] = []
            for pub in pending:
                item = current[pub.partition]
                outcome, record = self._decide(pub, item)
                if record is None:
                    outcomes[pub.partition] = outcome
                else:
                    assert item is not None
                    writes.append((item, record, record.encode()))
            lost: set[str] = set()
            for batch in _batches(writes):
                compares = [Compare(item.key, item.mod_revision) for item, _, _ in batch]
                puts = [Put(item.key, raw) for item, _, raw in batch]
                if (await self._kv.txn(compares, puts)).succeeded:
                    for _, record, raw in batch:
                        outcomes[record.partition] = PublishOutcome(
                            record.partition, PublishStatus.OK, record
                        )
                        self._written[record.partition] = (raw, record)
                else:
                    lost.update(record.partition for _, record, _ in batch)
            if not lost:
                return [outcomes[pub.partition] for pub in pubs]
            pending = [pub for pub in pending if pub.partition in lost]
        raise EpochConflict(
            self.partitions_prefix,
            f"records of {len(pending)} partitions (e.g. {pending[0].partition!r}) kept "
            f"changing during publish ({_CAS_ATTEMPTS} tries)",
        )

    async def publish_one(self, pub: Publication) -> PartitionRecord:
        """Publish one partition; raise instead of returning a refusal."""
        outcome = (await self.publish([pub]))[0]
        record = outcome.record
        if outcome.status is PublishStatus.OK:
            assert record is not None
            return record
        if outcome.status is PublishStatus.MISSING:
            raise PartitionNotRegistered(pub.partition)
        if outcome.status is PublishStatus.MALFORMED:
            raise InvalidRecord(outcome.detail)
        assert record is not None
        if outcome.status is PublishStatus.STALE_OWNER:
            raise StaleOwner(pub.partition, pub.owner_epoch, record.owner_epoch)
        raise WatermarkRegression(pub.partition, pub.watermark, record.watermark)

    # -- sweeper view and pause -------------------------------------------------------

    @property
    def kv(self) -> KV:
        """The KV this store reads and writes (`l0gc.etcd.follow` watches it)."""
        return self._kv

    async def read_gc_view(self, *, revision: int = 0) -> GcView:
        """Epoch, partition records and pause marker from ONE read at one revision (the
        current one, or `revision` on a KV that keeps history: etcd until compaction)."""
        prefix = self.namespace + "/"
        if revision:
            result = await self._kv.range_prefix(prefix, revision=revision)
        else:
            result = await self._kv.range_prefix(prefix)
        epoch_raw: bytes | None = None
        binding_raw: bytes | None = None
        partitions: dict[str, bytes] = {}
        sweepers: dict[str, bytes] = {}
        paused_reason: str | None = None
        for item in result.items:
            if item.key == self.epoch_key:
                epoch_raw = item.value
            elif item.key.startswith(self.partitions_prefix):
                partitions[item.key[len(self.partitions_prefix) :]] = item.value
            elif item.key == self.paused_key:
                paused_reason = pause_reason(item.value)
            elif item.key == self.binding_key:
                binding_raw = item.value
            elif item.key.startswith(self.sweepers_prefix):
                sweepers[item.key[len(self.sweepers_prefix) :]] = item.value
        return GcView(
            revision=result.revision,
            cluster_epoch_raw=epoch_raw,
            partitions=partitions,
            paused=paused_reason is not None,
            paused_reason=paused_reason,
            binding_raw=binding_raw,
            cluster_id=cluster_id_text(result.cluster_id),
            sweepers=sweepers,
        )

    async def read_gc_into(self, fold: RangeFold, *, revision: int = 0) -> None:
        """`read_gc_view`'s one read at one revision, handed to `fold` page by page
        (`l0gc.contract.kv.FoldReadable`) instead of held whole: a million partition
        records are never in memory at once. A KV that cannot fold is read whole."""
        prefix = self.namespace + "/"
        if hasattr(self._kv, "range_fold"):
            await self._kv.range_fold(prefix, fold, revision=revision)
            return
        if revision:
            result = await self._kv.range_prefix(prefix, revision=revision)
        else:
            result = await self._kv.range_prefix(prefix)
        fold.start(result.revision, result.cluster_id)
        fold.add((item.key, item.value) for item in result.items)

    async def read_small_keys(self, *, revision: int) -> list[tuple[str, bytes]]:
        """The namespace's keys a sweeper reads besides the partition records (cluster
        epoch, pause marker, binding, sweeper announcements) at `revision`, as
        (key, value) pairs: a few small values (`l0gc.etcd.follow`'s quick check)."""
        found: list[tuple[str, bytes]] = []
        for key in (self.epoch_key, self.paused_key, self.binding_key):
            result = await self._kv.range_prefix(key, revision=revision)
            found += [(item.key, item.value) for item in result.items if item.key == key]
        result = await self._kv.range_prefix(self.sweepers_prefix, revision=revision)
        found += [(item.key, item.value) for item in result.items]
        return found

    async def read_safe_epoch(self) -> SafeEpoch:
        """The global safe epoch M (or why it is undefined), from one revision."""
        return compute_safe_epoch(await self.read_gc_view())

    async def set_paused(self, reason: str) -> None:
        """Pause every sweeper of this namespace until `clear_paused`."""
        await self._kv.txn([], [Put(self.paused_key, pause_marker(reason, self._wall_clock()))])
        _log.info("gc.paused", namespace=self.namespace, reason=reason)

    async def clear_paused(self) -> bool:
        """Resume sweeping; False when GC was not paused."""
        if await self._kv.get(self.paused_key) is None:
            return False
        await self._kv.txn([], [Delete(self.paused_key)])
        _log.info("gc.resumed", namespace=self.namespace)
        return True

    async def get_paused(self) -> str | None:
        """The pause reason, None when not paused."""
        item = await self._kv.get(self.paused_key)
        return None if item is None else pause_reason(item.value)

    # -- binding and sweeper announcements --------------------------------------------

    async def cluster_id(self) -> str | None:
        """The id of the etcd cluster behind this store (None when it cannot tell)."""
        return cluster_id_text((await self._kv.range_prefix(self.binding_key)).cluster_id)

    async def get_binding(self) -> tuple[bytes | None, int]:
        """The raw `{ns}/binding` value (None: unbound) and its mod_revision (0: absent)."""
        item = await self._kv.get(self.binding_key)
        return (None, 0) if item is None else (item.value, item.mod_revision)

    async def put_binding(self, raw: bytes, *, expected_revision: int) -> bool:
        """Write the binding iff its mod_revision is still `expected_revision` (0: absent)."""
        result = await self._kv.txn(
            [Compare(self.binding_key, expected_revision)], [Put(self.binding_key, raw)]
        )
        return result.succeeded

    async def delete_binding(self, *, expected_revision: int) -> bool:
        """Remove the binding iff it is unchanged since it was read."""
        result = await self._kv.txn(
            [Compare(self.binding_key, expected_revision)], [Delete(self.binding_key)]
        )
        return result.succeeded

    async def announce_sweeper(self, sweeper_id: str, raw: bytes, lease: int) -> None:
        """Write a running sweeper's announcement, bound to its lease."""
        key = self.sweepers_prefix + validate_partition(sweeper_id)
        await self._kv.txn([], [Put(key, raw, lease)])


def _batches(
    writes: Sequence[tuple[KeyValue, PartitionRecord, bytes]],
) -> Iterator[Sequence[tuple[KeyValue, PartitionRecord, bytes]]]:
    """Split writes into transactions of <= PUBLISH_BATCH records and ~1 MiB."""
    start, size = 0, 0
    for index, (_, _, raw) in enumerate(writes):
        if index > start and (
            index - start >= PUBLISH_BATCH or size + len(raw) > _PUBLISH_BATCH_BYTES
        ):
            yield writes[start:index]
            start, size = index, 0
        size += len(raw)
    if start < len(writes):
        yield writes[start:]


def _waiting(
    wanted: dict[str, Any] | None, stored: dict[str, Any] | None, now: float
) -> dict[str, Any] | None:
    """The record's `waiting`: the owner's reason, since when it was first stored."""
    if wanted is None:
        return None
    same = stored is not None and stored.get("on") == wanted.get("on") and "since" in stored
    return {**wanted, "since": stored["since"] if same and stored else now}
