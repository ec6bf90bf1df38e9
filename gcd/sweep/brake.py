"""The brake: may deletion go on? Asked before every DeleteObjects request.

Design notes: docs/internals/sweep.md, `gcd.sweep.brake`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Final, Protocol, runtime_checkable

import structlog

from l0gc.errors import L0gcError

__all__ = ["OPEN", "Brake", "OpenBrake", "PauseBrake", "PauseSource", "brake_for", "until_resumed"]

log = structlog.get_logger("gcd.brake")

DEFAULT_MIN_INTERVAL_S: Final = 0.2
DEFAULT_TIMEOUT_S: Final = 5.0
DEFAULT_POLL_S: Final = 2.0


@runtime_checkable
class PauseSource(Protocol):
    """Where the pause key is read (`WatermarkStore`, `BoundSource`)."""

    async def get_paused(self) -> str | None:
        """The pause reason; None when not paused."""
        ...


class Brake(Protocol):
    """What the deleter asks before each request."""

    @property
    def engaged(self) -> str | None:
        """Why deletion stopped in this round (without asking again); None while it may go on."""
        ...

    async def check(self) -> str | None:
        """None when deletion may go on; else why it must stop (final for the round)."""
        ...

    def reset(self) -> None:
        """Forget the last round's answer (called when a round starts)."""
        ...

    async def pause(self, reason: str) -> None:
        """Stop deletion now, here and (with etcd) for the whole fleet: GC pauses itself."""
        ...


class OpenBrake:
    """A brake that never stops: no pause key to read (no etcd)."""

    @property
    def engaged(self) -> str | None:
        """Always None."""
        return None

    async def check(self) -> str | None:
        """Always None."""
        return None

    def reset(self) -> None:
        """Nothing to forget."""

    async def pause(self, reason: str) -> None:
        """Nothing to pause: without etcd there are no references to conflict with."""
        log.error("sweep.pause_without_etcd", reason=reason)


OPEN: Final = OpenBrake()


@dataclass(eq=False)
class PauseBrake:
    """Stops deletion once the pause key is seen (or cannot be read); see the module docs."""

    source: PauseSource
    _: KW_ONLY
    min_interval_s: float = DEFAULT_MIN_INTERVAL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    clock: Callable[[], float] = time.monotonic
    reads: int = field(default=0, init=False)
    """Pause-key reads started (for tests and logs)."""
    _engaged: str | None = field(default=None, init=False)
    _read_at: float | None = field(default=None, init=False)
    _reading: asyncio.Task[str | None] | None = field(default=None, init=False)

    @property
    def engaged(self) -> str | None:
        """Why deletion stopped in this round; None while it may go on."""
        return self._engaged

    def reset(self) -> None:
        """Re-arm for a new round: the next check reads the pause key again."""
        self._engaged = None
        self._read_at = None

    async def check(self) -> str | None:
        """None when deletion may go on; else why not. Reads etcd at most every interval."""
        if self._engaged is not None:
            return self._engaged
        fresh = self._read_at is not None and self.clock() - self._read_at < self.min_interval_s
        if fresh and self._reading is None:
            return None
        if self._reading is None:
            self.reads += 1
            self._reading = asyncio.create_task(self._read())
        reading = self._reading
        try:
            reason = await asyncio.shield(reading)
        finally:
            if self._reading is reading and reading.done():
                self._reading = None
        if reason is not None and self._engaged is None:
            self._engaged = reason
            log.warning("sweep.brake_engaged", reason=reason)
        return self._engaged

    async def pause(self, reason: str) -> None:
        """Engage for this round at once, and write the pause key through the source's
        store (`gcd pause` with `reason`); a failed write is logged: this process has
        stopped anyway, and its next round reads the key again."""
        if self._engaged is None:
            self._engaged = f"paused: {reason}"
        setter = getattr(self.source, "set_paused", None)
        log.error("sweep.gc_paused_itself", reason=reason)
        if setter is None:
            return
        try:
            async with asyncio.timeout(self.timeout_s):
                await setter(reason)
        except Exception as exc:  # noqa: BLE001 - stopped here already; say why the fleet is not
            log.error("sweep.pause_write_failed", reason=reason, error=repr(exc))

    async def _read(self) -> str | None:
        """One read of the pause key: the reason to stop, or None."""
        try:
            async with asyncio.timeout(self.timeout_s):
                paused = await self.source.get_paused()
        except TimeoutError:
            return f"pause state unknown: reading it from etcd took over {self.timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - fail closed: an unreadable pause stops deletion
            return f"pause state unknown: etcd could not be read during the round ({exc!r})"
        finally:
            self._read_at = self.clock()
        return None if paused is None else f"paused during the round: {paused}"


def brake_for(source: object) -> Brake:
    """A `PauseBrake` on `source` when it can read the pause key, else `OPEN`."""
    return PauseBrake(source) if isinstance(source, PauseSource) else OPEN


async def until_resumed(
    source: PauseSource,
    *,
    poll_s: float = DEFAULT_POLL_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Return once the pause key is absent; poll it every `poll_s` (errors: poll again)."""
    while True:
        try:
            if await source.get_paused() is None:
                return
        except (L0gcError, OSError) as exc:
            log.debug("daemon.pause_poll_failed", error=str(exc))
        await sleep(poll_s)
