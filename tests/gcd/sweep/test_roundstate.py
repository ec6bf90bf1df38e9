"""The state of a round in progress (`gcd.sweep.roundstate`): handing batches on."""

from __future__ import annotations

import asyncio

from gcd.observe.events import DeleteBasis
from gcd.rules.candidate import Candidate
from gcd.sweep.roundstate import BatchQueue, RoundState


def state_with(keys: int) -> RoundState:
    run = RoundState(5, DeleteBasis(5, None, None))
    run.batch = [Candidate(f"k{index}", 1, 1) for index in range(keys)]
    return run


async def test_a_batch_goes_once_it_holds_batch_size_keys() -> None:
    """Below the batch size nothing is queued; at it, the whole batch goes and a new one starts."""
    queue: BatchQueue = asyncio.Queue()
    run = state_with(2)
    await run.pass_on(queue, 3)
    assert queue.empty()
    assert len(run.batch) == 2
    run.batch.append(Candidate("k2", 1, 1))
    await run.pass_on(queue, 3)
    batch = queue.get_nowait()
    assert batch is not None
    assert [c.key for c in batch] == ["k0", "k1", "k2"]
    assert run.batch == []


async def test_without_a_size_any_keys_go_and_an_empty_batch_never_does() -> None:
    """`pass_on(queue)` sends a partial batch (a range ended), never an empty one."""
    queue: BatchQueue = asyncio.Queue()
    run = state_with(0)
    await run.pass_on(queue)
    assert queue.empty()
    run = state_with(1)
    await run.pass_on(queue)
    assert queue.qsize() == 1
    assert run.batch == []
