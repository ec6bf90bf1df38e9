"""l0gc watermark: the per-partition epoch tracker and what publishes its watermark.

Layers, lowest first; a layer imports only the layers below it (tests/test_layers.py):

- `watermark.errors`: every error, grouped by who is at fault. Imports nothing.
- `watermark.core`: the pure rules (epoch window, fence lock, GC state, records, the
  etcd contract, global M, replica assignment, namespace binding). No asyncio, no I/O,
  no clock; imports `watermark.errors` only.
- `watermark.options`, `watermark.logs`, `watermark.exitcodes`: the option system every
  command uses (flag > env > config file > default), the one logging setup, and what
  each exit code of every l0gc command means.
- `watermark.etcd`: etcd I/O: the client, the in-memory KV, the store that applies the
  contract, the watch-based follower of M, connection settings.
- `watermark.service`: the async service: fencing guard, hosted partitions, publisher,
  epoch ticker, replicas, the writers' epoch clock, Prometheus metrics.
- `watermark.api`: the edges: the `watermark` command and the HTTP API.

- `watermark.client`: the writer clients of the HTTP API (sync and async).

`watermark.__main__` is the composition root of the `watermark` command.

The package face. The names a writer embedding l0gc or calling `watermark serve` needs
are importable from here (``from watermark import Publisher, WriterClient``), each listed
in `__all__` with the one module that defines it (`_FACE`); docs/python-api.md is their
reference and states what is stable. They are looked up lazily on first use (PEP 562),
so this package imports nothing else at run time: ``import watermark.core.window`` stays
free of asyncio and etcd, and the layers above still import every name from its
defining module (tests/test_layers.py allows this one face, and checks that each name
it exposes is defined where `_FACE` says and nowhere else).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from watermark.errors import (
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
    from watermark.etcd.settings import EtcdSettings, open_kv
    from watermark.etcd.store import WatermarkStore
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
    "WatermarkStore": "watermark.etcd.store",
    "EtcdSettings": "watermark.etcd.settings",
    "open_kv": "watermark.etcd.settings",
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
    "L0gcError": "watermark.errors",
    "ConfigError": "watermark.errors",
    "WriteRefused": "watermark.errors",
    "StaleEpoch": "watermark.errors",
    "EpochAhead": "watermark.errors",
    "FenceTimeout": "watermark.errors",
    "FenceExpired": "watermark.errors",
    "AlreadyCommitted": "watermark.errors",
    "GuardClosed": "watermark.errors",
    "PartitionNotHosted": "watermark.errors",
    "PartitionNotRegistered": "watermark.errors",
    "IllegalTransition": "watermark.errors",
    "FencingViolation": "watermark.errors",
    "EtcdUnavailable": "watermark.errors",
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
