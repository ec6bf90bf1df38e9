"""The async fencing guard: windowed admission, shared/exclusive locks, deadlines, close.

Steps are ordered with asyncio tasks and Events; "the task is still waiting" is
checked after `settle()`, which only lets every ready task run (no wall-clock sleep).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc.errors import FenceExpired, FenceTimeout, GuardClosed, StaleEpoch
from watermark.core.gcstate import PartitionGcState
from watermark.core.window import Admission, EpochWindow
from watermark.service.guard import FenceToken, FencingGuard
from watermark.service.metrics import WatermarkMetrics

N = 100


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    """Let every task that is ready run until the loop is idle again."""
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `condition` (yielding to the loop) until it holds or the deadline passes."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0)


def guard_at(
    *epochs: int,
    clock: Callable[[], float] | None = None,
    hold_ttl_s: float | None = None,
    metrics: WatermarkMetrics | None = None,
) -> FencingGuard:
    """A guard whose window has been slid through `epochs` (holds never expire by default)."""
    window = EpochWindow()
    for epoch in epochs:
        window.advance(epoch)
    return FencingGuard(
        window,
        partition="p0",
        clock=FakeClock() if clock is None else clock,
        hold_ttl_s=hold_ttl_s,
        hook=None if metrics is None else metrics.hook,
    )


async def fence_and_commit(guard: FencingGuard, epoch: int) -> FenceToken:
    """Fence `epoch` and release at once (a write committed immediately)."""
    async with guard.fence(epoch, timeout=5) as token:
        assert guard.is_held(token)
    return token


async def test_slow_writer_at_n_is_admitted_after_n_plus_1_fenced_first() -> None:
    """Design failure scenario: B fences N+1 first, A (epoch N, slower) still succeeds."""
    guard = guard_at(N)
    a_uploaded = asyncio.Event()
    b_committed = asyncio.Event()

    async def writer_a() -> FenceToken:
        a_uploaded.set()
        await b_committed.wait()  # A is slow: its fence request arrives after B's commit
        return await fence_and_commit(guard, N)

    async def writer_b() -> FenceToken:
        await a_uploaded.wait()
        token = await fence_and_commit(guard, N + 1)
        b_committed.set()
        return token

    token_a, token_b = await asyncio.gather(writer_a(), writer_b())
    assert token_b.slid
    assert token_b.window == (N, N + 1)
    assert not token_a.slid
    assert token_a.window == (N, N + 1)


async def test_writer_holding_n_commits_before_the_slide_to_n_plus_1() -> None:
    """A holds N while B asks for N+1: B waits, A commits, then B slides."""
    guard = guard_at(N)
    a_token = await guard.acquire(N, timeout=5)
    b_task = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    await settle()
    assert not b_task.done()
    assert guard.window == (N, N)
    guard.ensure_held(a_token)  # A's commit happens here, under the shared lock
    assert guard.release(a_token)
    b_token = await b_task
    assert b_token.slid
    assert guard.window == (N, N + 1)


async def test_rapid_transitions_admit_only_the_last_two_epochs() -> None:
    """After N..N+3 slid in turn, N+2 and N+3 are admitted; N+1 and N are stale."""
    guard = guard_at()
    for epoch in range(N, N + 4):
        await fence_and_commit(guard, epoch)
    assert guard.window == (N + 2, N + 3)
    for epoch in (N + 2, N + 3):
        assert not (await fence_and_commit(guard, epoch)).slid
    for epoch in (N + 1, N):
        with pytest.raises(StaleEpoch) as info:
            await guard.acquire(epoch, timeout=5)
        assert info.value.epoch == epoch
        assert info.value.window == (N + 2, N + 3)


async def test_non_contiguous_epochs_admit_the_gap() -> None:
    """Window [5, 6] plus 10 gives [6, 10]: 7, 8 and 9 are inside, 5 is stale."""
    guard = guard_at(5, 6)
    assert (await fence_and_commit(guard, 10)).window == (6, 10)
    for epoch in (7, 8, 9):
        token = await fence_and_commit(guard, epoch)
        assert not token.slid
    with pytest.raises(StaleEpoch):
        await guard.acquire(5, timeout=5)


async def test_out_of_order_arrival_rejects_the_older_epoch() -> None:
    """N+1 arrives first on an empty window, then N is refused as below it."""
    guard = guard_at()
    await fence_and_commit(guard, N + 1)
    with pytest.raises(StaleEpoch) as info:
        await guard.acquire(N, timeout=5)
    assert info.value.window == (N + 1, N + 1)
    assert (await fence_and_commit(guard, N + 2)).window == (N + 1, N + 2)


async def test_slide_waits_until_every_shared_holder_has_exited() -> None:
    """With two writers inside the window, the slide happens only after both exited."""
    guard = guard_at(N)
    first_in, second_in = asyncio.Event(), asyncio.Event()
    first_out, second_out = asyncio.Event(), asyncio.Event()

    async def holder(entered: asyncio.Event, leave: asyncio.Event) -> None:
        async with guard.fence(N, timeout=5):
            entered.set()
            await leave.wait()

    holders = [
        asyncio.create_task(holder(first_in, first_out)),
        asyncio.create_task(holder(second_in, second_out)),
    ]
    await first_in.wait()
    await second_in.wait()
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    first_out.set()
    await holders[0]
    await settle()
    assert not slide.done()
    assert guard.window == (N, N)
    second_out.set()
    await holders[1]
    token = await slide
    assert token.slid
    assert guard.window == (N, N + 1)
    assert guard.inflight == 1


async def test_queued_slide_holds_back_new_shared_fences() -> None:
    """Writer preference: once a slide is queued, a new fence inside the window waits for it."""
    guard = guard_at(N)
    holder = await guard.acquire(N, timeout=5)
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    latecomer = asyncio.create_task(guard.acquire(N, timeout=5))
    await settle()
    assert not latecomer.done()
    guard.release(holder)
    slid, late = await asyncio.gather(slide, latecomer)
    assert slid.slid
    assert not late.slid
    assert late.window == (N, N + 1)


async def test_second_request_for_the_same_new_epoch_joins_as_shared() -> None:
    """Two writers queued to slide to N+1: one slides, the other is admitted inside."""
    guard = guard_at(N)
    holder = await guard.acquire(N, timeout=5)
    first = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    second = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 2)
    guard.release(holder)
    tokens = await asyncio.gather(first, second)
    assert sorted(t.slid for t in tokens) == [False, True]
    assert guard.inflight == 2
    assert guard.window == (N, N + 1)


async def test_queued_fence_is_refused_when_two_slides_pass_it() -> None:
    """A fence for N queued behind slides to N+1 and N+2 is re-checked and refused."""
    guard = guard_at(N)
    holder = await guard.acquire(N, timeout=5)
    to_n1 = asyncio.create_task(fence_and_commit(guard, N + 1))
    await until(lambda: guard.exclusive_waiters == 1)
    to_n2 = asyncio.create_task(fence_and_commit(guard, N + 2))
    await until(lambda: guard.exclusive_waiters == 2)
    old = asyncio.create_task(guard.acquire(N, timeout=5))
    await settle()
    guard.release(holder)
    await asyncio.gather(to_n1, to_n2)
    assert guard.window == (N + 1, N + 2)
    with pytest.raises(StaleEpoch):
        await old


async def test_fence_timeout_releases_nothing_and_unblocks_shared_waiters() -> None:
    """A slide that times out raises FenceTimeout, leaves the holder held, lets readers in."""
    metrics = WatermarkMetrics()
    guard = guard_at(N, metrics=metrics)
    holder = await guard.acquire(N, timeout=5)
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=0.05))
    await until(lambda: guard.exclusive_waiters == 1)
    reader = asyncio.create_task(guard.acquire(N, timeout=5))
    with pytest.raises(FenceTimeout) as info:
        await slide
    assert info.value.epoch == N + 1
    assert info.value.window == (N, N)
    second = await reader
    assert guard.is_held(holder)
    assert guard.is_held(second)
    assert guard.exclusive_waiters == 0
    assert guard.window == (N, N)
    assert metrics.fences.labels(result="timeout")._value.get() == 1


async def test_close_aborts_every_waiter_and_refuses_new_fences() -> None:
    """close() wakes queued slides and readers with GuardClosed; holders stay releasable."""
    guard = guard_at(N)
    holder = await guard.acquire(N, timeout=5)
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=None))
    await until(lambda: guard.exclusive_waiters == 1)
    reader = asyncio.create_task(guard.acquire(N, timeout=None))
    await settle()
    guard.close()
    for task in (slide, reader):
        with pytest.raises(GuardClosed):
            await task
    with pytest.raises(GuardClosed):
        await guard.acquire(N, timeout=5)
    assert guard.exclusive_waiters == 0
    assert guard.release(holder)
    assert guard.inflight == 0


async def test_expired_hold_is_reclaimed_for_a_waiting_slide() -> None:
    """A writer that never commits is reclaimed once past its deadline and a slide waits."""
    clock = FakeClock()
    metrics = WatermarkMetrics()
    guard = guard_at(N, clock=clock, hold_ttl_s=10.0, metrics=metrics)
    stuck = await guard.acquire(N, timeout=5)
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    clock.now = 9.0
    assert guard.reclaim_expired() == 0
    clock.now = 10.5
    assert guard.reclaim_expired() == 1
    token = await slide
    assert token.slid
    with pytest.raises(FenceExpired):
        guard.ensure_held(stuck)
    assert not guard.release(stuck)
    assert metrics.fences_reclaimed._value.get() == 1
    # The gauge reads the guards' count when collected (no _value): read what is exported.
    assert metrics.registry.get_sample_value("l0gc_watermark_inflight_fences") == 1


async def test_expired_hold_without_a_waiting_slide_is_reclaimed_at_its_deadline() -> None:
    """Issue 51 (4): with no slide waiting, a fence is still reclaimed at its deadline (an
    abandoned fence pinned an idle partition's M(p) for good); its commit is refused."""
    clock = FakeClock()
    guard = guard_at(N, clock=clock, hold_ttl_s=1.0)
    token = await guard.acquire(N, timeout=5)
    clock.now = 0.9
    assert guard.reclaim_expired() == 0
    guard.ensure_held(token)
    clock.now = 1.0
    assert guard.reclaim_expired() == 1
    assert guard.inflight == 0
    with pytest.raises(FenceExpired):
        guard.ensure_held(token)


async def test_blocked_slide_wakes_itself_at_the_hold_deadline() -> None:
    """With the real clock, a waiting slide reclaims an abandoned fence when it expires."""
    guard = guard_at(N, clock=time.monotonic, hold_ttl_s=0.05)
    abandoned = await guard.acquire(N, timeout=5)
    token = await guard.acquire(N + 1, timeout=5)
    assert token.slid
    assert not guard.is_held(abandoned)


async def test_fence_context_releases_when_the_block_raises() -> None:
    """An exception inside `async with guard.fence(...)` still gives the fence back."""
    guard = guard_at(N)
    with pytest.raises(RuntimeError):
        async with guard.fence(N, timeout=5):
            raise RuntimeError("write failed")
    assert guard.inflight == 0


async def test_exclusive_block_runs_with_no_write_in_flight() -> None:
    """exclusive() waits for holders, slides, and keeps new fences out until it exits."""
    guard = guard_at(N)
    holder = await guard.acquire(N, timeout=5)
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def housekeeping() -> Admission:
        async with guard.exclusive(N + 1, timeout=5) as admission:
            assert guard.inflight == 0
            inside.set()
            await leave.wait()
        return admission

    task = asyncio.create_task(housekeeping())
    await until(lambda: guard.exclusive_waiters == 1)
    guard.release(holder)
    await inside.wait()
    writer = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await settle()
    assert not writer.done()
    leave.set()
    assert await task is Admission.ABOVE
    written = await writer
    assert not written.slid
    assert guard.window == (N, N + 1)
    guard.release(written)
    async with guard.exclusive(N, timeout=5) as admission:
        assert admission is Admission.INSIDE


async def test_recovered_window_never_admits_at_or_below_published_watermark() -> None:
    """After recovery the window is [max_applied] and refuses every epoch <= M(p)."""
    state = PartitionGcState(created_epoch=10)
    state.apply(0, 10, admitted_from=10)  # fencing windows [10], [10, 11], [11, 12]
    state.apply(1, 11, admitted_from=10)
    state.apply(2, 12, admitted_from=11)
    state.reconciled(2)
    restored = PartitionGcState.restore(state.snapshot())
    guard = FencingGuard(restored.window_after_recovery(), partition="p0")
    assert restored.gc_eligible_epoch == 10
    assert guard.window == (12, 12)
    for epoch in (9, 10, 11):
        with pytest.raises(StaleEpoch):
            await guard.acquire(epoch, timeout=5)
    assert not (await fence_and_commit(guard, 12)).slid
    assert (await fence_and_commit(guard, 13)).window == (12, 13)


async def test_recovered_empty_window_admits_only_above_the_watermark() -> None:
    """Nothing applied above M(p): the window is empty with floor M(p); M(p) itself is stale."""
    guard = FencingGuard(EpochWindow.recovered(None, 41), partition="p0")
    with pytest.raises(StaleEpoch) as info:
        await guard.acquire(41, timeout=5)
    assert info.value.floor == 41
    assert (await fence_and_commit(guard, 42)).slid


@settings(max_examples=60, deadline=None)
@given(
    floor=st.integers(0, 5),
    epochs=st.lists(st.integers(0, 15), min_size=1, max_size=25),
)
def test_no_fence_is_granted_at_or_below_the_floor_or_below_the_window(
    floor: int, epochs: list[int]
) -> None:
    """Whatever the arrival order, every granted epoch is > M(p) and inside the window."""

    async def scenario() -> None:
        guard = FencingGuard(EpochWindow.recovered(None, floor), partition="p0")
        for epoch in epochs:
            try:
                token = await fence_and_commit(guard, epoch)
            except StaleEpoch:
                continue
            low, high = token.window
            assert low is not None
            assert high is not None
            assert epoch > floor
            assert low <= epoch <= high

    asyncio.run(scenario())


async def test_inside_fence_with_nobody_queued_is_granted_without_yielding() -> None:
    """Fast path: an epoch inside the window, nothing exclusive, is granted at the first step."""
    clock = FakeClock()
    clock.now = 7.0
    guard = guard_at(N, N + 1, clock=clock, hold_ttl_s=30.0)
    step = guard.acquire(N, timeout=5, hold_ttl_s=2.0)
    with pytest.raises(StopIteration) as done:
        step.send(None)  # completes without awaiting anything
    token = done.value.value
    assert isinstance(token, FenceToken)
    assert (token.epoch, token.window, token.slid, token.deadline) == (N, (N, N + 1), False, 9.0)
    assert guard.is_held(token)
    assert (await guard.acquire(N + 1, timeout=5)).deadline == 37.0
    assert guard.inflight == 2


async def test_inside_fence_behind_a_queued_slide_times_out_holding_nothing() -> None:
    """Writer preference on the fast path: behind a queued slide the fence waits, then times out."""
    metrics = WatermarkMetrics()
    guard = guard_at(N, metrics=metrics)
    holder = await guard.acquire(N, timeout=5)
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    with pytest.raises(FenceTimeout) as info:
        await guard.acquire(N, timeout=0.02)
    assert info.value.epoch == N
    assert guard.inflight == 1
    assert metrics.fences.labels(result="timeout")._value.get() == 1
    guard.release(holder)
    assert (await slide).slid


async def test_inside_fence_waits_for_an_exclusive_block_and_fails_when_closed() -> None:
    """While exclusive() runs, an inside fence waits; close() then answers it with GuardClosed."""
    guard = guard_at(N)
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def housekeeping() -> None:
        async with guard.exclusive(N, timeout=5):
            inside.set()
            await leave.wait()

    task = asyncio.create_task(housekeeping())
    await inside.wait()
    writer = asyncio.create_task(guard.acquire(N, timeout=5))
    await settle()
    assert not writer.done()
    guard.close()
    with pytest.raises(GuardClosed):
        await writer
    leave.set()
    await task
    with pytest.raises(GuardClosed):
        async with guard.fence(N, timeout=5):
            pytest.fail("a closed guard must not admit")
    assert guard.inflight == 0


async def test_release_with_nobody_waiting_then_a_waiter_is_still_woken() -> None:
    """Releases with no waiter notify nobody; a later waiter is still woken by the next change."""
    guard = guard_at(N)
    for _ in range(3):
        await fence_and_commit(guard, N)
    holder = await guard.acquire(N, timeout=5)
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    assert guard.release(holder)
    assert (await slide).slid
    assert not guard.release(holder)


async def test_fence_block_that_is_refused_holds_nothing() -> None:
    """`async with guard.fence(stale)` raises StaleEpoch before the block and holds nothing."""
    guard = guard_at(N, N + 1, N + 2)
    with pytest.raises(StaleEpoch):
        async with guard.fence(N, timeout=5):
            pytest.fail("a stale epoch must not enter the block")
    assert guard.inflight == 0


async def test_tokens_are_distinct_unguessable_and_stable() -> None:
    """Each token's bearer id is a fresh 24-char url-safe secret, the same on every read."""
    guard = guard_at(N)
    tokens = [await guard.acquire(N, timeout=5) for _ in range(200)]
    ids = [token.token for token in tokens]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 24 and i.replace("-", "").replace("_", "").isalnum() for i in ids)
    assert [token.token for token in tokens] == ids
    assert tokens[0] != tokens[1]
    assert tokens[0] == tokens[0]


