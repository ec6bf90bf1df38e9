"""The writer side of the cluster epoch: a cached clock and the stamping rule.

Design notes: docs/internals/publisher.md, `watermark.service.clock`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import structlog

from l0gc.errors import ConfigError, EtcdUnavailable, WatermarkUnavailable

__all__ = ["EpochClock", "EpochSource", "stamp_epoch"]

_log = structlog.get_logger(__name__)


def stamp_epoch(cached_epoch: int, partition_created_epochs: Iterable[int]) -> int:
    """The epoch to stamp on an object: max(cached epoch, each partition's creation epoch)."""
    return max((cached_epoch, *partition_created_epochs))


class EpochSource(Protocol):
    """Where the clock reads the cluster epoch (a `WatermarkStore`)."""

    async def get_cluster_epoch(self) -> int:
        """The current cluster epoch."""
        ...


class EpochClock:
    """A cached cluster epoch, refreshed from `store` at most every `refresh_interval_s`."""

    def __init__(
        self,
        store: EpochSource,
        refresh_interval_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if not refresh_interval_s >= 0:
            raise ConfigError(f"epoch refresh interval {refresh_interval_s!r} must be >= 0 s")
        self._store = store
        self._interval_s = refresh_interval_s
        self._now = now
        self._cached: int | None = None
        self._refreshed_at: float | None = None
        self._retry_at: float | None = None  # after a failed refresh, serve the cache until then
        self._lock = asyncio.Lock()

    @property
    def cached(self) -> int | None:
        """The cached epoch without any I/O; None before the first refresh."""
        return self._cached

    @property
    def age_s(self) -> float | None:
        """Seconds since the last successful refresh; None before the first."""
        return None if self._refreshed_at is None else self._now() - self._refreshed_at

    def _fresh(self) -> bool:
        if self._retry_at is not None and self._now() < self._retry_at:
            return True
        age = self.age_s
        return age is not None and age < self._interval_s

    async def refresh(self) -> int:
        """Read the cluster epoch now; the cache only moves forward. Errors propagate."""
        epoch = await self._store.get_cluster_epoch()
        if self._cached is None or epoch > self._cached:
            self._cached = epoch
        elif epoch < self._cached:
            _log.warning("epoch_clock.went_backwards", cached=self._cached, read=epoch)
        self._refreshed_at = self._now()
        self._retry_at = None
        return self._cached

    async def current(self) -> int:
        """The cached epoch, refreshed first when older than the interval."""
        if self._fresh():
            assert self._cached is not None
            return self._cached
        async with self._lock:  # one refresh for many concurrent callers
            if self._fresh():
                assert self._cached is not None
                return self._cached
            try:
                return await self.refresh()
            except (EtcdUnavailable, WatermarkUnavailable) as exc:
                if self._cached is None:
                    raise
                self._retry_at = self._now() + self._interval_s
                _log.warning(
                    "epoch_clock.refresh_failed",
                    cached=self._cached,
                    age_s=self.age_s,
                    error=str(exc),
                )
                return self._cached
