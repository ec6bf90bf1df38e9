"""Shard agreement (pure): sweepers that disagree on shards refuse to delete."""

from __future__ import annotations

import json
from dataclasses import replace

from gcd.sweep.shards import MAX_PROBLEMS, ShardAnnouncement, check_shards, problems_of
from gcd.sweep.shards import announced as keep_announced
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from tests.waiting import wait_until

ME = ShardAnnouncement("me", 0, 2, 1.0)


def announced(*others: ShardAnnouncement) -> dict[str, bytes]:
    """Every announcement by id, this sweeper's own included."""
    return {a.sweeper_id: a.encode() for a in (ME, *others)}


def test_agreeing_sweepers_may_delete() -> None:
    """Alone, or beside the other shard of the same count: no refusal."""
    assert check_shards(ME, announced()) is None
    assert check_shards(ME, announced(ShardAnnouncement("b", 1, 2, 1.0))) is None
    assert ShardAnnouncement.decode(ME.encode()) == ME


def test_different_count_or_same_index_is_refused() -> None:
    """A count of 3 beside 2, or index 0 twice, blocks with both sweepers named."""
    count = check_shards(ME, announced(ShardAnnouncement("c", 1, 3, 1.0)))
    assert count is not None
    assert "'c'" in count
    assert "1/3" in count
    assert "0/2" in count
    twice = check_shards(ME, announced(ShardAnnouncement("d", 0, 2, 1.0)))
    assert twice is not None
    assert "run twice" in twice
    assert "'d'" in twice


def test_unreadable_announcement_is_refused() -> None:
    """Garbage or a deep nest under sweepers/ blocks instead of crashing or being ignored."""
    for raw in (b"not json", b"[" * 50_000, b'{"version":1,"shard_index":5,"shard_count":2}'):
        reason = check_shards(ME, {"me": ME.encode(), "x": raw})
        assert reason is not None
        assert "'x'" in reason


def test_the_store_a_sweeper_detected_round_trips_and_hostile_values_are_refused() -> None:
    """Issue 28: the announcement carries what the sweeper detected about its bucket (for
    `gcd status`); anything but a small flat object of short values blocks, as garbage does."""
    store = {
        "versioning": "Enabled",
        "object_lock": True,
        "listing": "ordered",
        "batch_delete": None,
    }
    detected = ShardAnnouncement("b", 1, 2, 1.0, store)
    assert ShardAnnouncement.decode(detected.encode()) == detected
    assert check_shards(ME, announced(detected)) is None
    many = {f"k{i}": "v" for i in range(17)}
    for hostile in ({"a": {"b": 1}}, {"a": "x" * 65}, {"a": 7}, [1], many):
        doc = json.loads(detected.encode())
        doc["store"] = hostile
        reason = check_shards(ME, {"me": ME.encode(), "b": json.dumps(doc).encode()})
        assert reason is not None, hostile
        assert "'b'" in reason


async def test_a_detection_is_put_again_under_the_same_lease() -> None:
    """The announcement follows what the store detects: first without `store`, then with
    it once detected, under the same key version (the sweeper stays announced throughout).
    The KV's clock stands still: the lease cannot lapse because a loaded machine made a
    refresh late, so a new key version can only come from the sweeper withdrawing it."""
    kv = MemoryKV(now=lambda: 0.0)
    store = WatermarkStore(kv, "/ns")
    seen: list[dict[str, str | bool | None] | None] = [None]
    key = store.sweepers_prefix + ME.sweeper_id

    async def announced_store() -> object:
        found = await kv.get(key)
        assert found is not None
        return json.loads(found.value).get("store", "absent")

    async with keep_announced(store, kv, ME, ttl_s=3, now=lambda me: replace(me, store=seen[0])):
        first = await kv.get(key)
        assert first is not None
        assert await announced_store() == "absent"
        seen[0] = {
            "versioning": "Suspended",
            "object_lock": False,
            "listing": "unordered",
            "batch_delete": False,
        }

        async def updated() -> bool:
            return await announced_store() == seen[0]

        await wait_until(updated, timeout_s=60, what="the announcement carries the detection")
        now = await kv.get(key)
        assert now is not None
        assert now.create_revision == first.create_revision  # put again, never withdrawn
        assert now.lease == first.lease != 0
    assert await kv.get(key) is None


def test_the_last_rounds_problems_round_trip_short_and_bounded() -> None:
    """Issue 25 (6): what the last round could not collect travels in the announcement for
    `gcd status`, cut to MAX_PROBLEMS short lines; a long list or a non-string blocks."""
    lines = [f"cannot list level_zero/data/{n:03d}: skipped" for n in range(12)] + ["x" * 400]
    problems = problems_of(lines)
    assert len(problems) == MAX_PROBLEMS
    assert problems[-1] == f"... and {len(lines) - MAX_PROBLEMS + 1} more"
    assert problems[0] == lines[0]
    assert problems_of(["x" * 400])[0].endswith("...")
    assert len(problems_of(["x" * 400])[0]) == 300
    with_problems = ShardAnnouncement("b", 1, 2, 1.0, None, problems)
    assert ShardAnnouncement.decode(with_problems.encode()) == with_problems
    for hostile in ([1], ["x" * 301], ["p"] * (MAX_PROBLEMS + 1), "text"):
        doc = json.loads(with_problems.encode())
        doc["problems"] = hostile
        assert check_shards(ME, {"me": ME.encode(), "b": json.dumps(doc).encode()}) is not None
