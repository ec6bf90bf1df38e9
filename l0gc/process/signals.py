"""Signals of a long-running command, set up in one place.

Design notes: docs/internals/kernel.md, `l0gc.process.signals`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import types
from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = [
    "STOP_SIGNALS",
    "StopOnSignals",
    "ignored",
    "interrupt_on_second_ctrl_c",
    "sigterm_as_interrupt",
]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
"""The signals that ask a command for a clean stop."""


def interrupt_on_second_ctrl_c(signum: signal.Signals) -> bool:
    """A repeat that is SIGINT raises KeyboardInterrupt (out of the loop: exit 130 at
    once); any other repeat is a stop signal like the first (returns False)."""
    if signum is signal.SIGINT:
        raise KeyboardInterrupt
    return False


class StopOnSignals:
    """Stop signals as a clean stop of `stop`; see the module docstring."""

    def __init__(
        self,
        stop: asyncio.Event,
        *,
        on_signal: Callable[[signal.Signals], object] | None = None,
        again: Callable[[signal.Signals], bool] | None = None,
    ) -> None:
        self.stop = stop
        self.received: list[signal.Signals] = []
        """Every stop signal received (a repeat `again` handled is not), in order."""
        self._on_signal = on_signal
        self._again = again

    @property
    def first(self) -> str | None:
        """The name of the first signal received ("SIGINT", "SIGTERM"), if any."""
        return self.received[0].name if self.received else None

    def __call__(self, signum: signal.Signals) -> None:
        if self.received and self._again is not None and self._again(signum):
            return
        self.received.append(signum)
        if self._on_signal is not None:
            self._on_signal(signum)
        self.stop.set()

    @contextlib.contextmanager
    def installed(
        self,
        signals: Iterable[signal.Signals] = STOP_SIGNALS,
        *,
        extra: Mapping[signal.Signals, Callable[[], object]] | None = None,
    ) -> Iterator[StopOnSignals]:
        """Handle `signals` (and `extra`) on the running loop while the block runs."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        try:
            for signum in signals:
                loop.add_signal_handler(signum, self, signum)
                installed.append(signum)
            for signum, handler in (extra or {}).items():
                loop.add_signal_handler(signum, handler)
                installed.append(signum)
            yield self
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)


@contextlib.contextmanager
def ignored(signals: Iterable[signal.Signals] = STOP_SIGNALS) -> Iterator[None]:
    """`signals` ignored while the block runs (e.g. while stopping child servers that a
    second Ctrl-C must not leave half-stopped); the previous handlers after it."""
    held = {signum: signal.signal(signum, signal.SIG_IGN) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Until an event loop takes over, SIGTERM raises KeyboardInterrupt like Ctrl-C (so
    `finally` blocks run); the previous handler after the block."""

    def interrupt(_signum: int, _frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
