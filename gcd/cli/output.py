"""How gcd commands talk to people and machines.

- Logging is configured by `l0gc.logs.configure_logging` (one setup for every
  l0gc process).
- `write_json`: one JSON document on stdout, always with a "version" field, always
  valid JSON (`l0gc.strictjson.dumps`: a non-finite number is written as null).
- `ProgressLine`: a single self-overwriting status line on a TTY's stderr (objects
  listed and deleted, bytes, delete rate), refreshed from a counter source.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from gcd.observe.report import RoundCounts
from l0gc import strictjson
from l0gc.contract.namespace import LATEST_PAUSE_AT

__all__ = ["ProgressLine", "human_age", "human_bytes", "utc_text", "write_json"]


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
            f"{_progress(counts, elapsed)}listed {counts.listed:,}  eligible "
            f"{counts.eligible:,}  deleted {counts.deleted:,}"
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


def _progress(counts: RoundCounts, elapsed: float) -> str:
    """'42% ETA ~13s  ': the share of the round's listing prefixes listed to their end
    and the time left at that pace (an estimate: prefixes differ in size); '' before the
    listing is planned, and no ETA before the first prefix ends."""
    if not counts.prefixes_total:
        return ""
    done = min(counts.prefixes_done, counts.prefixes_total) / counts.prefixes_total
    if not done:
        return "0%  "
    left = elapsed * (1 - done) / done
    return f"{done:.0%} ETA ~{_duration(left)}  "


def _duration(seconds: float) -> str:
    """45 -> '45s', 150 -> '2m30s', 7300 -> '2h01m'."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def utc_text(at: float | None) -> str | None:
    """Unix seconds as 2026-11-22T00:44:38Z; None when absent or no date can show it (a
    hand-written record's 1e308 must not crash a report)."""
    if at is None or not 0 <= at <= LATEST_PAUSE_AT:
        return None
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_age(seconds: float | None) -> str:
    """12.3 -> '12.3s ago', 300 -> '5m ago'; '-' when unknown."""
    if seconds is None:
        return "-"
    for limit, unit, size in ((60, "s", 1), (3600, "m", 60), (86400, "h", 3600)):
        if seconds < limit:
            value = seconds / size
            return f"{value:.1f}{unit} ago" if unit == "s" else f"{value:.0f}{unit} ago"
    return f"{seconds / 86400:.0f}d ago"
