"""The driver follows the pause key while a Spark job runs (`gcd.spark.brake` serves it).

Design notes: docs/internals/spark.md, `gcd.spark.brake`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

import structlog

from gcd.spark.brake import DriverBrake
from gcd.sweep.brake import PauseBrake, PauseSource

__all__ = ["POLL_S", "following"]

log = structlog.get_logger("gcd.spark")

POLL_S: Final = 0.2
"""How often the driver reads the pause key while the job runs."""


@contextlib.asynccontextmanager
async def following(
    source: PauseSource | None, *, poll_s: float = POLL_S
) -> AsyncIterator[DriverBrake | None]:
    """A `DriverBrake` kept up to date from the pause key while the block runs (reads
    through the daemon's `PauseBrake`: fail closed, bounded by its timeout); None
    without etcd (`--safe-epoch` alone: no pause to follow)."""
    if source is None:
        yield None
        return
    brake = DriverBrake()
    pause = PauseBrake(source, min_interval_s=0.0)

    async def follow() -> None:
        while brake.reason is None:
            reason = await pause.check()
            if reason is not None:
                if brake.stop(reason):
                    log.warning("spark.brake_engaged", reason=reason)
                return
            await asyncio.sleep(poll_s)

    task = asyncio.create_task(follow())
    try:
        yield brake
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        brake.close()
