"""l0gc watermark: the per-partition epoch tracker and what publishes its watermark.

Layers above the kernel (`l0gc`), lowest first (tests/test_layers.py): `watermark.core`
(the pure rules: epoch window, fence lock, GC state, replica plans), `watermark.service`
(the async publisher, ticker, replicas), `watermark.api` (the HTTP API), `watermark.client`
(the writer clients), `watermark.cli` (the `watermark` command). It never imports `gcd`.

The package face: the names a writer embedding l0gc needs (``from watermark import
Publisher, WriterClient``), each listed in `_FACE` with the one module that defines it
and looked up lazily (PEP 562), so ``import watermark`` imports nothing else at run time.
docs/python-api.md is their reference and says what is stable.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from l0gc.errors import (
        AlreadyCommitted,
        ConfigError,
        EpochAhead,
        EtcdUnavailable,
        FenceExpired,
        FenceTimeout,
        FencingViolation,
        GuardClosed,
        IllegalTransition,
        L0gcError,
        PartitionNotHosted,
        PartitionNotRegistered,
        StaleEpoch,
        WriteRefused,
    )
    from l0gc.etcd.settings import EtcdSettings, open_kv
    from l0gc.etcd.store import WatermarkStore
    from watermark.api.openapi_errors import ERROR_CODES
    from watermark.client.aio import AsyncWriterClient
    from watermark.client.protocol import (
        ApiError,
        EpochInfo,
        Granted,
        RedirectRefused,
        Retry,
        Unreachable,
    )
    from watermark.client.sync import WriterClient
    from watermark.core.fencelock import Outcome
    from watermark.service.clock import EpochClock, stamp_epoch
    from watermark.service.fence import Fence
    from watermark.service.guard import FenceToken
    from watermark.service.publisher import Publisher

_FACE: dict[str, str] = {
    # embedding the publisher
    "Publisher": "watermark.service.publisher",
    "Fence": "watermark.service.fence",
    "FenceToken": "watermark.service.guard",
    "Outcome": "watermark.core.fencelock",
    "WatermarkStore": "l0gc.etcd.store",
    "EtcdSettings": "l0gc.etcd.settings",
    "open_kv": "l0gc.etcd.settings",
    "EpochClock": "watermark.service.clock",
    "stamp_epoch": "watermark.service.clock",
    # the HTTP writer clients
    "WriterClient": "watermark.client.sync",
    "AsyncWriterClient": "watermark.client.aio",
    "ApiError": "watermark.client.protocol",
    "RedirectRefused": "watermark.client.protocol",
    "Unreachable": "watermark.client.protocol",
    "Granted": "watermark.client.protocol",
    "EpochInfo": "watermark.client.protocol",
    "Retry": "watermark.client.protocol",
    "ERROR_CODES": "watermark.api.openapi_errors",
    # the errors a writer handles
    "L0gcError": "l0gc.errors",
    "ConfigError": "l0gc.errors",
    "WriteRefused": "l0gc.errors",
    "StaleEpoch": "l0gc.errors",
    "EpochAhead": "l0gc.errors",
    "FenceTimeout": "l0gc.errors",
    "FenceExpired": "l0gc.errors",
    "AlreadyCommitted": "l0gc.errors",
    "GuardClosed": "l0gc.errors",
    "PartitionNotHosted": "l0gc.errors",
    "PartitionNotRegistered": "l0gc.errors",
    "IllegalTransition": "l0gc.errors",
    "FencingViolation": "l0gc.errors",
    "EtcdUnavailable": "l0gc.errors",
}

__version__ = "0.1.0"
"""The l0gc distribution's version, the same as `gcd.__version__` (one distribution; a
test keeps them and pyproject.toml equal)."""

__all__ = [
    "ERROR_CODES",
    "AlreadyCommitted",
    "ApiError",
    "AsyncWriterClient",
    "ConfigError",
    "EpochAhead",
    "EpochClock",
    "EpochInfo",
    "EtcdSettings",
    "EtcdUnavailable",
    "Fence",
    "FenceExpired",
    "FenceTimeout",
    "FenceToken",
    "FencingViolation",
    "Granted",
    "GuardClosed",
    "IllegalTransition",
    "L0gcError",
    "Outcome",
    "PartitionNotHosted",
    "PartitionNotRegistered",
    "Publisher",
    "RedirectRefused",
    "Retry",
    "StaleEpoch",
    "Unreachable",
    "WatermarkStore",
    "WriteRefused",
    "WriterClient",
    "open_kv",
    "stamp_epoch",
]


def __getattr__(name: str) -> Any:
    """A name of the face, imported from its defining module on first use."""
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'watermark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
