"""The publisher fleet as `gcd status` shows it: live replicas, the ticker leader, owners now.

Design notes: docs/internals/status.md, `gcd.status.fleet`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from l0gc.contract.kv import KeyValue
from l0gc.contract.members import ClaimRecord, MemberRecord, View, decode_claim, decode_member
from l0gc.errors import InvalidRecord, L0gcError

__all__ = ["FleetStatus", "LeaseReader", "ReplicaStatus", "build_fleet", "read_fleet"]

_log = structlog.get_logger("gcd.status")


class LeaseReader(Protocol):
    """What `read_fleet` needs from the etcd client."""

    async def range_prefix(self, prefix: str, *, revision: int = 0) -> Any:
        """Keys under `prefix` at `revision` (0: now)."""
        ...

    async def lease_time_to_live(self, lease_id: int) -> int | None:
        """Seconds left on the lease; None when it is gone."""
        ...


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One live replica."""

    member: str
    address: str
    lease_remaining_s: int | None
    configured: str
    """Its `--partitions` (what it may serve)."""
    holds: tuple[str, ...]
    """Partitions it holds a live claim on."""
    handing_over: tuple[str, ...]
    """Claims it holds for partitions assigned to another member now."""


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """The publisher fleet at one etcd revision."""

    replicas: tuple[ReplicaStatus, ...] = ()
    ticker_leader: str | None = None
    ticker_lease_remaining_s: int | None = None
    unclaimed: tuple[str, ...] = ()
    """Partitions some member lists but nobody holds a live claim on (moving, or waiting)."""
    problems: tuple[str, ...] = ()
    owner_now: Mapping[str, str] = field(default_factory=dict)
    """partition -> the live member holding its claim."""

    @property
    def replicated(self) -> bool:
        """True when replicas announce themselves in this namespace."""
        return bool(self.replicas or self.owner_now or self.problems)

    def to_dict(self) -> dict[str, Any]:
        """The `fleet` part of `gcd status --json`."""
        return {
            "replicas": [
                {
                    "member": r.member,
                    "address": r.address,
                    "lease_remaining_s": r.lease_remaining_s,
                    "partitions": r.configured,
                    "holds": len(r.holds),
                    "handing_over": list(r.handing_over),
                }
                for r in self.replicas
            ],
            "ticker_leader": self.ticker_leader,
            "ticker_lease_remaining_s": self.ticker_lease_remaining_s,
            "unclaimed": list(self.unclaimed),
            "problems": list(self.problems),
        }


def build_fleet(
    items: Sequence[KeyValue], namespace: str, leases: Mapping[int, int | None]
) -> FleetStatus:
    """The fleet from the keys under ``{ns}/replicas/`` and ``{ns}/leader/`` (pure);
    `leases` maps a lease id to the seconds it has left (None: gone; a lease missing
    from it could not be asked about, and its holder is taken as alive)."""
    members_prefix = f"{namespace}/replicas/members/"
    claims_prefix = f"{namespace}/replicas/claims/"
    leader_key = f"{namespace}/leader/ticker"
    members: dict[str, MemberRecord] = {}
    claims: dict[str, ClaimRecord] = {}
    problems: list[str] = []
    leader: KeyValue | None = None
    for item in items:
        try:
            if item.key.startswith(members_prefix):
                key_id = item.key[len(members_prefix) :]
                record = decode_member(item.value, key_id=key_id, lease=item.lease)
                members[record.member_id] = record
            elif item.key.startswith(claims_prefix):
                partition = item.key[len(claims_prefix) :]
                claims[partition] = decode_claim(item.value, partition=partition, lease=item.lease)
            elif item.key == leader_key:
                leader = item
        except InvalidRecord as exc:
            problems.append(str(exc))

    def alive(lease: int) -> bool:  # a lease etcd would not tell about counts as alive
        return lease not in leases or leases[lease] is not None

    live = {m: r for m, r in members.items() if alive(r.lease)}
    view = View(0, live, claims)
    owner_now = {p: c.member_id for p, c in claims.items() if view.is_live(c) is not None}
    replicas = []
    for member_id in sorted(live):
        record = live[member_id]
        held = sorted(p for p, m in owner_now.items() if m == member_id)
        moving = tuple(p for p in held if view.assignment.owner(p) not in (None, member_id))
        replicas.append(
            ReplicaStatus(
                member_id,
                record.address,
                leases.get(record.lease),
                record.spec,
                tuple(held),
                moving,
            )
        )
    listed = set().union(*(r.partitions for r in live.values())) if live else set()
    unclaimed = tuple(sorted(p for p in listed if p not in owner_now))
    leader_name = None
    leader_ttl = None
    if leader is not None and alive(leader.lease):
        leader_name = leader.value.decode("utf-8", errors="replace")
        leader_ttl = leases.get(leader.lease)
    return FleetStatus(
        tuple(replicas), leader_name, leader_ttl, unclaimed, tuple(problems), owner_now
    )


async def read_fleet(kv: LeaseReader, namespace: str, revision: int) -> FleetStatus:
    """Read the replicas and the ticker leader at `revision`, and their leases now."""
    items: list[KeyValue] = []
    for prefix in (f"{namespace}/replicas/", f"{namespace}/leader/"):
        items.extend((await kv.range_prefix(prefix, revision=revision)).items)
    leases: dict[int, int | None] = {}
    for lease in sorted({item.lease for item in items if item.lease}):
        try:
            leases[lease] = await kv.lease_time_to_live(lease)
        except L0gcError as exc:  # e.g. an etcd role that may not ask: shown as unknown
            _log.debug("status.lease_unknown", lease=lease, error=str(exc))
    return build_fleet(items, namespace, leases)
