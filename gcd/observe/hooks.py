"""Which hook the sweep engine's events go to, and the metrics it feeds by default.

Design notes: docs/internals/sweep.md, `gcd.observe.hooks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcd.observe.telemetry import DEFAULT_HOOK, DefaultHook
from l0gc.events import Hooks

if TYPE_CHECKING:
    from gcd.observe.metrics import SweeperMetrics

__all__ = ["hook_of"]


def hook_of(
    metrics: SweeperMetrics | None, hook: Hooks | DefaultHook
) -> tuple[SweeperMetrics | None, Hooks]:
    """The metrics a part of the engine feeds and the hook its events go to: `hook` as
    given (`metrics` as given, maybe None), or for DEFAULT_HOOK the hook of `metrics` (a
    fresh `SweeperMetrics` when None). prometheus_client is imported only then: a
    one-shot round, which exports no metrics, passes `hook=None` and never loads it."""
    if hook is not DEFAULT_HOOK:
        return metrics, hook
    if metrics is None:
        from gcd.observe.metrics import SweeperMetrics  # noqa: PLC0415 - see above

        metrics = SweeperMetrics()
    return metrics, metrics.hook
