"""Virtual time for the simulation: a clock the simulator moves, and an event loop on it.

Everything in l0gc that waits does so on the event loop's clock (`asyncio.timeout`,
`asyncio.sleep`, fence deadlines measured with `loop.time()`) or on an injected clock
(`now`/`clock` parameters). The simulation gives both the same `VirtualClock`, so a
30 s fence deadline passes when the simulator has moved the clock by 30 s, not after
30 real seconds, and a run is the same whatever the machine's speed.

`VirtualTimeLoop` is a normal selector event loop whose `time()` is the virtual clock
and whose selector never blocks: the loop runs whatever is ready, fires the timers that
are due at the current virtual time, and never waits for real time to pass. Virtual
time moves only when the simulator calls `VirtualClock.advance`. A coroutine driven by
`run_until_complete` must therefore never wait for virtual time itself (it would spin
forever): the loop raises `VirtualTimeStall` after a bound of idle polls instead.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

__all__ = ["VirtualClock", "VirtualTimeLoop", "VirtualTimeStall"]

_MAX_IDLE_POLLS = 10_000


class VirtualTimeStall(RuntimeError):
    """The driving coroutine waited for virtual time, which only the simulator can move."""


class VirtualClock:
    """Seconds on a simulated clock; call it to read, `advance` to move it."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds` (>= 0)."""
        if seconds < 0:
            raise ValueError(f"virtual time only moves forward, got {seconds} s")
        self.now += seconds


class _PollingSelector(selectors.DefaultSelector):
    """A selector that polls and never sleeps; counts idle polls to detect a stall."""

    def __init__(self) -> None:
        super().__init__()
        self.idle_polls = 0

    def select(self, timeout: float | None = None) -> list[Any]:
        events: list[Any] = super().select(0)
        if timeout is None or timeout > 0:
            # The loop had nothing ready and wanted to sleep: only time could help.
            self.idle_polls += 1
            if self.idle_polls > _MAX_IDLE_POLLS:
                raise VirtualTimeStall(
                    "the simulation's driver awaited something that needs virtual time to "
                    "pass; run it as a task and let the simulator advance the clock"
                )
        else:
            self.idle_polls = 0
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock is `clock` and which never sleeps in real time."""

    def __init__(self, clock: VirtualClock) -> None:
        self._selector_impl = _PollingSelector()
        super().__init__(selector=self._selector_impl)
        self._virtual_clock = clock

    def time(self) -> float:
        """The virtual time (timers and `asyncio.timeout` use it)."""
        return self._virtual_clock.now

    def has_ready(self) -> bool:
        """True while callbacks are queued to run (something can still make progress)."""
        return bool(self._ready)  # type: ignore[attr-defined]
