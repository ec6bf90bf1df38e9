"""The first of several attempts to succeed, started one after another (staggered).

`EtcdKV` connects to its endpoints this way. Waiting on one endpoint until it fails
would cost a whole timeout when a member takes connections and never answers.

Design notes: docs/internals/kernel.md, `l0gc.etcd.client` (Connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["first_ready"]

_T = TypeVar("_T")


async def first_ready(
    attempts: Sequence[Callable[[], Awaitable[_T]]],
    *,
    stagger_s: float,
    expected: tuple[type[BaseException], ...],
    failed: Callable[[int, BaseException], object],
    late: Callable[[_T], object],
) -> tuple[_T, int] | None:
    """The result of the first of `attempts` to succeed and its index; None when every
    one failed.

    The first attempt starts alone. The next one starts when the last has neither
    succeeded nor failed after `stagger_s`, or at once when one fails with an
    `expected` exception, which is reported to `failed(index, exc)`. Any other
    exception is raised as it is.

    Once one succeeds, the others are cancelled. Nothing is awaited then, so a cancel
    of the caller cannot lose the result, and a slow cancel does not delay it. One that
    succeeded all the same is handed to `late(result)`, e.g. to close it.
    """
    waiting = iter(range(len(attempts)))
    running: dict[asyncio.Task[_T], int] = {}

    def start_next() -> None:
        index = next(waiting, None)
        if index is not None:
            running[asyncio.ensure_future(attempts[index]())] = index

    def given_up(task: asyncio.Task[_T]) -> None:
        if not task.cancelled() and task.exception() is None:
            late(task.result())

    start_next()
    try:
        while running:
            done, _ = await asyncio.wait(
                running, timeout=stagger_s, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                start_next()
            failures = [(task, exc) for task in done if (exc := task.exception()) is not None]
            for task, exc in failures:
                index = running.pop(task)
                if not isinstance(exc, expected):
                    raise exc
                failed(index, exc)
            for task in done:
                if task in running:
                    return task.result(), running.pop(task)
            for _ in failures:
                start_next()
        return None
    finally:
        for task in running:
            task.cancel()
            task.add_done_callback(given_up)
