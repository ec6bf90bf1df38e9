"""How every l0gc process logs: structlog to stderr, secrets redacted (one setup).

`configure_logging` routes structlog to a stream (stderr): JSON lines when it is not a
TTY (for log collectors), a readable console format when it is. A processor drops
secrets: any field whose name looks like a password, secret, token or credential is
replaced by "[redacted]" before rendering. On a console, string values are passed
through `printable` (a partition name or pause reason from etcd may hold terminal
escapes).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from l0gc.display import printable
from l0gc.errors import ConfigError

__all__ = ["LEVELS", "LEVEL_NAMES", "configure_logging", "redact"]

_SECRET_WORDS = ("password", "secret", "token", "credential", "authorization", "access_key")
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
LEVEL_NAMES = tuple(LEVELS)
"""The level names, lowest first (the choices of every --log-level)."""


def redact(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: blank out fields whose names suggest a secret."""
    for name in list(event):
        if any(word in name.lower() for word in _SECRET_WORDS):
            event[name] = "[redacted]"
    return event


def printable_values(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor for the console: escape non-printables in string values.

    A formatted traceback ("exception") keeps its newlines.
    """
    for name, value in event.items():
        if isinstance(value, str) and name != "exception":
            event[name] = printable(value)
    return event


def configure_logging(
    level: str | None = "info", *, stream: TextIO | None = None, json_lines: bool | None = None
) -> None:
    """Route structlog to `stream` (stderr): JSON unless it is a TTY, at `level`.

    `level` None: "warning" on a terminal (info lines would tear a progress line apart;
    `--log-level info` brings them back), "info" otherwise (log collectors want them).
    """
    if level is None:
        level = "warning" if (stream if stream is not None else sys.stderr).isatty() else "info"
    numeric = LEVELS.get(level.lower())
    if numeric is None:
        raise ConfigError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    out = stream if stream is not None else sys.stderr
    as_json = not out.isatty() if json_lines is None else json_lines
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            structlog.processors.format_exc_info,
            *(() if as_json else (printable_values,)),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
