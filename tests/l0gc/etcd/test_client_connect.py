"""`EtcdKV`'s staggered connect with scripted endpoints (`_open` replaced): which one
wins, and that no channel is left open whatever is given up, even by a cancel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from l0gc.etcd import client
from l0gc.etcd.client import EtcdKV, _Session


class Channel:
    def __init__(self, endpoint: str, script: Script) -> None:
        self.endpoint, self.script = endpoint, script

    async def close(self, grace: float | None = None) -> None:
        self.script.note(f"closed {self.endpoint}")


class Script:
    """Each endpoint's `_open`: ready after a gate opens, or refused, or never ready;
    a given-up attempt closes its channel the way the real `_open` does."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.refused: set[str] = set()
        self.teardown = asyncio.Event()
        self.teardown.set()
        self._seen: dict[str, asyncio.Event] = {}

    def _event(self, entry: str) -> asyncio.Event:
        return self._seen.setdefault(entry, asyncio.Event())

    def note(self, entry: str) -> None:
        self.log.append(entry)
        self._event(entry).set()

    async def seen(self, entry: str) -> None:
        """Return once `entry` is in the log (a deadline, not a measure: it never comes
        when the code under test is wrong)."""
        async with asyncio.timeout(60):
            await self._event(entry).wait()

    async def open(self, endpoint: str) -> _Session:
        self.note(f"open {endpoint}")
        if endpoint in self.refused:
            raise ConnectionRefusedError("refused")
        gate = self.gates.setdefault(endpoint, asyncio.Event())
        channel = Channel(endpoint, self)
        try:
            await gate.wait()
        except asyncio.CancelledError:
            await self.teardown.wait()  # a half-open channel can take a while
            await channel.close()
            raise
        return _Session(endpoint=endpoint, channel=channel, kv=None, lease=None, metadata=None)


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Script:
    scripted = Script()

    async def scripted_open(_self: EtcdKV, endpoint: str) -> _Session:
        return await scripted.open(endpoint)

    monkeypatch.setattr(EtcdKV, "_open", scripted_open)
    monkeypatch.setattr(client, "CONNECT_STAGGER_S", 0.0)  # the next one at once
    return scripted


async def test_a_refusal_starts_the_next_and_the_first_ready_wins(script: Script) -> None:
    script.refused.add("a:1")
    kv = EtcdKV(["a:1", "b:2", "c:3"], timeout_s=5)
    connecting = asyncio.create_task(kv.connect())
    await script.seen("open c:3")  # b never answers: c is tried alongside
    script.gates["c:3"].set()
    assert await connecting == "c:3"
    await script.seen("closed b:2")
    assert script.log == ["open a:1", "open b:2", "open c:3", "closed b:2"]
    assert kv._preferred == 2


async def test_one_ready_after_the_winner_is_closed(script: Script) -> None:
    kv = EtcdKV(["a:1", "b:2"], timeout_s=5)
    connecting = asyncio.create_task(kv.connect())
    await script.seen("open b:2")
    script.gates["a:1"].set()
    script.gates["b:2"].set()  # both ready in the same turn: one wins, one is closed
    winner = await connecting
    loser = "b:2" if winner == "a:1" else "a:1"
    await script.seen(f"closed {loser}")
    assert script.log[-1] == f"closed {loser}"
    assert f"closed {winner}" not in script.log


async def test_a_cancelled_connect_leaves_no_channel_open(script: Script) -> None:
    kv = EtcdKV(["a:1", "b:2"], timeout_s=5)
    connecting = asyncio.create_task(kv.connect())
    await script.seen("open b:2")
    connecting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await connecting
    script.gates["a:1"].set()
    await script.seen("closed a:1")
    await script.seen("closed b:2")
    assert sorted(x for x in script.log if x.startswith("closed")) == ["closed a:1", "closed b:2"]
    assert kv._session is None


async def test_what_is_not_a_connection_failure_is_raised_as_it_is(
    script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(_self: EtcdKV, endpoint: str) -> Any:
        raise RuntimeError(f"bug opening {endpoint}")

    monkeypatch.setattr(EtcdKV, "_open", broken)
    with pytest.raises(RuntimeError, match="bug opening a:1"):
        await EtcdKV(["a:1", "b:2"], timeout_s=5).connect()


async def test_the_winner_does_not_wait_for_the_others_to_wind_down(script: Script) -> None:
    """Nothing is awaited once one is ready: a cancel then could not lose its session,
    and a slow teardown of the others does not delay the command."""
    kv = EtcdKV(["a:1", "b:2"], timeout_s=5)
    connecting = asyncio.create_task(kv.connect())
    await script.seen("open b:2")
    script.teardown.clear()  # a's teardown hangs until we say
    script.gates["b:2"].set()
    # a deadline, not a measure: waiting for a's teardown would never end
    assert await asyncio.wait_for(connecting, 60) == "b:2"
    assert "closed a:1" not in script.log
    script.teardown.set()
    await script.seen("closed a:1")
    assert script.log[-1] == "closed a:1"
