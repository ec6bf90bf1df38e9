"""l0gc watermark: the per-partition epoch tracker and what publishes its watermark.

The core (`EpochWindow`, `PartitionGcState`) is pure and deterministic; see the
module docstrings of `watermark.window` and `watermark.gcstate` for how it works.

The async service classes (`FencingGuard`, `Publisher`, ...) are exported too, but
loaded on first use, so that importing the pure core never imports asyncio, structlog
or prometheus-client.
"""

from typing import TYPE_CHECKING

from watermark.errors import (
    ConfigError,
    EpochAhead,
    EpochConflict,
    EtcdUnavailable,
    FenceExpired,
    FenceTimeout,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    InvalidJson,
    InvalidRecord,
    InvalidSnapshot,
    L0gcError,
    LeaseExpired,
    NoOwner,
    PartitionNotHosted,
    PartitionNotRegistered,
    StaleEpoch,
    StaleOwner,
    StorageError,
    WatchLost,
    WatermarkRegression,
    WatermarkUnavailable,
)
from watermark.gcstate import PartitionGcState, PendingSlide
from watermark.window import Admission, EpochWindow

if TYPE_CHECKING:
    from watermark.guard import FenceToken, FencingGuard
    from watermark.metrics import WatermarkMetrics
    from watermark.publisher import Fence, Publisher

__all__ = [
    "Admission",
    "ConfigError",
    "EpochAhead",
    "EpochConflict",
    "EpochWindow",
    "EtcdUnavailable",
    "Fence",
    "FenceExpired",
    "FenceTimeout",
    "FenceToken",
    "FencingGuard",
    "FencingViolation",
    "GuardClosed",
    "IllegalTransition",
    "InvalidJson",
    "InvalidRecord",
    "InvalidSnapshot",
    "L0gcError",
    "LeaseExpired",
    "NoOwner",
    "PartitionGcState",
    "PartitionNotHosted",
    "PartitionNotRegistered",
    "PendingSlide",
    "Publisher",
    "StaleEpoch",
    "StaleOwner",
    "StorageError",
    "WatchLost",
    "WatermarkMetrics",
    "WatermarkRegression",
    "WatermarkUnavailable",
]


def __getattr__(name: str) -> object:
    """Load the service classes on first access (see the module docstring)."""
    # Imports inside the function are the point: they keep `import watermark` pure.
    if name in ("FenceToken", "FencingGuard"):
        from watermark import guard  # noqa: PLC0415

        return getattr(guard, name)
    if name in ("Fence", "Publisher"):
        from watermark import publisher  # noqa: PLC0415

        return getattr(publisher, name)
    if name == "WatermarkMetrics":
        from watermark import metrics  # noqa: PLC0415

        return metrics.WatermarkMetrics
    raise AttributeError(f"module 'watermark' has no attribute {name!r}")
