"""`LeaseSession`: one lease kept alive, revoked on close, reported lost only when etcd
says so, and a deadline on every call; on a real etcd (also frozen by SIGSTOP while the
lease runs out) and on the in-memory KV with a virtual clock."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from l0gc.contract.kv import Put
from l0gc.errors import ConfigError, EtcdUnavailable, LeaseExpired
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.session import LeaseSession
from l0lab.testing.local_servers import LocalEtcd
from tests.waiting import wait_until

integration = pytest.mark.integration

CLIENT_TIMEOUT_S = 30.0
"""The frozen etcd's client deadline: far beyond the session's 0.5 s, so a refresh that
waits for the client's deadline cannot pass for one a loaded machine merely slowed."""


def process_state(pid: int) -> str:
    """The state letters of every thread of PID (/proc/PID/task/*/stat; T: stopped, S:
    sleeping, D: in a system call that must end first), or why none."""
    try:
        tasks = sorted(Path(f"/proc/{pid}/task").iterdir())
        return "".join((task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks)
    except OSError as exc:
        return f"unreadable ({exc})"


def stopped(pid: int) -> bool:
    """Every thread of PID is stopped: a SIGSTOP has taken effect (a thread inside a
    system call, in state D such as an fsync, stops only when the call ends)."""
    state = process_state(pid)
    return bool(state) and set(state) <= {"T", "t"}


class FakeClock:
    """A virtual clock shared by MemoryKV and the session."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class HangingKV(MemoryKV):
    """A KV whose lease calls never answer (an etcd that holds the call open)."""

    hang = False

    async def lease_refresh(self, lease_id: int) -> bool:
        if self.hang:
            await asyncio.Event().wait()
        return await super().lease_refresh(lease_id)


@pytest.fixture
async def private_kv(etcd_private: LocalEtcd) -> AsyncIterator[EtcdKV]:
    """A client of this test's own etcd (which the test freezes)."""
    client = EtcdKV([etcd_private.endpoint], timeout_s=CLIENT_TIMEOUT_S)
    yield client
    await client.close()


@integration
async def test_a_session_keeps_its_lease_past_the_ttl_and_revokes_it_on_close(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """A key on the session's lease outlives several TTLs while the session runs, and is
    gone (with the lease) as soon as the session closes."""
    kv = EtcdKV([etcd_server.endpoint], timeout_s=5.0)
    key = f"{namespace}/held"
    try:
        async with LeaseSession(kv, 2) as session:
            lease = session.lease
            assert lease is not None
            await kv.txn([], [Put(key, b"x", lease)])
            granted_until = session.until
            # a renewal sent 3 s (1.5 TTLs) after the grant: the lease outlived its TTL
            await wait_until(
                lambda: session.until > granted_until + 3,
                timeout_s=30,
                what="a renewal 1.5 TTLs after the grant",
            )
            assert session.alive()
            held = await kv.get(key)
            assert held is not None
            assert held.lease == lease
            assert await kv.lease_time_to_live(lease) is not None
        assert session.lease is None
        assert await kv.get(key) is None
        assert await kv.lease_time_to_live(lease) is None
    finally:
        await kv.close()


@integration
async def test_a_lease_that_runs_out_while_etcd_is_frozen_is_lost_then_replaced(
    etcd_private: LocalEtcd, private_kv: EtcdKV, namespace: str
) -> None:
    """etcd frozen (SIGSTOP): each refresh ends at the session's deadline (0.5 s, not the
    client's 30 s), the lease stops being certainly alive one TTL after the last renewal
    was sent, and is NOT reported lost (etcd has not said so). Thawed: the first refresh
    learns the lease is gone, reports it once, and `keep` grants a new one; the key on
    the old lease has gone with it."""
    lost: list[tuple[int | None, str]] = []
    session = LeaseSession(
        private_kv, 2, call_timeout_s=0.5, on_lost=lambda lease, why: lost.append((lease, why))
    )
    old = await session.grant()
    key = f"{namespace}/held"
    await private_kv.txn([], [Put(key, b"x", old)])
    assert await session.refresh()
    pid = etcd_private.pid
    assert pid is not None
    loop = asyncio.get_running_loop()

    async def refresh_while_frozen() -> None:
        answered = await session.refresh()
        # reached only when it returned: say who is wrong, the client or whatever thawed etcd
        pytest.fail(
            f"refresh returned {answered} while etcd was frozen; etcd's state now: "
            f"{process_state(pid)} (T: still stopped)"
        )

    etcd_private.signal(signal.SIGSTOP)
    try:
        await wait_until(
            lambda: stopped(pid),
            timeout_s=30,
            what="every etcd thread stopped",
            detail=lambda: process_state(pid),
        )
        failures = 0
        while session.alive() or failures < 2:
            sent = loop.time()
            with pytest.raises(EtcdUnavailable, match=r"lease refresh within 0\.5 s"):
                await refresh_while_frozen()
            # The session's 0.5 s, neither a shorter deadline nor the client's 30 s (a loaded
            # machine may add seconds to the 0.5 s, not 29.5).
            assert 0.5 <= loop.time() - sent < CLIENT_TIMEOUT_S
            failures += 1
        assert session.lease == old
        assert lost == []
        with pytest.raises(LeaseExpired):
            session.check()
    finally:
        etcd_private.signal(signal.SIGCONT)
    new = await session.keep()
    assert new != old
    assert lost == [(old, "lease expired in etcd")]
    assert session.alive()
    assert await private_kv.get(key) is None
    await session.revoke()
    assert await private_kv.lease_time_to_live(new) is None


async def test_virtual_time_lapse_loss_and_regrant() -> None:
    """`until` is when the renewal was sent + TTL - margin; a lapse is not a loss; a lease
    etcd dropped is lost once, and `keep` replaces it."""
    clock = FakeClock()
    kv = MemoryKV(now=clock)
    lost: list[tuple[int | None, str]] = []
    session = LeaseSession(
        kv, 10, clock=clock, margin_s=1.0, on_lost=lambda lease, why: lost.append((lease, why))
    )
    assert not session.alive()
    first = await session.keep()
    assert (session.until, session.check()) == (9.0, first)
    clock.now = 8.0
    assert await session.refresh()
    assert session.until == 17.0
    clock.now = 17.0
    assert not session.alive()  # lapsed on our clock, still alive in etcd: not lost
    assert lost == []
    assert await session.keep() == first
    clock.now = 40.0  # etcd expired it meanwhile
    second = await session.keep()
    assert second != first
    assert lost == [(first, "lease expired in etcd")]
    assert session.until == 49.0


async def test_a_hanging_refresh_ends_at_the_deadline() -> None:
    """A refresh etcd never answers raises EtcdUnavailable after `call_timeout_s`; the
    lease is kept (etcd may still have it)."""
    kv = HangingKV()
    session = LeaseSession(kv, 5, call_timeout_s=0.2)
    lease = await session.grant()
    kv.hang = True
    with pytest.raises(EtcdUnavailable, match=r"within 0\.2 s"):
        await session.refresh()
    assert session.lease == lease


async def test_running_calls_the_step_until_the_block_ends_then_revokes() -> None:
    """`running(step)` calls the holder's step in the background (at once with `first`),
    then revokes the lease when the block exits."""
    kv = MemoryKV()
    session = LeaseSession(kv, 3)
    steps: list[int] = []
    twice = asyncio.Event()

    async def step() -> None:
        steps.append(await session.keep())
        if len(steps) >= 2:
            twice.set()

    async with session.running(step, every_s=0.01, first=True):
        async with asyncio.timeout(5):
            await twice.wait()
        lease = session.lease
        assert lease is not None
        assert steps[0] == steps[1] == lease
    assert session.lease is None
    assert not await kv.lease_refresh(lease)


def test_bad_settings_are_refused() -> None:
    """A TTL under 1 s, a margin not below the TTL, or a non-positive deadline."""
    kv = MemoryKV()
    for kwargs in (
        {"ttl_s": 0},
        {"ttl_s": 5, "margin_s": 5.0},
        {"ttl_s": 5, "call_timeout_s": 0.0},
    ):
        with pytest.raises(ConfigError):
            LeaseSession(kv, **kwargs)  # type: ignore[arg-type, unused-ignore]
