"""`l0gc.etcd.stagger.first_ready` on scripted attempts (no network)."""

from __future__ import annotations

import asyncio

import pytest

from l0gc.etcd.stagger import first_ready


async def test_every_attempt_failing_gives_none_each_failure_reported_in_order() -> None:
    failures: list[tuple[int, str]] = []

    async def refused(index: int) -> str:
        raise ConnectionRefusedError(f"no {index}")

    won = await first_ready(
        [lambda i=i: refused(i) for i in range(3)],
        stagger_s=60.0,  # a failure starts the next at once, whatever the stagger
        expected=(OSError,),
        failed=lambda index, exc: failures.append((index, str(exc))),
        late=pytest.fail,
    )
    assert won is None
    assert failures == [(0, "no 0"), (1, "no 1"), (2, "no 2")]


async def test_an_unexpected_error_is_raised_and_the_others_are_given_up() -> None:
    hung_cancelled = asyncio.Event()

    async def hung() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            hung_cancelled.set()
            raise
        return "never"

    async def broken() -> str:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        await first_ready(
            [hung, broken], stagger_s=0.0, expected=(OSError,), failed=pytest.fail, late=pytest.fail
        )
    await asyncio.wait_for(hung_cancelled.wait(), 60)  # a deadline, not a measure
