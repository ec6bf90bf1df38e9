"""Bounded waiting for conditions a test cannot be notified about.

Our rule is "no sleeps as synchronisation": a test that needs something to have happened
waits for the event itself (an `asyncio.Event`, a task or `proc.wait()` under a timeout, a
line on a pipe). Some conditions have no such event: a subprocess's HTTP port starting to
answer, a metric on another process's /metrics reaching a value, a value in etcd written by
a background task. For those, and only those, use `wait_until` (async tests) or
`wait_until_sync` (sync tests and fixtures):

    await wait_until(lambda: deleted(10), timeout_s=60, what="10 objects deleted",
                     ignore=(aiohttp.ClientError,), detail=lambda: log.read_text()[-3000:])

Both re-check `predicate` every `interval_s` (default `POLL_INTERVAL_S`, the one place the
polling interval is set) until it returns something truthy, and raise `AssertionError`
naming `what`, the elapsed time, the last ignored error and `detail()` once `timeout_s` has
passed. The interval is not synchronisation: the deadline bounds the wait, and the
predicate decides when it ends.

Predicate contract:
- It is called at least once, even if `timeout_s` is tiny, and once more at the deadline.
- Exceptions listed in `ignore` mean "not yet" (e.g. connection refused while a server
  starts). Any other exception, including an `AssertionError` such as "the process exited",
  ends the wait at once and propagates unchanged, so a predicate can fail fast.
- `wait_until` accepts a sync predicate or one returning an awaitable. An awaitable that
  hangs is cancelled at the deadline (the final check gets at least `interval_s`), so an
  async wait ends within about `timeout_s + interval_s`. A sync predicate cannot be
  interrupted: it must bound its own blocking calls (e.g. `urlopen(..., timeout=1)`), and
  it blocks the event loop while it runs.
- `wait_until_sync` accepts only a sync predicate; returning an awaitable is a `TypeError`
  (a coroutine object is truthy and would otherwise "succeed" without running).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

POLL_INTERVAL_S = 0.05
"""How often a condition is re-checked. The only polling interval in the test suite."""


def _check_limits(timeout_s: float, interval_s: float) -> None:
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if interval_s <= 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")


def _timed_out(
    what: str,
    timeout_s: float,
    started: float,
    last_error: BaseException | None,
    detail: Callable[[], str] | None,
) -> AssertionError:
    elapsed = time.monotonic() - started
    message = f"timed out after {elapsed:.2f}s (limit {timeout_s}s) waiting for {what}"
    if last_error is not None:
        message += f"\nlast ignored error: {last_error!r}"
    if detail is not None:
        message += f"\n{detail()}"
    return AssertionError(message)


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = POLL_INTERVAL_S,
    ignore: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] | None = None,
) -> None:
    """Wait until `predicate()` is truthy, re-checking every `interval_s`, for async tests.

    `predicate` may be sync or return an awaitable. Raises `AssertionError` mentioning
    `what` and the elapsed time if it is still falsy after `timeout_s`; see the module
    docstring for `ignore` and `detail`.
    """
    _check_limits(timeout_s, interval_s)
    started = time.monotonic()
    deadline = started + timeout_s
    last_error: BaseException | None = None
    while True:
        limit: asyncio.Timeout | None = None
        try:
            result = predicate()
            if inspect.isawaitable(result):
                # A hanging check must not outlive the deadline, but the last check (made
                # at the deadline) still gets one interval to answer.
                limit = asyncio.timeout(max(deadline - time.monotonic(), interval_s))
                async with limit:
                    result = await result
        except BaseException as exc:
            if limit is not None and limit.expired():
                raise _timed_out(what, timeout_s, started, last_error, detail) from None
            if not isinstance(exc, ignore):
                raise
            last_error, result = exc, False
        if result:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(what, timeout_s, started, last_error, detail)
        await asyncio.sleep(min(interval_s, remaining))


def wait_until_sync(
    predicate: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = POLL_INTERVAL_S,
    ignore: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] | None = None,
) -> None:
    """Wait until `predicate()` is truthy, re-checking every `interval_s`, for sync tests.

    The sync twin of `wait_until`; `predicate` must be sync and bound its own blocking
    calls. Raises `AssertionError` mentioning `what` and the elapsed time on timeout.
    """
    _check_limits(timeout_s, interval_s)
    started = time.monotonic()
    deadline = started + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            result: object = predicate()  # checked: an awaitable here is a caller's mistake
        except ignore as exc:
            last_error, result = exc, False
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # no "never awaited" warning on top of the TypeError
            raise TypeError(f"wait_until_sync got an awaitable predicate while waiting for {what}")
        if result:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(what, timeout_s, started, last_error, detail)
        time.sleep(min(interval_s, remaining))
