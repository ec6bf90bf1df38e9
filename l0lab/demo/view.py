"""What the demo shows while it runs: a live view on a terminal, log lines otherwise.

`Snapshot` is everything shown at one moment; `render` turns it into the lines of the
live view (pure, tested without a terminal) and `progress_fields` into the key/values
of a `demo.progress` log event. `LiveView` samples a snapshot about once a second and
redraws the view in place on a TTY's stderr, or logs `demo.progress` every
`log_every_s` seconds when stderr is not a terminal (CI, `| tee`, a log collector).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import structlog

__all__ = ["LiveView", "Snapshot", "progress_fields", "render"]

_log = structlog.get_logger("gcd.demo")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The demo's state at one moment."""

    phase: str
    elapsed_s: float
    duration_s: float
    cluster_epoch: int | None
    safe_epoch: int | None
    pinned_by: tuple[str, ...]
    pinned_watermark: int | None
    blocked_reason: str | None
    written: int
    live: int
    garbage: int
    deleted: int
    orphans: int
    live_lost: int
    list_requests: int
    delete_requests: int
    deletes_per_s: float
    stalled_partition: str | None = None

    @property
    def lag(self) -> int | None:
        """Cluster epoch minus M."""
        if self.cluster_epoch is None or self.safe_epoch is None:
            return None
        return self.cluster_epoch - self.safe_epoch


def _pinning(snap: Snapshot) -> str:
    if snap.blocked_reason is not None:
        return f"BLOCKED: {snap.blocked_reason}"
    if not snap.pinned_by:
        return "pinned by the cluster epoch (every partition is ahead)"
    names = ", ".join(snap.pinned_by[:3]) + (" ..." if len(snap.pinned_by) > 3 else "")
    why = ""
    if snap.stalled_partition is not None and snap.stalled_partition in snap.pinned_by:
        why = "  <- its reconciler is stalled"
    return f"pinned by {names} (M(p) = {snap.pinned_watermark}){why}"


def render(snap: Snapshot) -> list[str]:
    """The lines of the live view."""
    lag = "-" if snap.lag is None else str(snap.lag)
    epoch = "-" if snap.cluster_epoch is None else str(snap.cluster_epoch)
    safe = "-" if snap.safe_epoch is None else str(snap.safe_epoch)
    lost = f"{snap.live_lost}" + ("  !! LIVE OBJECTS LOST" if snap.live_lost else "  (ok)")
    return [
        f"l0gc demo  {snap.phase:<12} {snap.elapsed_s:5.1f} s / {snap.duration_s:.0f} s",
        (
            f"  cluster epoch {epoch:>6}   global M {safe:>6}   lag {lag:>3} epoch"
            f"{'' if lag == '1' else 's'}"
        ),
        f"  {_pinning(snap)}",
        (
            f"  objects   written {snap.written:>6}   live {snap.live:>6}   garbage "
            f"{snap.garbage:>6}   deleted {snap.deleted:>6}   orphans {snap.orphans:>4}"
        ),
        (
            f"  sweeper   LIST {snap.list_requests:>6}   DELETE {snap.delete_requests:>6}   "
            f"{snap.deletes_per_s:7.1f} deletes/s (last 5 s)"
        ),
        f"  live objects lost  {lost}",
    ]


def progress_fields(snap: Snapshot) -> dict[str, Any]:
    """The key/values of a `demo.progress` event."""
    fields = asdict(snap)
    fields["elapsed_s"] = round(snap.elapsed_s, 1)
    fields["deletes_per_s"] = round(snap.deletes_per_s, 1)
    fields["pinned_by"] = list(snap.pinned_by)
    fields["lag"] = snap.lag
    return fields


class LiveView:
    """Samples the demo about once a second and shows it (see the module docstring)."""

    def __init__(
        self,
        sample: Callable[[], Awaitable[Snapshot]],
        stream: TextIO,
        *,
        tty: bool,
        log_every_s: float,
        every_s: float = 1.0,
    ) -> None:
        self._sample = sample
        self._stream = stream
        self._tty = tty
        self._log_every_s = log_every_s
        self._every_s = every_s
        self._drawn = 0
        self.last: Snapshot | None = None

    def _draw(self, snap: Snapshot) -> None:
        # A wrapped line would break the cursor-up redraw: cut lines to the terminal.
        width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
        lines = [line[:width] for line in render(snap)]
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        self._stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        self._stream.flush()
        self._drawn = len(lines)

    async def show_once(self) -> Snapshot:
        """Sample and show (draw on a TTY; log otherwise)."""
        snap = await self._sample()
        self.last = snap
        if self._tty:
            self._draw(snap)
        else:
            _log.info("demo.progress", **progress_fields(snap))
        return snap

    async def run(self, stop: asyncio.Event) -> None:
        """Show until `stop` is set, then once more."""
        every = self._every_s if self._tty else self._log_every_s
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every)
            await self.show_once()
