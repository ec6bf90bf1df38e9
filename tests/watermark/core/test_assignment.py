"""Rendezvous assignment, member and claim records, the round plan and request routes
(`watermark.core.assignment`, pure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from l0gc.contract.members import (
    Assignment,
    ClaimRecord,
    Identity,
    MemberRecord,
    View,
    check_member_id,
    compact_partitions,
    decode_claim,
    decode_member,
    validate_address,
)
from l0gc.contract.namespace import expand_partitions
from l0gc.errors import ConfigError, InvalidRecord
from watermark.core.assignment import Route, RouteKind, plan, route

PARTITIONS = frozenset(f"orders/{n}" for n in range(300))


def member(member_id: str, lease: int, partitions: frozenset[str] = PARTITIONS) -> MemberRecord:
    """A live member record listing `partitions`."""
    return MemberRecord(member_id, f"http://{member_id}.example:8080", partitions, lease)


def view_of(*members: MemberRecord, claims: dict[str, ClaimRecord] | None = None) -> View:
    """A view with these members and claims."""
    return View(7, {m.member_id: m for m in members}, claims or {})


def test_assignment_is_the_same_in_every_process() -> None:
    """Another interpreter with another hash seed assigns every partition alike."""
    members = {m: member(m, 1) for m in ("serve-a", "serve-b", "serve-c")}
    here = {p: Assignment(members).owner(p) for p in sorted(PARTITIONS)}
    code = (
        "import json, sys\n"
        "from l0gc.contract.members import Assignment, MemberRecord\n"
        "ps = frozenset(f'orders/{n}' for n in range(300))\n"
        "ids = ('serve-a', 'serve-b', 'serve-c')\n"
        "ms = {m: MemberRecord(m, 'http://x:1', ps, 1) for m in ids}\n"
        "a = Assignment(ms)\n"
        "print(json.dumps({p: a.owner(p) for p in sorted(ps)}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(done.stdout) == here


def test_partitions_are_spread_evenly() -> None:
    """300 partitions over 3 members: each gets 100 +- 25."""
    members = {m: member(m, 1) for m in ("a", "b", "c")}
    counts = Counter(Assignment(members).owner(p) for p in PARTITIONS)
    assert set(counts) == {"a", "b", "c"}
    assert all(75 <= n <= 125 for n in counts.values()), counts


def test_a_joining_member_takes_only_what_it_gets() -> None:
    """A 4th member takes about a quarter; every partition that moves moves to it."""
    three = {m: member(m, 1) for m in ("a", "b", "c")}
    four = {**three, "d": member("d", 2)}
    before, after = Assignment(three), Assignment(four)
    moved = [p for p in PARTITIONS if before.owner(p) != after.owner(p)]
    assert all(after.owner(p) == "d" for p in moved)
    assert 45 <= len(moved) <= 105
    assert sorted(moved) == after.of("d")


def test_a_leaving_member_gives_away_only_its_own() -> None:
    """When a member goes, only its partitions move, spread over the others."""
    three = {m: member(m, 1) for m in ("a", "b", "c")}
    two = {m: three[m] for m in ("a", "c")}
    before, after = Assignment(three), Assignment(two)
    moved = {p for p in PARTITIONS if before.owner(p) != after.owner(p)}
    assert moved == set(before.of("b"))
    assert {after.owner(p) for p in moved} == {"a", "c"}


def test_only_members_that_list_a_partition_get_it() -> None:
    """A member whose --partitions lacks p is never assigned p; nobody listing it: None."""
    half = frozenset(sorted(PARTITIONS)[:150])
    members = {"a": member("a", 1, half), "b": member("b", 1)}
    assignment = Assignment(members)
    assert all(assignment.owner(p) == "b" for p in PARTITIONS - half)
    assert assignment.owner("audit") is None


ME = Identity("a", 10)


def test_plan_claims_what_is_assigned_here_and_unclaimed() -> None:
    """A fresh member claims exactly its share; claimed ones are pending."""
    a, b = member("a", 10), member("b", 20)
    view = view_of(a, b)
    mine = view.assignment.of("a")
    taken = mine[0]
    view = view_of(a, b, claims={taken: ClaimRecord("b", 20)})
    decided = plan(view, ME, partitions=PARTITIONS, hosted=frozenset())
    assert decided.claim == tuple(mine[1:])
    assert decided.pending == (taken,)
    assert decided.adopt == decided.hand_over == decided.unclaim == decided.drop == ()


def test_plan_hands_over_what_moved_and_everything_when_leaving() -> None:
    """Hosted partitions assigned elsewhere are handed over; without a member record
    (leaving), all of them; claims not hosted are given back."""
    a, b = member("a", 10), member("b", 20)
    view = view_of(a, b)
    kept, moved = view.assignment.of("a")[0], view.assignment.of("b")[0]
    stray = view.assignment.of("b")[1]
    claims = {p: ClaimRecord("a", 10) for p in (kept, moved, stray)}
    hosted = frozenset({kept, moved})
    decided = plan(view_of(a, b, claims=claims), ME, partitions=PARTITIONS, hosted=hosted)
    assert decided.hand_over == (moved,)
    assert decided.unclaim == (stray,)
    leaving = plan(view_of(b, claims=claims), ME, partitions=PARTITIONS, hosted=hosted)
    assert leaving.hand_over == tuple(sorted(hosted))
    assert leaving.claim == ()
    busy = plan(view_of(b, claims=claims), ME, partitions=PARTITIONS, hosted=hosted, busy=hosted)
    assert busy.hand_over == ()


def test_plan_drops_a_partition_whose_claim_is_not_its_own() -> None:
    """Hosted without our claim (gone, another member's, or our id on an old lease): drop."""
    a = member("a", 10)
    partitions = sorted(PARTITIONS)[:3]
    claims = {partitions[1]: ClaimRecord("b", 20), partitions[2]: ClaimRecord("a", 9)}
    decided = plan(
        view_of(a, claims=claims), ME, partitions=PARTITIONS, hosted=frozenset(partitions)
    )
    assert decided.drop == tuple(partitions)


def test_plan_adopts_a_claim_it_holds_but_does_not_host() -> None:
    """An adoption that failed after the claim is retried."""
    a = member("a", 10)
    first = min(PARTITIONS)
    decided = plan(
        view_of(a, claims={first: ClaimRecord("a", 10)}),
        ME,
        partitions=PARTITIONS,
        hosted=frozenset(),
    )
    assert decided.adopt == (first,)
    assert first not in decided.claim


def test_plan_of_a_member_on_another_lease_claims_nothing() -> None:
    """Our member id announced on another lease (an older process) is not us."""
    decided = plan(view_of(member("a", 9)), ME, partitions=PARTITIONS, hosted=frozenset())
    assert decided.empty
    assert decided.pending == ()


def test_route_serves_redirects_or_waits() -> None:
    """Hosted: serve; a live holder: redirect to it; a leaving holder or no claim: wait;
    nobody lists it: unknown. Each answer's reason is what the 503 or the log says."""
    a, b = member("a", 10), member("b", 20)
    mine = view_of(a, b).assignment.of("a")
    p = min(set(PARTITIONS) - set(mine))  # assigned to b

    def wait(reason: str) -> Route:
        return Route(RouteKind.WAIT, reason)

    assert route(p, view_of(a, b), ME, serving=True) == Route(RouteKind.SERVE, "hosted here")
    held_by_b = view_of(a, b, claims={p: ClaimRecord("b", 20)})
    assert route(p, held_by_b, ME, serving=False) == Route(
        RouteKind.REDIRECT, "owned by replica b", b
    )
    # Assigned here but b still holds it: b is handing it over to us and would send the
    # request straight back (a 307 ping-pong seen in a rolling restart): wait instead.
    coming = view_of(a, b, claims={mine[0]: ClaimRecord("b", 20)})
    assert route(mine[0], coming, ME, serving=False) == wait(
        "being handed over by replica b to this replica"
    )
    leaving = view_of(a, claims={p: ClaimRecord("b", 20)})
    assert route(p, leaving, ME, serving=False) == wait("being handed over by replica b")
    stale_lease = view_of(a, member("b", 21), claims={p: ClaimRecord("b", 20)})
    assert route(p, stale_lease, ME, serving=False) == wait("being handed over by replica b")
    assert route(p, view_of(a, b), ME, serving=False) == wait("unowned; replica b is adopting it")
    assert route(mine[0], view_of(a, b), ME, serving=False) == wait(
        "unowned; this replica is adopting it"
    )
    own = view_of(a, b, claims={p: ClaimRecord("a", 10)})
    assert route(p, own, ME, serving=False) == wait("being adopted by this replica")
    older_me = view_of(a, b, claims={p: ClaimRecord("a", 9)})  # an older process of ours
    assert route(p, older_me, ME, serving=False) == wait("being handed over by replica a")
    assert route("audit", view_of(a, b), ME, serving=False) == Route(
        RouteKind.UNKNOWN, "no live replica lists it in --partitions"
    )


def test_route_waits_for_the_heir_rather_than_redirect_to_a_holder_handing_over() -> None:
    """b holds a partition that c's joining moved to c: b is about to hand it over and
    would redirect the writer a second time (seen when three replicas start), so this
    replica waits for c's claim; once c holds it, the one redirect goes to c."""
    a, b, c = member("a", 10), member("b", 20), member("c", 30)
    moved = [
        p for p in view_of(a, b).assignment.of("b") if view_of(a, b, c).assignment.owner(p) == "c"
    ]
    assert moved, "no partition of b moves to c: pick other names"
    p = moved[0]
    handing_over = view_of(a, b, c, claims={p: ClaimRecord("b", 20)})
    assert route(p, handing_over, ME, serving=False) == Route(
        RouteKind.WAIT, "being handed over by replica b to replica c"
    )
    taken = view_of(a, b, c, claims={p: ClaimRecord("c", 30)})
    assert route(p, taken, ME, serving=False) == Route(RouteKind.REDIRECT, "owned by replica c", c)
    # No heir (no member lists the partition any more): its holder is still the one to ask.
    others = PARTITIONS - {p}
    a_, b_ = member("a", 10, others), member("b", 20, others)
    kept = view_of(a_, b_, claims={p: ClaimRecord("b", 20)})
    assert route(p, kept, ME, serving=False) == Route(RouteKind.REDIRECT, "owned by replica b", b_)
    # Our member id, announced by an older process (another lease), is not us.
    mine = view_of(a, b).assignment.of("a")[0]
    twin = view_of(member("a", 9), b, claims={mine: ClaimRecord("b", 20)})
    assert route(mine, twin, ME, serving=False) == Route(
        RouteKind.WAIT, "being handed over by replica b to replica a"
    )


@pytest.mark.parametrize(
    ("names", "spec"),
    [
        ([f"orders/{n}" for n in range(64)], "orders/0-63"),
        ([f"p/{n:02d}" for n in range(16)], "p/00-15"),
        (["p/08", "p/09", "p/10"], "p/08-10"),
        (["audit"], "audit"),
    ],
)
def test_compact_partitions_writes_ranges(names: list[str], spec: str) -> None:
    """Runs of numbered names become LO-HI ranges, padding kept."""
    assert compact_partitions(names) == spec


_SEGMENT = st.one_of(
    st.integers(0, 130).map(str),
    st.integers(0, 130).map(lambda n: f"{n:03d}"),
    st.sampled_from(["audit", "x", "log"]),
)


@given(
    st.sets(
        st.tuples(st.sampled_from(["orders/", "p/", "", "a/b/", "/"]), _SEGMENT).map("".join),
        min_size=1,
        max_size=60,
    )
)
def test_compact_partitions_round_trips(names: set[str]) -> None:
    """Whatever the names, expanding the compact spec gives exactly them back."""
    assert sorted(expand_partitions(compact_partitions(sorted(names)))) == sorted(names)


@pytest.mark.parametrize(
    "address",
    ["http://10.0.0.5:8080", "https://l0gc-publisher-0.l0gc.svc:8443", "http://[::1]:8080"],
)
def test_plain_addresses_are_accepted(address: str) -> None:
    """http(s)://host[:port] with a name, an IPv4 or an IPv6 address."""
    assert validate_address(address) == address


@pytest.mark.parametrize(
    "address",
    [
        "http://a/b",
        "http://a:0",
        "http://a:99999",
        "ftp://a",
        "http://user@a",
        "http://a\r\nX-Evil: 1",
        "http://a?x=1",
        "http://" + "a" * 300,
    ],
)
def test_other_addresses_are_refused(address: str) -> None:
    """A path, user, query, header injection, bad port or scheme is a ConfigError."""
    with pytest.raises(ConfigError, match="http"):
        validate_address(address)


def test_member_records_round_trip_and_bind_their_lease() -> None:
    """A member record encodes compactly and decodes with the key's lease."""
    record = member("serve-a", 0, frozenset(f"orders/{n}" for n in range(64)))
    raw = record.encode(1795000000.0)
    assert b'"partitions":"orders/0-63"' in raw
    back = decode_member(raw, key_id="serve-a", lease=77)
    assert (back.member_id, back.address, back.partitions, back.lease) == (
        "serve-a",
        record.address,
        record.partitions,
        77,
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"[1]", "not a JSON object"),
        (b'{"version": 2, "member": "a", "address": "http://a:1", "partitions": "p"}', "version"),
        (b'{"version": 1, "member": "b", "address": "http://a:1", "partitions": "p"}', "its key"),
        (b'{"version": 1, "member": "a", "address": "http://a/x", "partitions": "p"}', "URL"),
        (b'{"version": 1, "member": "a", "address": "http://a:1", "partitions": 5}', "str"),
        (b'{"version": 1, "member": "a", "address": "http://a:1", "partitions": "p,p"}', "twice"),
        (
            b'{"version": 1, "member": "a\\u0000", "address": "http://a:1", "partitions": "p"}',
            "printable",
        ),
        (b"\xff", "UTF-8"),
    ],
)
def test_hostile_member_records_are_refused(raw: bytes, problem: str) -> None:
    """Whatever bytes are under a member key, decoding says why it refuses them."""
    with pytest.raises(InvalidRecord, match=problem):
        decode_member(raw, key_id="a", lease=1)


def test_claims_round_trip_and_refuse_garbage() -> None:
    """A claim names its member; its lease comes from the key; garbage is refused."""
    claim = decode_claim(ClaimRecord("serve-a", 0).encode(), partition="p", lease=5)
    assert claim == ClaimRecord("serve-a", 5)
    assert claim.held_by(Identity("serve-a", 5))
    assert not claim.held_by(Identity("serve-a", 6))
    with pytest.raises(InvalidRecord, match="claim"):
        decode_claim(b'{"member": "a"}', partition="p", lease=5)


def test_member_ids_must_be_key_segments() -> None:
    """An owner id with whitespace cannot name a replica."""
    assert check_member_id("pod-1-123") == "pod-1-123"
    with pytest.raises(ConfigError, match="--owner-id"):
        check_member_id("pod 1")
