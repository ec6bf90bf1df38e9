"""`gcd.journal.anchor.anchoring`: the ends of chains reported to a Spark job's driver,
anchored in etcd while the job runs and once at its end, never backwards."""

from __future__ import annotations

from gcd.journal.anchor import anchoring, put_anchor
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key
from l0gc.etcd.memory import MemoryKV
from tests.waiting import wait_until


def _end(chain: str, seq: int) -> JournalAnchor:
    return JournalAnchor(chain, seq, f"d{seq}", f"journal-{chain}-{seq:06d}.jsonl", 1.0)


async def _stored(kv: MemoryKV, chain: str) -> int | None:
    found = await kv.get(anchor_key("/ns", chain))
    return None if found is None else JournalAnchor.decode(found.value, "test").seq


async def test_chains_are_anchored_as_they_grow_and_at_the_end() -> None:
    kv = MemoryKV()
    ends = {"a": _end("a", 2)}
    async with anchoring(kv, "/ns", lambda: list(ends.values()), every_s=0.01):

        async def first() -> bool:
            return await _stored(kv, "a") == 2

        await wait_until(first, timeout_s=10, what="the first end anchored")
        ends["a"], ends["b"] = _end("a", 5), _end("b", 1)
    assert (await _stored(kv, "a"), await _stored(kv, "b")) == (5, 1)  # the last step


async def test_an_anchor_never_goes_back() -> None:
    """Another writer's later end stands; ours is not written over it."""
    kv = MemoryKV()
    key = anchor_key("/ns", "a")
    assert (await put_anchor(kv, key, _end("a", 9))).written
    stored = await put_anchor(kv, key, _end("a", 4))
    assert (stored.written, stored.seq) == (False, 9)
    async with anchoring(kv, "/ns", lambda: [_end("a", 3)], every_s=60):
        pass
    assert await _stored(kv, "a") == 9
