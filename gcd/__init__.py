"""l0gc sweeper side: key layouts, the sweeper, its daemon and CLIs, the Spark pipeline.

Layers above the kernel (`l0gc`), lowest first (tests/test_layers.py): `gcd.rules` (every
pure decision), `gcd.storage` (the object stores behind one interface), `gcd.sweep` (the
async sweeper, deleter, brake, daemon, journal, runtime), `gcd.spark` (the PySpark
pipeline), `gcd.cli` (the `gcd` command; `demo`, `chaos`, `simulate` and `dev` import the
lab, `l0lab`, only when they run). It never imports `watermark`.

The package face: ``from gcd import explain`` (docs/python-api.md), looked up lazily.
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
