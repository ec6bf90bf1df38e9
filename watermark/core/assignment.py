"""Which `watermark serve` replica owns which partition: pure decisions, no I/O.

Design notes: docs/internals/publisher.md, `watermark.core.assignment`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from l0gc.contract.members import Identity, MemberRecord, View

__all__ = ["Plan", "Route", "RouteKind", "plan", "route"]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one replica does after reading a view (see the module docstring)."""

    claim: tuple[str, ...] = ()
    adopt: tuple[str, ...] = ()
    hand_over: tuple[str, ...] = ()
    unclaim: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    """Assigned here, but still claimed by another replica (handing it over)."""

    @property
    def empty(self) -> bool:
        """Nothing to do."""
        return not (self.claim or self.adopt or self.hand_over or self.unclaim or self.drop)


def plan(
    view: View,
    me: Identity,
    *,
    partitions: frozenset[str],
    hosted: frozenset[str],
    busy: frozenset[str] = frozenset(),
) -> Plan:
    """Decide what replica `me` does with `view`.

    `partitions`: the ones it may serve (its `--partitions`); `hosted`: the ones its
    publisher hosts now; `busy`: partitions with an action still in flight (left alone).
    A replica without a live member record on its own lease (leaving, or not announced
    yet) claims nothing and hands over everything it hosts.
    """
    mine = {p for p, claim in view.claims.items() if claim.held_by(me)}
    claim: list[str] = []
    adopt: list[str] = []
    hand_over: list[str] = []
    unclaim: list[str] = []
    drop: list[str] = []
    pending: list[str] = []
    for partition in sorted(partitions | hosted | mine):
        if partition in busy:
            continue
        assigned_here = partition in partitions and _assigned_to(view, me, partition)
        held = view.claims.get(partition)
        if partition in hosted:
            if partition not in mine:
                drop.append(partition)
            elif not assigned_here:
                hand_over.append(partition)
        elif partition in mine:
            (adopt if assigned_here else unclaim).append(partition)
        elif assigned_here:
            (claim if held is None else pending).append(partition)
    return Plan(
        tuple(claim), tuple(adopt), tuple(hand_over), tuple(unclaim), tuple(drop), tuple(pending)
    )


def _assigned_to(view: View, me: Identity, partition: str) -> bool:
    """`partition` is assigned to `me`: its member record is live on `me`'s own lease
    (not an older process's) and rendezvous hashing picks it."""
    member = view.members.get(me.member_id)
    active = member is not None and member.lease == me.lease
    return active and view.assignment.owner(partition) == me.member_id


class RouteKind(enum.Enum):
    """How a replica answers a request for a partition."""

    SERVE = "serve"
    """It hosts the partition: answer here."""
    REDIRECT = "redirect"
    """Another live member holds the claim: 307 to it."""
    WAIT = "wait"
    """A move is under way (handover, or adoption here or elsewhere): ask again soon."""
    UNKNOWN = "unknown"
    """No live member lists the partition."""


@dataclass(frozen=True, slots=True)
class Route:
    """The answer of `route`: what to do, the member to redirect to, and why."""

    kind: RouteKind
    reason: str
    member: MemberRecord | None = None


def route(partition: str, view: View, me: Identity, *, serving: bool) -> Route:
    """Where a request for `partition` goes, as replica `me` sees `view`.

    `serving`: this replica hosts the partition and is not handing it over.
    """
    if serving:
        return Route(RouteKind.SERVE, "hosted here")
    held = view.claims.get(partition)
    if held is not None:
        if held.held_by(me):
            return Route(RouteKind.WAIT, "being adopted by this replica")
        holder = view.is_live(held)
        if holder is not None and holder.member_id != me.member_id:
            heir = view.assignment.owner(partition)
            if heir is not None and heir != holder.member_id:
                # The holder is about to hand it over and would redirect the writer again
                # (back here, if this replica is the heir): wait for the heir's claim.
                to = "this replica" if _assigned_to(view, me, partition) else f"replica {heir}"
                return Route(
                    RouteKind.WAIT, f"being handed over by replica {holder.member_id} to {to}"
                )
            return Route(RouteKind.REDIRECT, f"owned by replica {holder.member_id}", holder)
        return Route(RouteKind.WAIT, f"being handed over by replica {held.member_id}")
    target = view.assignment.owner(partition)
    if target is None:
        return Route(RouteKind.UNKNOWN, "no live replica lists it in --partitions")
    if target == me.member_id:
        return Route(RouteKind.WAIT, "unowned; this replica is adopting it")
    return Route(RouteKind.WAIT, f"unowned; replica {target} is adopting it")
