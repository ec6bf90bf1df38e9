"""The liveness key of a non-replicated `serve` (in-memory etcd): one live process per
owner id, who counts as alive, and the take-over rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from l0gc.contract.kv import Put
from l0gc.errors import ConfigError, EtcdUnavailable
from l0gc.etcd.memory import MemoryKV
from watermark.service.liveness import Liveness, take_over_plan

NS = "/l0gc/test"


def test_only_partitions_of_another_live_owner_are_held() -> None:
    owners = {"p/0": None, "p/1": "me", "p/2": "alive", "p/3": "gone"}
    assert take_over_plan(owners, "me", {"alive"}.__contains__) == {"p/2": "alive"}


async def test_one_live_process_per_owner_id_and_a_released_key_frees_it() -> None:
    kv = MemoryKV()
    first = Liveness(kv, NS, "pub-a", 5)
    await first.hold(0.0)
    other = Liveness(kv, NS, "pub-b", 5)
    assert await other.alive(["pub-a", "pub-b"]) == {"pub-a"}
    elsewhere = json.dumps({"host": "elsewhere", "pid": 1}).encode()
    await kv.txn([], [Put(f"{NS}/owners/pub-b", elsewhere)])
    second = Liveness(kv, NS, "pub-b", 5)
    with pytest.raises(ConfigError, match="another live process uses this owner id"):
        await second.hold(0.0)
    await first.release()
    assert await other.alive(["pub-a"]) == set()
    with pytest.raises(ConfigError, match=r"p/2 \(owner pub-b\).*--take-over"):
        await first.wait_for_owners({"p/1": "pub-a", "p/2": "pub-b"}, 0.0)


async def test_a_replica_member_counts_as_alive() -> None:
    kv = MemoryKV()
    await kv.txn([], [Put(f"{NS}/replicas/members/replica-1", b"{}")])
    assert await Liveness(kv, NS, "me", 5).alive(["replica-1", "nobody"]) == {"replica-1"}


async def test_a_key_left_by_a_dead_process_of_this_machine_is_taken_at_once() -> None:
    """A crashed predecessor on this host (same boot, same PID namespace, its pid no
    longer running) does not make the successor wait out its lease; one on another host
    (or still running) does."""
    kv = MemoryKV()
    here = Liveness(kv, NS, "pub-a", 5)
    record = json.loads(here._value())
    assert record["boot"], "Linux has /proc/sys/kernel/random/boot_id"
    dead = {**record, "pid": _exited_pid()}
    elsewhere = {**dead, "host": "another-host"}
    await kv.txn(
        [],
        [
            Put(f"{NS}/owners/pub-a", json.dumps(dead).encode()),
            Put(f"{NS}/owners/pub-b", json.dumps(elsewhere).encode()),
        ],
    )
    assert await Liveness(kv, NS, "pub-c", 5).alive(["pub-a", "pub-b"]) == {"pub-b"}
    await here.hold(0.0)
    held = await kv.get(f"{NS}/owners/pub-a")
    assert held is not None
    assert held.lease != 0
    assert json.loads(held.value)["pid"] == os.getpid()


def _exited_pid() -> int:
    """The pid of a child that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class _Time:
    """A clock that only a sleep moves: the waits below take no real time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def _held_elsewhere(kv: MemoryKV, owner: str, ttl_s: int) -> None:
    """`owner`'s liveness key, held by a process on another host on a lease of `ttl_s`."""
    record = json.dumps({"owner": owner, "host": "another-host", "pid": 1}).encode()
    await kv.txn([], [Put(f"{NS}/owners/{owner}", record, await kv.lease_grant(ttl_s))])


async def test_the_key_outlives_a_wait_for_the_owners_longer_than_its_ttl() -> None:
    """`serve` holds its key, then waits up to 2 TTLs + 1 s for the partitions' live
    owners to go: the key's lease is renewed while it waits, so this owner never looks
    dead (nor is its owner id free for another process) in between."""
    time_ = _Time()
    kv = MemoryKV(now=time_)
    await _held_elsewhere(kv, "pub-b", 7)  # pub-b crashed: its key goes at t = 7
    me = Liveness(kv, NS, "pub-a", 4, clock=time_, sleep=time_.sleep)
    await me.hold(0.0)
    seen_alive: list[bool] = []

    async def watching(seconds: float) -> None:
        seen_alive.append("pub-a" in await Liveness(kv, NS, "x", 4).alive(["pub-a"]))
        await time_.sleep(seconds)

    me.sleep = watching
    await me.wait_for_owners({"p/1": "pub-b"}, 9.0)
    assert time_.now >= 7  # it did wait past its own TTL (4 s)
    assert len(seen_alive) >= 12  # one look per half second
    assert all(seen_alive)
    assert await me.alive(["pub-a"]) == {"pub-a"}


async def test_holding_waits_out_another_process_longer_than_its_ttl() -> None:
    """Another host's process holds this owner id's key for longer than our TTL: we
    wait (bounded), then hold the key on a lease that is alive, not the one granted
    when the wait began (etcd refuses a put on an expired lease)."""
    time_ = _Time()
    kv = MemoryKV(now=time_)
    await _held_elsewhere(kv, "pub-a", 7)
    me = Liveness(kv, NS, "pub-a", 4, clock=time_, sleep=time_.sleep)
    await me.hold(9.0)
    held = await kv.get(f"{NS}/owners/pub-a")
    assert held is not None
    assert json.loads(held.value)["pid"] == os.getpid()
    time_.now += 3.5  # within the TTL of a lease granted or renewed at the end
    assert await Liveness(kv, NS, "x", 4).alive(["pub-a"]) == {"pub-a"}


class _Blips(MemoryKV):
    """MemoryKV whose next `fail_txns` transactions fail as an etcd outage would."""

    fail_txns = 0

    async def txn(self, compares: Any, ops: Any) -> Any:
        if self.fail_txns:
            self.fail_txns -= 1
            raise EtcdUnavailable("etcd", "simulated blip")
        return await super().txn(compares, ops)


async def test_a_key_that_could_not_be_made_again_is_tried_again() -> None:
    """The lease lapsed (a pause longer than the TTL) and putting the key on a new one
    hit an etcd blip: no lease is kept without its key, so the next step makes it."""
    time_ = _Time()
    kv = _Blips(now=time_)
    me = Liveness(kv, NS, "pub-a", 4, clock=time_, sleep=time_.sleep)
    await me.hold(0.0)
    time_.now += 5  # the lease is gone, and the key with it
    kv.fail_txns = 1
    await me._keep_once()  # logged, not raised
    assert await kv.get(f"{NS}/owners/pub-a") is None
    assert me._session.lease is None
    time_.now += 1
    await me._keep_once()
    assert await me.alive(["pub-a"]) == {"pub-a"}


async def test_losing_the_owner_id_while_waiting_refuses_the_start() -> None:
    """Our lease lapsed during the wait for the partitions' owners and another process
    took this owner id: the start is refused, as `hold` refuses it at first."""
    time_ = _Time()
    kv = MemoryKV(now=time_)
    await _held_elsewhere(kv, "pub-b", 30)
    me = Liveness(kv, NS, "pub-a", 4, clock=time_, sleep=time_.sleep)
    await me.hold(0.0)
    time_.now += 5  # a pause: our key is gone; another host's pub-a takes it
    await _held_elsewhere(kv, "pub-a", 30)
    with pytest.raises(ConfigError, match="another live process uses this owner id"):
        await me.wait_for_owners({"p/1": "pub-b"}, 9.0)
    assert me._session.lease is None
