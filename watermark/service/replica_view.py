"""What a replica sees of the others: ``{ns}/replicas/`` read into a `View`.

Design notes: docs/internals/publisher.md, `watermark.service.replica_view`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from l0gc.contract.kv import KV, Compare, Delete, KeyValue
from l0gc.contract.members import ClaimRecord, MemberRecord, View, decode_claim, decode_member
from l0gc.errors import InvalidRecord
from watermark.core.fleet import FleetUrls
from watermark.service.metrics import WatermarkMetrics

__all__ = ["ViewReader"]

_log = structlog.get_logger("watermark.replicas")


class ViewReader:
    """Reads the replicas' records of `namespace` for one replica (see the module
    docstring); `partitions` are that replica's, `fleet` whom it counts."""

    def __init__(
        self,
        kv: KV,
        namespace: str,
        partitions: frozenset[str],
        fleet: FleetUrls,
        *,
        orphan_grace_s: float,
        metrics: WatermarkMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kv = kv
        self.prefix = f"{namespace}/replicas/"
        self.members_prefix = self.prefix + "members/"
        self.claims_prefix = self.prefix + "claims/"
        self._partitions = partitions
        self.fleet = fleet
        self.orphan_grace_s = orphan_grace_s
        self._metrics = metrics
        self._clock = clock
        self.foreign: dict[str, int] = {}  # partition -> revision: claims to remove
        """Claims of ignored members and orphaned claims, by partition (their revision)."""
        self.claim_revisions: dict[str, int] = {}
        """Every other claim of the last view: partition -> its revision."""
        self._orphan_since: dict[str, tuple[int, float]] = {}  # partition -> (revision, seen)
        self._decoded: dict[tuple[str, int], MemberRecord | ClaimRecord | InvalidRecord] = {}
        self._reported: set[tuple[str, int]] = set()
        self._assignment_key: tuple[tuple[str, int, str], ...] = ()

    async def read(self, previous: View | None) -> View:
        """The view now (the assignment of `previous` kept while the members are the same)."""
        result = await self._kv.range_prefix(self.prefix)
        members: dict[str, MemberRecord] = {}
        claims: dict[str, ClaimRecord] = {}
        problems: list[str] = []
        revisions: dict[str, int] = {}
        ignored: set[str] = set()
        for item in result.items:
            decoded = self._decode(item)
            if isinstance(decoded, InvalidRecord):
                problems.append(str(decoded))
                if (item.key, item.mod_revision) not in self._reported:
                    self._reported.add((item.key, item.mod_revision))
                    _log.error("watermark.replica_record_invalid", key=item.key, error=str(decoded))
            elif isinstance(decoded, MemberRecord):
                if self.fleet.allows(decoded.address):
                    members[decoded.member_id] = decoded
                    continue
                ignored.add(decoded.member_id)
                if (item.key, item.mod_revision) not in self._reported:
                    self._reported.add((item.key, item.mod_revision))
                    self._metrics.members_ignored.inc()
                    _log.error(
                        "watermark.replica_member_ignored",
                        key=item.key,
                        address=decoded.address[:100],
                        fleet=self.fleet.spec,
                        detail="its address is outside --fleet-urls: no redirect goes there "
                        "and no partition is assigned to it; its claims are removed",
                    )
            else:
                partition = item.key[len(self.claims_prefix) :]
                claims[partition] = decoded
                revisions[partition] = item.mod_revision
        self.foreign = {
            p: revisions.pop(p)
            for p, c in list(claims.items())
            if c.member_id in ignored or self._orphaned(p, c, revisions[p], members)
        }
        for partition in self.foreign:
            del claims[partition]
        self.claim_revisions = revisions
        view = View(result.revision, members, claims, tuple(problems))
        key = tuple(sorted((m.member_id, m.lease, m.spec) for m in members.values()))
        if previous is not None and key == self._assignment_key:
            view = view.with_assignment(previous.assignment)
        self._assignment_key = key
        return view

    def _orphaned(
        self,
        partition: str,
        claim: ClaimRecord,
        revision: int,
        members: dict[str, MemberRecord],
    ) -> bool:
        """True for a claim whose member has had no member record for longer than a
        leaving replica's whole handover takes (`orphan_grace_s`): its holder is gone or
        was never a replica, and keeping it would strand the partition until its lease
        ends (a lease someone keeps alive: forever)."""
        if claim.member_id in members:
            self._orphan_since.pop(partition, None)
            return False
        seen = self._orphan_since.get(partition)
        now = self._clock()
        if seen is None or seen[0] != revision:
            self._orphan_since[partition] = (revision, now)
            return False
        if now - seen[1] < self.orphan_grace_s:
            return False
        if (self.claims_prefix + partition, revision) not in self._reported:
            self._reported.add((self.claims_prefix + partition, revision))
            _log.warning(
                "watermark.replica_orphan_claim",
                partition=partition,
                member=claim.member_id[:100],
                seconds=round(now - seen[1], 1),
            )
        return True

    async def remove_foreign_claims(self) -> None:
        """Delete the claims of ignored members on partitions of ours (each only if
        unchanged), so that the replica the assignment picks can claim them."""
        for partition, revision in sorted(self.foreign.items()):
            if partition not in self._partitions:
                continue
            key = self.claims_prefix + partition
            if (await self._kv.txn([Compare(key, revision)], [Delete(key)])).succeeded:
                _log.warning("watermark.replica_foreign_claim_removed", partition=partition)

    def _decode(self, item: KeyValue) -> MemberRecord | ClaimRecord | InvalidRecord:
        cache_key = (item.key, item.mod_revision)
        known = self._decoded.get(cache_key)
        if known is not None:
            return known
        decoded: MemberRecord | ClaimRecord | InvalidRecord
        try:
            if item.key.startswith(self.members_prefix):
                key_id = item.key[len(self.members_prefix) :]
                decoded = decode_member(item.value, key_id=key_id, lease=item.lease)
            elif item.key.startswith(self.claims_prefix):
                partition = item.key[len(self.claims_prefix) :]
                decoded = decode_claim(item.value, partition=partition, lease=item.lease)
            else:
                decoded = InvalidRecord(f"unexpected key {item.key!r:.80} under {self.prefix}")
        except InvalidRecord as exc:
            decoded = exc
        if len(self._decoded) > 4 * (len(self._partitions) + 64):
            self._decoded.clear()
        self._decoded[cache_key] = decoded
        return decoded
