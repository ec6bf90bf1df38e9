"""What every l0gc process exports besides its own metrics: `l0gc_build_info` and the
standard collectors of prometheus_client.

Design notes: docs/internals/kernel.md, `l0gc.process.buildinfo`.
"""

from __future__ import annotations

import functools
import platform
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

__all__ = ["l0gc_version", "register_build_info"]


@functools.cache
def l0gc_version() -> str:
    """The installed l0gc distribution's version, or "unknown" when it is not installed
    (read once per process: the installed distribution does not change under it)."""
    try:
        return metadata.version("l0gc")
    except metadata.PackageNotFoundError:
        return "unknown"


def register_build_info(registry: CollectorRegistry, component: str) -> None:
    """Register `l0gc_build_info` and the process, platform and GC collectors; turn off
    the ``*_created`` series (process-wide: every l0gc registry is built through here)."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped
    Info(
        "l0gc_build",
        "The running l0gc: its version, the Python version and implementation, and the "
        "program (sweeper or publisher); the value is always 1.",
        registry=registry,
    ).info(
        {
            "version": l0gc_version(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "component": component,
        }
    )
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
