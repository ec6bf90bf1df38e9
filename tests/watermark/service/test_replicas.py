"""Replicas sharing partitions through leases (`watermark.service.replicas`) on an in-memory etcd
with a hand-moved clock: one owner per partition, failover after the lease, sealed
handovers, a lapsed lease refusing fences, hostile records, and the HTTP redirects."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
from yarl import URL

from l0gc.auth import parse_token_file
from l0gc.contract.kv import Delete, Put
from l0gc.contract.members import ClaimRecord
from l0gc.errors import NoOwner, PartitionNotHosted
from l0gc.etcd.memory import MemoryKV
from l0lab.testing.local_servers import free_port
from tests.publishing import NS, HandClock, Publishing, api_on_loopback, new_publishing
from tests.waiting import wait_until
from watermark.api.http_api import create_app
from watermark.core.assignment import Route
from watermark.service.replicas import ReplicaSet, ReplicaSettings

PARTITIONS = tuple(f"orders/{n}" for n in range(24))
TTL = 5
WAIT_S = 60.0
"""The real-time waits (a request for a moving partition, a drain, a leave): a wait
ends when its condition holds, so only a test that expects one to run out sets it
shorter. A short one would race the test's own steps on a loaded machine."""


class Group:
    """Replicas on one MemoryKV, each with its own publisher, all on one hand clock."""

    def __init__(self, world: Publishing, clock: HandClock, kv: MemoryKV) -> None:
        self.world, self.clock, self.kv = world, clock, kv
        self.store = world.store
        self.replicas: dict[str, ReplicaSet] = {}

    @classmethod
    async def made(cls) -> Group:
        """No replica yet; the cluster epoch 5 and every partition registered."""
        clock = HandClock()
        kv = MemoryKV(now=clock)
        return cls(await new_publishing(kv, registered=PARTITIONS, clock=clock), clock, kv)

    def add(self, member_id: str, address: str = "", **settings: Any) -> ReplicaSet:
        """A replica (not joined yet) at `address` (default http://ID.test:8080)."""
        publisher = self.world.publisher(member_id, drain_timeout_s=WAIT_S)
        options: dict[str, Any] = {
            "lease_ttl_s": TTL,
            "route_wait_s": WAIT_S,
            "leave_wait_s": WAIT_S,
        }
        options.update(settings)
        replica = ReplicaSet(
            self.store,
            self.kv,
            publisher,
            ReplicaSettings(
                member_id, address or f"http://{member_id}.test:8080", PARTITIONS, **options
            ),
            clock=self.clock,
        )
        self.replicas[member_id] = replica
        return replica

    async def rounds(self, *names: str, count: int = 3) -> None:
        """`count` rounds of each named replica (default all), handovers awaited."""
        for _ in range(count):
            for name in names or tuple(self.replicas):
                replica = self.replicas[name]
                await replica.run_round()
                await replica.wait_handovers()

    async def locate_after_a_round(self, name: str, partition: str) -> Route:
        """Replica `name`'s answer to a request for `partition` that arrives, then sees
        one round of `name` (the view read after it arrived)."""
        replica = self.replicas[name]
        locating = asyncio.create_task(replica.locate(partition))
        await wait_until(lambda: replica._waiters > 0, timeout_s=30, what="the request arriving")
        await self.rounds(name, count=1)
        return await locating

    def owners(self) -> dict[str, list[str]]:
        """partition -> the replicas whose publisher hosts it."""
        found: dict[str, list[str]] = {p: [] for p in PARTITIONS}
        for name, replica in self.replicas.items():
            for partition in replica._publisher.partitions:
                found[partition].append(name)
        return found


@pytest.fixture
async def group() -> Group:
    """Three joined, settled replicas a, b, c."""
    made = await Group.made()
    for name in ("a", "b", "c"):
        await made.add(name).join()
    await made.rounds()
    return made


