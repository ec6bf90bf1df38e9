"""How gcd commands talk to people and machines.

- `configure_logging`: structlog to stderr; JSON lines when stderr is not a TTY (for
  log collectors), a readable console format when it is. A processor drops secrets:
  any field whose name looks like a password, secret, token or credential is replaced
  by "[redacted]" before rendering. On a console, string values are passed through
  `printable` (a partition name or pause reason from etcd may hold terminal escapes).
- `write_json`: one JSON document on stdout, always with a "version" field, always
  valid JSON (`watermark.strictjson.dumps`: a non-finite number is written as null).
- `printable`: the one helper for any text output of a string that came from etcd or a
  bucket listing: non-printable characters become backslash escapes.
- `ProgressLine`: a single self-overwriting status line on a TTY's stderr (objects
  listed and deleted, bytes, delete rate), refreshed from a counter source.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO

import structlog

from gcd.errors import ConfigError
from gcd.report import RoundCounts
from watermark import strictjson
from watermark.display import printable

__all__ = ["ProgressLine", "configure_logging", "human_bytes", "printable", "redact", "write_json"]

_SECRET_WORDS = ("password", "secret", "token", "credential", "authorization", "access_key")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}  # fmt: skip


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
    level: str = "info", *, stream: TextIO | None = None, json_lines: bool | None = None
) -> None:
    """Route structlog to `stream` (stderr): JSON unless it is a TTY, at `level`."""
    numeric = _LEVELS.get(level.lower())
    if numeric is None:
        raise ConfigError(f"log level {level!r} is not one of {', '.join(_LEVELS)}")
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


def write_json(document: dict[str, Any], stream: TextIO | None = None) -> None:
    """Write one JSON document and a newline to stdout; it must carry "version"."""
    if "version" not in document:
        raise ValueError("JSON output must carry a 'version' field")
    out = stream if stream is not None else sys.stdout
    out.write(strictjson.dumps(document, what="JSON output", nonfinite_as_null=True) + "\n")
    out.flush()


def human_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} PiB"  # pragma: no cover - loop always returns


class ProgressLine:
    """Refreshes one status line on a TTY while a round runs (no-op when not a TTY)."""

    def __init__(
        self,
        counts: Callable[[], RoundCounts | None],
        *,
        stream: TextIO | None = None,
        every_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._counts = counts
        self._stream = stream if stream is not None else sys.stderr
        self._every_s = every_s
        self._clock = clock
        self._started = clock()
        self._task: asyncio.Task[None] | None = None
        self.enabled = self._stream.isatty()

    def render(self) -> str:
        """The current status line."""
        counts = self._counts() or RoundCounts()
        elapsed = max(self._clock() - self._started, 1e-9)
        return (
            f"listed {counts.listed:,}  eligible {counts.eligible:,}  deleted {counts.deleted:,}"
            f" ({human_bytes(counts.deleted_bytes)})  {counts.deleted / elapsed:,.0f} obj/s"
            f"  errors {counts.errors:,}"
        )

    async def _refresh(self) -> None:
        while True:
            self._stream.write("\r\x1b[2K" + self.render())
            self._stream.flush()
            await asyncio.sleep(self._every_s)

    async def __aenter__(self) -> ProgressLine:
        if self.enabled:
            self._task = asyncio.create_task(self._refresh())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._stream.write("\r\x1b[2K" + self.render() + "\n")
            self._stream.flush()
