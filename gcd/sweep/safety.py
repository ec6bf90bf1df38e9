"""The one admission path: read the safe epoch, then ask the rule whether a round may delete.

`read_admission` reads etcd once through a `WatermarkSource` (no read when no etcd is
configured) and hands the read to the `SafetyGate` (`gcd.rules.admission`: paused,
refused, M undefined, above the cluster epoch, regression). A read that fails (etcd
unreachable, a record etcd returns that cannot be read) blocks the round:
`gcd.rules.admission.unreachable`, fail closed.

Every round goes through here: `gcd sweep` (`gcd.sweep.sweeper.run_round`), the
daemon (`gcd.service.daemon`, whose source stands in the last good read while etcd is
unreachable: M only goes up, so a stale M deletes less, never more) and the driver of
`gcd spark-sweep` / `gcd spark-report` (`gcd.cli.spark`). What a refused round does
to the gauges is the `AdmissionShown` event's (`gcd.observe.telemetry`), which
`gcd.observe.metrics` turns into them.
"""

from __future__ import annotations

from typing import Protocol

import structlog

from gcd.rules.admission import RoundAdmission, SafetyGate, unreachable
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.errors import L0gcError

__all__ = ["WatermarkSource", "read_admission"]

log = structlog.get_logger("gcd.safety")


class WatermarkSource(Protocol):
    """Where the safe epoch comes from (`l0gc.etcd.store.WatermarkStore`)."""

    async def read_safe_epoch(self) -> SafeEpoch:
        """M and the cluster epoch from one etcd revision."""
        ...


async def read_admission(
    gate: SafetyGate, source: WatermarkSource | None, *, override: int | None = None
) -> RoundAdmission:
    """Read etcd (if configured) and apply the safety rails; etcd failures block."""
    read: SafeEpoch | None = None
    if source is not None:
        try:
            read = await source.read_safe_epoch()
        except (L0gcError, OSError) as exc:
            log.warning("sweep.watermark_unreachable", error=str(exc))
            return unreachable(str(exc))
    return gate.admit(read, override=override)