async def test_each_partition_is_owned_by_exactly_its_assigned_replica(group: Group) -> None:
    """After a few rounds every partition is hosted once, by the rendezvous assignee,
    and claimed in etcd by it."""
    owners = group.owners()
    assert all(len(hosts) == 1 for hosts in owners.values()), owners
    view = group.replicas["a"].view
    assert view is not None
    for partition, hosts in owners.items():
        assert hosts == [view.assignment.owner(partition)]
        assert view.claims[partition].member_id == hosts[0]
    assert {len(r._publisher.partitions) > 3 for r in group.replicas.values()} == {True}
    metrics = group.replicas["a"]._publisher.metrics
    assert metrics.replicas._value.get() == 3
    assert metrics.partitions_unowned._value.get() == 0


async def test_a_dead_replica_is_replaced_after_its_lease_and_its_fences_are_refused(
    group: Group,
) -> None:
    """c stops renewing: until its lease expires nobody takes its partitions; then a and
    b adopt them (log end unknown), and c's publisher, still running, grants no fence
    and publishes nothing."""
    dead = group.replicas.pop("c")
    lost = dead._publisher.partitions
    group.clock.now += TTL - 2  # within the lease: still c's
    for name in ("a", "b"):
        await group.replicas[name].keep_lease()
    await group.rounds()
    assert all(group.owners()[p] == [] for p in lost)
    group.clock.now += 2.5  # c's lease expired in etcd; a and b renewed theirs
    for name in ("a", "b"):
        await group.replicas[name].keep_lease()
    await group.rounds()
    owners = group.owners()
    assert all(len(owners[p]) == 1 for p in PARTITIONS), owners
    with pytest.raises(PartitionNotHosted):
        await dead._publisher.acquire(lost[0], 5)
    assert dead._publisher.partitions == []
    assert await dead._publisher.publish_now() == {}
    adopted = sum(
        r._publisher.metrics.adoptions.labels(log_end="unknown")._value.get()
        for r in group.replicas.values()
    )
    assert adopted == len(lost)
    record = await group.store.get_partition(lost[0])
    assert record is not None
    assert record.owner in ("a", "b")


async def test_leaving_hands_over_sealed_partitions(group: Group) -> None:
    """A leaving replica seals and releases everything; the others adopt it with the
    log end known, and the held fence could still commit during the drain."""
    leaver = group.replicas["b"]
    moving = leaver._publisher.partitions
    baseline = _known_adoptions(group, "a", "c")
    fence = await leaver._publisher.acquire(moving[0], 5)
    leaving = asyncio.create_task(leaver.leave())
    async with asyncio.timeout(30):  # wait for the handover to close the fence, not a delay
        while leaver._publisher.serving(moving[0]):
            await asyncio.sleep(0)
    leaver._publisher.commit(fence, 0)  # the drain lets it finish
    while not leaving.done():
        await group.rounds("a", "c", count=1)
        await asyncio.sleep(0.01)
    await leaving
    owners = group.owners()
    assert all(len(owners[p]) == 1 and owners[p][0] != "b" for p in PARTITIONS), owners
    sealed = leaver._publisher.metrics.handovers.labels(outcome="sealed")._value.get()
    assert sealed == len(moving)
    assert _known_adoptions(group, "a", "c") - baseline == len(moving)
    new_owner = group.replicas[owners[moving[0]][0]]._publisher
    assert new_owner.state(moving[0])["last_applied_offset"] == 0


def _known_adoptions(group: Group, *names: str) -> float:
    counters = (group.replicas[n]._publisher.metrics.adoptions for n in names)
    return sum(counter.labels(log_end="known")._value.get() for counter in counters)


async def test_a_joining_replica_takes_only_its_share(group: Group) -> None:
    """A 4th replica gets the partitions rendezvous gives it; nothing else moves."""
    before = {p: hosts[0] for p, hosts in group.owners().items()}
    await group.add("d").join()
    await group.rounds(count=4)
    after = {p: hosts[0] for p, hosts in group.owners().items()}
    moved = {p for p in PARTITIONS if before[p] != after[p]}
    assert moved
    assert {after[p] for p in moved} == {"d"}
    assert set(group.replicas["d"]._publisher.partitions) == moved


