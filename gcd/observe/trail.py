"""What the daemon saw of M over the last hours: the picture behind `GET /plot.svg`.

Each admission a daemon reads (every iteration, listed or not) is an `MSample`: when, the
cluster epoch, M, and the partitions pinning M with their M(p). `MTrail` keeps one
sample per `spacing_s` (and every change of M, the cluster epoch or the pinning
partition) for `span_s`, at most `MAX_SAMPLES`, in memory: a restarted daemon starts a
new picture. `gcd.rules.mplot` draws it (docs/operations.md#m-not-advancing).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gcd.rules.admission import RoundAdmission

__all__ = ["DEFAULT_SPAN_S", "MAX_SAMPLES", "MSample", "MTrail"]

DEFAULT_SPAN_S = 6 * 3600.0
MAX_SAMPLES = 4096


@dataclass(frozen=True, slots=True)
class MSample:
    """One admission: `safe_epoch` None while blocked or paused."""

    at: float
    cluster_epoch: int | None
    safe_epoch: int | None
    pinning: tuple[tuple[str, int], ...] = ()


class MTrail:
    """The samples of the last `span_s` seconds (see the module docstring)."""

    def __init__(self, span_s: float = DEFAULT_SPAN_S, spacing_s: float = 30.0) -> None:
        self.span_s = span_s
        self.spacing_s = spacing_s
        self._samples: deque[MSample] = deque(maxlen=MAX_SAMPLES)

    def observe(self, at: float, admission: RoundAdmission) -> None:
        """Keep `admission` read at `at` when it changed anything or is due."""
        allowed = admission.allowed
        sample = MSample(
            at,
            admission.cluster_epoch,
            admission.safe_epoch if allowed else None,
            admission.pinning[:3] if allowed else (),
        )
        last = self._samples[-1] if self._samples else None
        if (
            last is not None
            and at - last.at < self.spacing_s
            and (last.cluster_epoch, last.safe_epoch, last.pinning[:1])
            == (sample.cluster_epoch, sample.safe_epoch, sample.pinning[:1])
        ):
            return
        self._samples.append(sample)
        while self._samples and self._samples[0].at < at - self.span_s:
            self._samples.popleft()

    def samples(self) -> list[MSample]:
        """The samples kept, oldest first."""
        return list(self._samples)
