"""Signals of a long-running command, set up in one place.

Every long-running l0gc command (`watermark serve`, `gcd sweep`, `gcd daemon`, `gcd
dev`, `gcd demo`, `gcd chaos` and its writers) stops the same way: SIGTERM (Kubernetes,
systemd) or SIGINT (Ctrl-C) asks for a clean stop, which sets an `asyncio.Event` the
command's loops watch; what a *repeated* signal does differs (a second Ctrl-C leaves at
once with exit 130; a second signal aborts a demo). Each used to install and remove its
own loop handlers. Here:

- `StopOnSignals(stop, on_signal=..., again=...)`: the handler. Each stop signal is
  recorded in `received` (in order), reported to `on_signal` (log it) and sets `stop`;
  once one was received, `again(signum)` is asked first and, when it returns True, has
  handled the repeat alone (`interrupt_on_second_ctrl_c` raises KeyboardInterrupt out of
  the event loop for a second SIGINT).
- `StopOnSignals.installed(signals, extra=...)`: the handlers on the running loop while a
  block runs, removed after it (`extra`: other signals, e.g. SIGHUP to reload tokens).
  An empty `signals` installs nothing (a command embedded in another process).
- Before the loop runs (or while stopping child servers), `ignored(...)` holds the stop
  signals off and `sigterm_as_interrupt()` makes SIGTERM interrupt like Ctrl-C, both
  restoring the previous handlers after the block.
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
