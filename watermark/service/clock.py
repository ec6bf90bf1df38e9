"""The writer side of the cluster epoch: a cached clock and the stamping rule.

Writers stamp every L0 object key with an epoch. They do not read etcd per object:
`EpochClock` caches the cluster epoch and re-reads it when the cached value is older
than `refresh_interval_s`. A slightly stale epoch is safe, because the stamping rule
and the fencing window take care of it:

    stamp_epoch(cached, created_epochs) = max(cached, every creation epoch)

An object that holds data of several partitions must carry an epoch no lower than the
epoch at which any of those partitions was created (each partition starts with
M(p) = created_epoch - 1, so an older stamp could be collected as its garbage). The
partition's fencing window then rejects a stamp that has fallen too far behind
(`StaleEpoch`), and the writer re-reads the clock and re-uploads.

The cached value never goes backwards. When etcd cannot be read and a value is
cached, `current()` logs `epoch_clock.refresh_failed` and keeps serving the cached
value (writes go on during an etcd outage), trying etcd again one interval later;
with nothing cached it raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import structlog

from watermark.errors import ConfigError, EtcdUnavailable, WatermarkUnavailable

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
