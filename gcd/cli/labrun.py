"""What `gcd demo` and `gcd chaos` share: their flags from `Option` tables, the log level
and seed, the two-signal stop, and the report they end with.

The lab commands read flags only (no L0GC_* variables, no config file: a lab run never
points at real servers), so an `Option` here is a plain argparse flag, its help as
written, its value parsed when the command line is.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

import structlog

from gcd.cli.output import write_json
from l0gc import logs
from l0gc.logs import LEVEL_NAMES
from l0gc.options import Option
from l0gc.process.signals import StopOnSignals

__all__ = [
    "add_flags",
    "configure_logging",
    "log_level_flag",
    "seed",
    "until_stopped",
    "write_report",
]

_log = structlog.get_logger("gcd.lab")
_T = TypeVar("_T")


class _Report(Protocol):
    """A lab run's verdict: `to_dict` is its --json document."""

    def to_dict(self) -> dict[str, Any]: ...


_R = TypeVar("_R", bound=_Report)


def _typed(parse: Callable[[object], Any]) -> Callable[[str], Any]:
    """`parse` as an argparse type: a ValueError is a usage error naming the value."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def add_flags(parser: argparse.ArgumentParser, title: str, options: Iterable[Option]) -> None:
    """`options` in a group named `title`, each a switch (store_true), one of its
    `values`, or a value `parse` checks."""
    group = parser.add_argument_group(title)
    for option in options:
        if option.switch:
            group.add_argument(option.flag, action="store_true", help=option.help)
        elif option.values:
            group.add_argument(
                option.flag, choices=option.values, default=option.default, help=option.help
            )
        else:
            group.add_argument(
                option.flag,
                type=_typed(option.parse),
                default=option.default,
                metavar=option.metavar,
                help=option.help,
            )


def log_level_flag(what: str, more: str = "") -> Option:
    """--log-level of a lab command: the level of `what` on stderr (see `configure_logging`)."""
    return Option(
        "--log-level",
        str,
        None,
        f"level of {what} on stderr (default warning, or error on a terminal, where the "
        f"live view shows the state){more}",
        values=LEVEL_NAMES,
    )


def configure_logging(args: argparse.Namespace, *, werkzeug: int, always: str = "") -> bool:
    """Logs to stderr from --log-level up (else error on a terminal, where the live view
    shows the state, else warning), the events named `always`... at any level (none
    when empty); werkzeug's (moto's HTTP server logs every request) from `werkzeug` up.
    Returns whether stderr is a terminal."""
    tty = sys.stderr.isatty()
    level = args.log_level or ("error" if tty else "warning")
    logging.getLogger("werkzeug").setLevel(werkzeug)
    if not always:
        logs.configure_logging(level)
        return tty
    logs.configure_logging("debug" if level == "debug" else "info")
    threshold = LEVEL_NAMES.index(level)

    def keep(_logger: object, method: str, event: Any) -> Any:
        name = str(event.get("event", ""))
        below = method in LEVEL_NAMES and LEVEL_NAMES.index(method) < threshold
        if below and not name.startswith(always):
            raise structlog.DropEvent
        return event

    processors = list(structlog.get_config()["processors"])
    structlog.configure(processors=[keep, *processors])
    return tty


def seed(args: argparse.Namespace) -> int:
    """--seed, else a random one (the run prints it, so it can be replayed)."""
    return int(args.seed) if args.seed is not None else random.SystemRandom().randrange(2**31)


async def until_stopped(
    run: Callable[[asyncio.Event], Awaitable[_T]],
    command: str,
    detail: str,
    *,
    on_abort: Callable[[signal.Signals], object] | None = None,
) -> _T:
    """`run(stop)`: the first SIGINT/SIGTERM sets `stop` (logged as `{command}.stopping`
    with `detail`), a second calls `on_abort` and cancels the run."""
    stop = asyncio.Event()
    task = asyncio.current_task()
    assert task is not None

    def stopping(signum: signal.Signals) -> None:
        _log.warning(f"{command}.stopping", signal=signum.name, detail=detail)

    def abort(signum: signal.Signals) -> bool:
        if on_abort is not None:
            on_abort(signum)
        task.cancel()
        return True

    with StopOnSignals(stop, on_signal=stopping, again=abort).installed():
        return await run(stop)


def write_report(
    args: argparse.Namespace,
    report: _R,
    text_report: Callable[[_R], str],
    exit_code: Callable[[_R], int],
) -> int:
    """The report on stdout, as JSON with --json, else as text; its exit code."""
    if args.json:
        write_json(report.to_dict())
    else:
        sys.stdout.write(text_report(report))
    return exit_code(report)
