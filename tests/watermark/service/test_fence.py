"""The Python writer API's `Fence` (what ``async with publisher.fence(...)`` yields) offers
what docs/integration.md tells writers to use: `abort()` and `expires_in_s`."""

from __future__ import annotations

import asyncio

import pytest

from l0gc.errors import FenceExpired
from tests.publishing import HandClock, hosting


async def test_expires_in_s_counts_down_on_the_publishers_clock() -> None:
    """expires_in_s is the hold TTL left on the publisher's clock, 0.0 once past."""
    clock = HandClock()
    _, publisher = await hosting("p", owner="writer-1", clock=clock, hold_ttl_s=30.0)
    async with publisher.fence("p", 5) as fence:
        assert fence.expires_in_s == pytest.approx(30.0)
        clock.now += 12.5
        assert fence.expires_in_s == pytest.approx(17.5)
        clock.now += 60
        assert fence.expires_in_s == 0.0
        fence.abort()


async def test_expires_in_s_is_none_without_a_hold_deadline() -> None:
    """A publisher without a hold TTL grants fences that never expire: None."""
    _, publisher = await hosting("p", owner="writer-1", clock=HandClock(), hold_ttl_s=None)
    async with publisher.fence("p", 5) as fence:
        assert fence.expires_in_s is None


async def test_abort_releases_the_fence_and_forbids_the_commit() -> None:
    """abort() frees the hold at once (a slide can proceed), answers False the second time,
    and a commit after it is refused: the entry must not be committed."""
    _, publisher = await hosting("p", owner="writer-1", clock=HandClock(), hold_ttl_s=30.0)
    async with publisher.fence("p", 5) as fence:
        assert publisher.is_held(fence.token)
        assert fence.abort() is True
        assert not publisher.is_held(fence.token)
        assert fence.abort() is False
        with pytest.raises(FenceExpired):
            fence.commit(0)
    state = publisher.state("p")
    assert state["inflight_fences"] == 0
    assert state["last_applied_offset"] is None


async def test_an_aborted_fence_does_not_block_a_slide() -> None:
    """After abort() a fence at a higher epoch is granted without waiting for the holder."""
    store, publisher = await hosting("p", owner="writer-1", clock=HandClock(), hold_ttl_s=30.0)
    async with publisher.fence("p", 5) as fence:
        await store.advance_cluster_epoch()
        fence.abort()
        async with asyncio.timeout(5):
            async with publisher.fence("p", 6) as higher:
                assert higher.token.slid
                higher.commit(0)
    assert publisher.state("p")["last_applied_offset"] == 0