async def test_a_moving_partition_is_served_by_its_holder_through_the_grace() -> None:
    """With a 2 s handover grace, the partitions a joining d takes stay with their
    holders (served there; d holds requests for them) until 2 s after the holders first
    saw the move; a move undone within the grace (e joins and leaves) hands nothing over.
    Where the other replicas send such requests is `route`'s, in test_assignment."""
    made = await Group.made()
    for name in ("a", "b", "c"):
        await made.add(name, handover_grace_s=2.0).join()
    await made.rounds()
    before = {p: hosts[0] for p, hosts in made.owners().items()}
    # d's requests wait 1 s (a round of d, ~10 ms, must come first), then NoOwner.
    await made.add("d", handover_grace_s=2.0, route_wait_s=1.0).join()
    await made.rounds()
    assert {p: hosts[0] for p, hosts in made.owners().items()} == before
    view = made.replicas["a"].view
    assert view is not None
    moving = [p for p in PARTITIONS if view.assignment.owner(p) == "d"]
    assert moving
    holder = made.replicas[before[moving[0]]]
    assert holder._publisher.serving(moving[0])
    with pytest.raises(NoOwner, match=f"handed over by replica {before[moving[0]]} to this"):
        await made.locate_after_a_round("d", moving[0])  # held (1 s), not redirected
    made.clock.now += 1.9
    await made.rounds()
    assert made.replicas["d"]._publisher.partitions == []
    made.clock.now += 0.2
    for name in made.replicas:
        await made.replicas[name].keep_lease()
    await made.rounds(count=4)
    after = {p: hosts[0] for p, hosts in made.owners().items()}
    assert {p for p in PARTITIONS if after[p] != before[p]} == set(moving)
    assert set(made.replicas["d"]._publisher.partitions) == set(moving)

    handed = sum(_handovers(made, n) for n in made.replicas)
    e = made.add("e", handover_grace_s=2.0)
    await e.join()
    await made.rounds("a", "b", "c", "d", count=2)
    assert any(r._moving_since for r in made.replicas.values()), "e takes nothing: rename"
    await e.leave()
    made.replicas.pop("e")
    made.clock.now += 2.5
    for name in made.replicas:
        await made.replicas[name].keep_lease()
    await made.rounds(count=3)
    assert {p: hosts[0] for p, hosts in made.owners().items()} == after
    assert sum(_handovers(made, n) for n in made.replicas) == handed


def _handovers(group: Group, name: str) -> float:
    counter = group.replicas[name]._publisher.metrics.handovers
    return sum(counter.labels(outcome=o)._value.get() for o in ("sealed", "unsealed"))


async def test_a_lapsed_lease_drops_everything_then_rejoins(group: Group) -> None:
    """No renewal past the lease: the publisher refuses fences at once; the next
    keepalive finds the lease gone, counts it, and the replica re-claims its share."""
    replica = group.replicas["a"]
    mine = replica._publisher.partitions
    group.clock.now += TTL + 1
    for name in ("b", "c"):  # they renew late but in time for the test's purpose
        await group.replicas[name].keep_lease()
    with pytest.raises(PartitionNotHosted):
        await replica._publisher.acquire(mine[0], 5)
    await replica.keep_lease()
    assert replica._publisher.metrics.ownership_lapses._value.get() == 1
    await group.rounds()
    owners = group.owners()
    assert all(len(owners[p]) == 1 for p in PARTITIONS), owners
    assert set(replica._publisher.partitions) == set(mine)


async def test_requests_are_routed_to_the_claim_holder(group: Group) -> None:
    """Hosted here: serve; another's: redirect to it; nobody lists it: unknown."""
    a = group.replicas["a"]
    local = a._publisher.partitions[0]
    remote = group.replicas["b"]._publisher.partitions[0]
    found = await group.locate_after_a_round("a", remote)
    assert found.kind.value == "redirect"
    assert found.member is not None
    assert found.member.address == "http://b.test:8080"
    assert (await a.locate(local)).kind.value == "serve"
    assert (await group.locate_after_a_round("a", "audit")).kind.value == "unknown"


