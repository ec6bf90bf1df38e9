"""What `gcd chaos` shows while it runs: a live view on a terminal, log lines otherwise.

`render` turns a `Progress` into the lines of the view (pure); `ChaosView` samples one
about once a second and redraws it in place on a TTY's stderr, or logs
`chaos.progress` every `log_every_s` seconds elsewhere (CI, pipes), as `gcd demo` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TextIO

import structlog

__all__ = ["ChaosView", "Progress", "render"]

_log = structlog.get_logger("gcd.chaos")


@dataclass(frozen=True, slots=True)
class Progress:
    """The run at one moment."""

    phase: str
    elapsed_s: float
    duration_s: float
    seed: int
    fault: str | None
    faults: int
    cluster_epoch: int | None
    safe_epoch: int | None
    pinned_by: tuple[str, ...]
    blocked_reason: str | None
    down: tuple[str, ...]
    frozen: tuple[str, ...]
    committed: int
    deleted: int
    list_requests: int
    delete_requests: int
    first_loss: str | None


def _epochs(p: Progress) -> str:
    epoch = "-" if p.cluster_epoch is None else str(p.cluster_epoch)
    safe = "-" if p.safe_epoch is None else str(p.safe_epoch)
    lag = "-"
    if p.cluster_epoch is not None and p.safe_epoch is not None:
        lag = str(p.cluster_epoch - p.safe_epoch)
    why = (
        f"BLOCKED: {p.blocked_reason}"
        if p.blocked_reason
        else (f"pinned by {', '.join(p.pinned_by[:3])}" if p.pinned_by else "")
    )
    return f"  etcd      cluster epoch {epoch:>5}   global M {safe:>5}   lag {lag:>3}   {why}"


def render(p: Progress) -> list[str]:
    """The lines of the live view."""
    down = ", ".join(p.down) or "-"
    frozen = ", ".join(p.frozen) or "-"
    lost = "0 (ok)" if p.first_loss is None else f"!! {p.first_loss}"
    return [
        f"l0gc chaos  {p.phase:<10} {p.elapsed_s:6.1f} s / {p.duration_s:.0f} s   seed {p.seed}",
        f"  nemesis   {p.fault or 'quiet'}   ({p.faults} faults so far)",
        _epochs(p),
        f"  processes down: {down}   frozen: {frozen}",
        (
            f"  objects   committed {p.committed:>6}   deleted {p.deleted:>6}   "
            f"(LIST {p.list_requests}, DELETE {p.delete_requests} through the proxy)"
        ),
        f"  live objects lost  {lost}",
    ]


class ChaosView:
    """Samples the run about once a second and shows it."""

    def __init__(
        self, sample: Callable[[], Progress], stream: TextIO, *, tty: bool, log_every_s: float = 5.0
    ) -> None:
        self._sample = sample
        self._stream = stream
        self._tty = tty
        self._log_every_s = log_every_s
        self._drawn = 0

    def show_once(self) -> Progress:
        """Sample and show (draw on a TTY; log otherwise)."""
        progress = self._sample()
        if self._tty:
            width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
            lines = [line[:width] for line in render(progress)]
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self._stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._stream.flush()
            self._drawn = len(lines)
        else:
            fields = asdict(progress)
            fields["elapsed_s"] = round(progress.elapsed_s, 1)
            _log.info("chaos.progress", **fields)
        return progress

    async def run(self, stop: asyncio.Event) -> None:
        """Show until `stop`, then once more."""
        every = 1.0 if self._tty else self._log_every_s
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            self.show_once()
