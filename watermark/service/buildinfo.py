"""What every l0gc process exports besides its own metrics: `l0gc_build_info` and the
standard collectors of prometheus_client.

`register_build_info(registry, component)` adds, to a dedicated registry (the sweeper's
or the publisher's):

- ``l0gc_build_info{version, python, implementation, component}`` = 1: the installed
  l0gc version ("unknown" outside an installed package), the Python version and
  implementation, and which program it is (``sweeper`` or ``publisher``), so a fleet's
  versions are one ``count by (version, component) (l0gc_build_info)`` away;
- no ``*_created`` series: prometheus_client would add one per counter, histogram and
  summary (a creation timestamp nobody queries, doubling the series count);
  `register_build_info` turns them off for the process (`disable_created_metrics`);
- ``process_*`` (CPU seconds, resident and virtual memory, open and max file
  descriptors, start time; Linux only, read from /proc), ``python_info`` and
  ``python_gc_*`` (collections and collected objects per generation).
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
