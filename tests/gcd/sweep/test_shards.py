"""Shard agreement (pure): sweepers that disagree on shards refuse to delete."""

from __future__ import annotations

from gcd.sweep.shards import ShardAnnouncement, check_shards

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