async def test_a_partition_nobody_adopts_times_out_as_no_owner() -> None:
    """Assigned to a member that never adopts: a request waits, then NoOwner."""
    made = await Group.made()
    await made.add("a", route_wait_s=1.0).join()  # a request waits 1 s, then NoOwner
    await made.add("b").join()  # joined, but runs no rounds: never claims
    await made.rounds("a")
    theirs = next(p for p in PARTITIONS if made.replicas["a"].view.assignment.owner(p) == "b")  # type: ignore[union-attr]
    locating = asyncio.create_task(made.replicas["a"].locate(theirs))
    while not locating.done():
        await made.rounds("a", count=1)
        await asyncio.sleep(0.02)
    with pytest.raises(NoOwner, match="replica b is adopting it"):
        await locating
    assert made.replicas["a"]._publisher.metrics.partitions_unowned._value.get() > 0


async def test_hostile_records_are_reported_and_claim_nothing(group: Group) -> None:
    """Garbage under a member key is ignored; garbage under a claim key keeps that
    partition unowned (nobody overwrites it); the rounds go on."""
    a = group.replicas["a"]
    victim = a._publisher.partitions[0]
    await group.kv.txn([], [Put(f"{NS}/replicas/members/x", b"\xff\xfe")])
    await a.run_round()
    assert a.view is not None
    assert any("member record" in problem for problem in a.view.problems)
    a._publisher.drop(victim, "test")
    await group.kv.txn([], [Put(f"{NS}/replicas/claims/{victim}", b'{"not": "a claim"}')])
    await group.rounds()
    assert group.owners()[victim] == []
    assert sum(len(hosts) for hosts in group.owners().values()) == len(PARTITIONS) - 1


async def test_a_claim_without_a_member_record_is_removed_after_the_grace(
    group: Group,
) -> None:
    """Issue 36, item 8: a claim on a live lease by a member id with no member record
    (a replica that left without cleaning up, or not a replica at all) kept its partition
    unowned as long as someone refreshed that lease. It is tolerated for a leaving
    replica's whole handover (`orphan_grace_s`), then removed, and the partition's
    assigned replica adopts it."""
    a = group.replicas["a"]
    victim = a._publisher.partitions[0]
    a._publisher.drop(victim, "test")
    lease = await group.kv.lease_grant(TTL)
    claim = ClaimRecord("ghost", lease).encode()
    key = f"{NS}/replicas/claims/{victim}"
    await group.kv.txn([], [Delete(key)])
    await group.kv.txn([], [Put(key, claim, lease=lease)])
    await group.rounds()
    assert group.owners()[victim] == []  # inside the grace: a handover may be under way
    step = TTL / 2
    waited = 0.0
    while waited <= a.orphan_grace_s:
        group.clock.now += step
        waited += step
        assert await group.kv.lease_refresh(lease)  # someone keeps the ghost's lease alive
        for replica in group.replicas.values():
            await replica.keep_lease()
        await group.rounds(count=1)
    await group.rounds()
    assert group.owners()[victim] == ["a"]


async def test_a_member_id_in_use_on_another_lease_claims_nothing(group: Group) -> None:
    """A second process with the same id waits for the first one's lease."""
    twin = ReplicaSet(
        group.store,
        group.kv,
        group.world.publisher("a"),
        ReplicaSettings("a", "http://twin.test:8080", PARTITIONS, lease_ttl_s=TTL),
        clock=group.clock,
    )
    await twin.join()
    await twin.run_round()
    assert twin._publisher.partitions == []
    assert twin.settled is False


# -- HTTP -------------------------------------------------------------------------------

WRITER = "writer-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
TOKENS = parse_token_file(f"writer:{WRITER}\nadmin:{ADMIN}\n", source="test")


@pytest.fixture
async def served() -> AsyncIterator[tuple[Group, dict[str, str], aiohttp.ClientSession]]:
    """Replicas a and b with their HTTP APIs on loopback (tokens required), settled."""
    made = await Group.made()
    urls: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        for name in ("a", "b"):
            port = free_port()  # the address goes into the member record
            urls[name] = f"http://127.0.0.1:{port}"
            replica = made.add(name, urls[name])
            app = create_app(replica._publisher, tokens=lambda: TOKENS, router=replica)
            await api_on_loopback(stack, app, port=port)
            await replica.join()
        await made.rounds()
        background = asyncio.create_task(_keep_rounds(made))
        stack.callback(background.cancel)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        yield made, urls, session


async def _keep_rounds(made: Group) -> None:
    while True:
        await made.rounds(count=1)
        await asyncio.sleep(0.01)


