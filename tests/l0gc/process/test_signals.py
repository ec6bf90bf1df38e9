"""The one signal helper: a real SIGTERM stops cleanly, a second Ctrl-C interrupts,
handlers are removed after the block, and signals can be held off."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from l0gc.process.signals import (
    StopOnSignals,
    ignored,
    interrupt_on_second_ctrl_c,
    sigterm_as_interrupt,
)


async def test_a_real_sigterm_sets_stop_and_the_handlers_go_after_the_block() -> None:
    """SIGTERM sent to this process sets `stop`, is recorded and reported; SIGHUP runs its
    extra handler; after the block the loop no longer handles either."""
    stop = asyncio.Event()
    seen: list[str] = []
    hup = asyncio.Event()
    stopper = StopOnSignals(stop, on_signal=lambda signum: seen.append(signum.name))
    loop = asyncio.get_running_loop()
    with stopper.installed(extra={signal.SIGHUP: hup.set}):
        os.kill(os.getpid(), signal.SIGHUP)
        async with asyncio.timeout(5):
            await hup.wait()
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        async with asyncio.timeout(5):
            await stop.wait()
    assert (stopper.received, stopper.first, seen) == ([signal.SIGTERM], "SIGTERM", ["SIGTERM"])
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        assert not loop.remove_signal_handler(signum)  # nothing left installed


def test_a_second_ctrl_c_interrupts_and_a_second_sigterm_stops_again() -> None:
    """With `interrupt_on_second_ctrl_c`: SIGTERM then SIGTERM are two stops; a SIGINT
    after them raises KeyboardInterrupt and is not recorded as a stop."""
    stop = asyncio.Event()
    stopper = StopOnSignals(stop, again=interrupt_on_second_ctrl_c)
    stopper(signal.SIGTERM)
    stopper(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        stopper(signal.SIGINT)
    assert stopper.received == [signal.SIGTERM, signal.SIGTERM]
    assert stop.is_set()


def test_an_again_handler_that_takes_the_repeat_sets_nothing_more() -> None:
    """A repeat `again` handles (a demo aborting) is neither recorded nor reported."""
    aborted: list[signal.Signals] = []
    reported: list[signal.Signals] = []
    stopper = StopOnSignals(
        asyncio.Event(),
        on_signal=reported.append,
        again=lambda signum: aborted.append(signum) is None,
    )
    stopper(signal.SIGINT)
    stopper(signal.SIGTERM)
    assert (stopper.received, reported, aborted) == (
        [signal.SIGINT],
        [signal.SIGINT],
        [signal.SIGTERM],
    )


async def test_no_signals_installs_nothing() -> None:
    """An empty signal list (a command embedded in another process) leaves the loop be."""
    loop = asyncio.get_running_loop()
    with StopOnSignals(asyncio.Event()).installed(()):
        assert not loop.remove_signal_handler(signal.SIGTERM)


def test_held_off_signals_do_nothing_and_the_handlers_come_back() -> None:
    """Inside `ignored` a SIGINT to this process is dropped; `sigterm_as_interrupt`
    makes SIGTERM a KeyboardInterrupt; both restore the handlers they replaced."""
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with ignored():
        os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with sigterm_as_interrupt(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode
    assert signal.getsignal(signal.SIGTERM) == before[1]
