"""l0gc watermark: the per-partition epoch tracker and what publishes its watermark.

The core (`EpochWindow`, `PartitionGcState`) is pure and deterministic; see the
module docstrings of `watermark.window` and `watermark.gcstate` for how it works.
"""

from watermark.errors import (
    ConfigError,
    EpochConflict,
    EtcdUnavailable,
    FenceExpired,
    FenceTimeout,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    InvalidRecord,
    InvalidSnapshot,
    L0gcError,
    LeaseExpired,
    PartitionNotHosted,
    PartitionNotRegistered,
    StaleEpoch,
    StaleOwner,
    StorageError,
    WatermarkRegression,
    WatermarkUnavailable,
)
from watermark.gcstate import PartitionGcState, PendingSlide
from watermark.window import Admission, EpochWindow

__all__ = [
    "Admission",
    "ConfigError",
    "EpochConflict",
    "EpochWindow",
    "EtcdUnavailable",
    "FenceExpired",
    "FenceTimeout",
    "FencingViolation",
    "GuardClosed",
    "IllegalTransition",
    "InvalidRecord",
    "InvalidSnapshot",
    "L0gcError",
    "LeaseExpired",
    "PartitionGcState",
    "PartitionNotHosted",
    "PartitionNotRegistered",
    "PendingSlide",
    "StaleEpoch",
    "StaleOwner",
    "StorageError",
    "WatermarkRegression",
    "WatermarkUnavailable",
]