def _path(partition: str, suffix: str = "") -> str:
    return f"/v1/partitions/{urllib.parse.quote(partition, safe='')}{suffix}"


async def _call(
    session: aiohttp.ClientSession, method: str, url: str, body: Any = None, token: str = WRITER
) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with session.request(
        method, URL(url, encoded=True), json=body, headers=headers, allow_redirects=False
    ) as response:
        return response.status, await response.json(), response.headers


async def test_a_replica_redirects_to_the_owner_after_checking_the_token(
    served: tuple[Group, dict[str, str], aiohttp.ClientSession],
) -> None:
    """Non-owner: 401 without a token (no Location), 307 to the owner's same path with
    one; the owner grants the fence; GET .../owner names the owner from anywhere."""
    made, urls, session = served
    theirs = made.replicas["b"]._publisher.partitions[0]
    url = urls["a"] + _path(theirs, "/fence")
    status, body, headers = await _call(session, "POST", url, {"epoch": 5}, token="")
    assert status == 401
    assert "Location" not in headers
    status, body, headers = await _call(session, "POST", url, {"epoch": 5})
    assert status == 307
    assert body["error"] == "moved"
    assert headers["Location"] == urls["b"] + _path(theirs, "/fence")
    status, granted, _ = await _call(session, "POST", headers["Location"], {"epoch": 5})
    assert status == 200
    assert granted["partition"] == theirs
    for side in ("a", "b"):
        status, owner, _ = await _call(session, "GET", urls[side] + _path(theirs, "/owner"))
        assert status == 200
        assert (owner["owner"], owner["address"], owner["local"]) == ("b", urls["b"], side == "b")
    metrics = made.replicas["a"]._publisher.metrics
    assert metrics.redirects._value.get() == 1


async def test_adopt_among_replicas_never_takes_ownership(
    served: tuple[Group, dict[str, str], aiohttp.ClientSession],
) -> None:
    """adopt on a non-owner is redirected; on the owner it learns the log end and the
    owner_epoch in etcd stays the same."""
    made, urls, session = served
    theirs = made.replicas["b"]._publisher.partitions[0]
    before = await made.store.get_partition(theirs)
    assert before is not None
    url = urls["a"] + _path(theirs, "/adopt")
    status, _, headers = await _call(session, "POST", url, {"log_end_offset": 7}, token=ADMIN)
    assert status == 307
    status, state, _ = await _call(
        session, "POST", headers["Location"], {"log_end_offset": 7}, token=ADMIN
    )
    assert status == 200
    assert state["log_end_known"] is True
    after = await made.store.get_partition(theirs)
    assert after is not None
    assert after.owner_epoch == before.owner_epoch
    status, body, _ = await _call(session, "GET", urls["a"] + _path("audit", "/owner"))
    assert (status, body["error"]) == (404, "not_registered")  # no replica lists it, no record


async def test_a_batch_fence_sends_other_replicas_entries_there(
    served: tuple[Group, dict[str, str], aiohttp.ClientSession],
) -> None:
    """One batch over partitions of both replicas: a's own are granted, b's answer 307
    with b's address; re-sent to b they are granted there."""
    made, urls, session = served
    mine = made.replicas["a"]._publisher.partitions[0]
    theirs = made.replicas["b"]._publisher.partitions[0]
    entries = [{"partition": mine, "epoch": 5}, {"partition": theirs, "epoch": 5}]
    status, doc, _ = await _call(session, "POST", urls["a"] + "/v1/fences", {"fences": entries})
    assert status == 200
    granted, moved = doc["results"]
    assert (granted["status"], granted["partition"]) == (200, mine)
    assert (moved["status"], moved["error"], moved["address"]) == (307, "moved", urls["b"])
    status, doc, _ = await _call(
        session, "POST", moved["address"] + "/v1/fences", {"fences": [entries[1]]}
    )
    assert doc["results"][0]["status"] == 200
    commit = {"commits": [{"token": doc["results"][0]["token"], "offset": 0}]}
    status, doc, _ = await _call(session, "POST", urls["b"] + "/v1/commits", commit)
    assert doc["results"] == [{"status": 200, "partition": theirs, "offset": 0, "repeat": False}]
