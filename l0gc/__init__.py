"""l0gc's kernel: what the publisher (`watermark`) and the sweepers (`gcd`) both stand on.

Layers, lowest first (tests/test_layers.py): `l0gc.errors`; the pure `l0gc.strictjson`,
`l0gc.display` and `l0gc.contract` (the etcd contract both sides read and write);
`l0gc.events`; `l0gc.options`, `l0gc.logs`, `l0gc.exitcodes`; `l0gc.process` (signals,
build info) and `l0gc.auth`; `l0gc.etcd` (the client, its session, the store). `watermark`
and `gcd` sit above it and never import each other. docs/architecture.md draws it.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
