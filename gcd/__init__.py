"""l0gc sweeper side: key layouts, the sweeper, its daemon and CLIs, the Spark pipeline.

Layers, lowest first, above all of `watermark`; a layer imports only the layers below
it (tests/test_layers.py):

- `gcd.errors`: the sweeper's errors (storage), beside `watermark.errors`.
- `gcd.rules`: every pure decision: key layout, delete-or-keep, the next listing cursor
  (skip-ahead), DeleteObjects answer triage, retry backoff, admission of a round.
- `gcd.storage`: the object stores (S3, Azure Blob Storage, Google Cloud Storage) behind
  one interface, one settings type naming a store (`StoreSettings`), their error codes,
  the retry loop and the request-rate limiter.
- `gcd.sweep`: the async sweeper, its deleter, brake, daemon, journal and metrics, and
  the runtime that assembles them on one etcd client (`gcd.sweep.runtime`).
- `gcd.spark`: the PySpark pipeline (the same rules, on executors).
- `gcd.cli`: the `gcd` command. `gcd demo`, `gcd chaos`, `gcd simulate` and `gcd dev` run
  the lab (the `l0lab` package beside this one: local servers, the simulation, the chaos
  harness, the demo workload), which is not part of the product: they import it when
  they run, and say what to install when it is missing (`gcd.cli.lab`).

`gcd.__main__` is the composition root of the `gcd` command.

The package face: ``from gcd import explain`` (`gcd.cli.explain.explain`, docs/python-api.md),
looked up lazily on first use (PEP 562) like `watermark`'s, so ``import gcd`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gcd.cli.explain import explain

__version__ = "0.1.0"

_FACE: dict[str, str] = {
    "explain": "gcd.cli.explain",
}

__all__ = ["explain"]


def __getattr__(name: str) -> Any:
    """A name of the face, imported from its defining module on first use."""
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'gcd' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