async def test_metrics_count_inside_and_slide_and_export_fences_in_flight() -> None:
    """fences_total counts each result; the in-flight gauge sums every guard sharing metrics."""
    metrics = WatermarkMetrics()
    first, second = guard_at(N, metrics=metrics), guard_at(metrics=metrics)

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    held = [await first.acquire(N, timeout=5), await first.acquire(N, timeout=5)]
    held.append(await second.acquire(N + 5, timeout=5))
    assert sample("l0gc_watermark_inflight_fences") == 3
    assert sample("l0gc_watermark_fences_total", result="inside") == 2
    assert sample("l0gc_watermark_fences_total", result="slide") == 1
    first.release(held[0])
    assert sample("l0gc_watermark_inflight_fences") == 2
    assert first.revoke_all() == 1
    assert sample("l0gc_watermark_inflight_fences") == 1
    second.release(held[2])
    assert not second.release(held[2])
    assert sample("l0gc_watermark_inflight_fences") == 0


async def test_try_acquire_grants_only_what_acquire_grants_without_waiting() -> None:
    """Inside the window with nothing queued: a held token; a slide, a queued slide, an
    epoch below the window or a closed guard: None (acquire decides those)."""
    guard = guard_at(N)
    held = guard.try_acquire(N)
    assert held is not None
    assert guard.is_held(held)
    assert guard.try_acquire(N + 1) is None  # needs a slide
    assert guard.try_acquire(N - 1) is None  # below: acquire raises StaleEpoch
    slide = asyncio.create_task(guard.acquire(N + 1, timeout=5))
    await until(lambda: guard.exclusive_waiters == 1)
    assert guard.try_acquire(N) is None  # writer preference holds on the fast path too
    guard.release(held)
    await slide
    guard.close()
    assert guard.try_acquire(N + 1) is None
