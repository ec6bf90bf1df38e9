"""The daemon's trail of M (`gcd.observe.trail`): one sample per spacing, every change,
the last hours only."""

from __future__ import annotations

from gcd.observe.trail import MTrail
from gcd.rules.admission import RoundAdmission


def admission(
    m: int | None, cluster: int, pinning: tuple[tuple[str, int], ...] = ()
) -> RoundAdmission:
    if m is None:
        return RoundAdmission(None, cluster, "paused", paused=True)
    return RoundAdmission(m, cluster, pinning=pinning)


def test_a_sample_per_spacing_and_every_change_within_the_span() -> None:
    trail = MTrail(span_s=3600.0, spacing_s=30.0)
    trail.observe(0.0, admission(5, 9, (("p", 5),)))
    trail.observe(10.0, admission(5, 9, (("p", 5),)))  # nothing changed, not due
    trail.observe(20.0, admission(5, 10, (("p", 5),)))  # the cluster epoch moved
    trail.observe(25.0, admission(5, 10, (("q", 5),)))  # another partition pins M
    trail.observe(26.0, admission(None, 10))  # paused: M unknown, no pinning
    trail.observe(60.0, admission(None, 10))  # due
    assert [(s.at, s.cluster_epoch, s.safe_epoch, s.pinning) for s in trail.samples()] == [
        (0.0, 9, 5, (("p", 5),)),
        (20.0, 10, 5, (("p", 5),)),
        (25.0, 10, 5, (("q", 5),)),
        (26.0, 10, None, ()),
        (60.0, 10, None, ()),
    ]
    trail.observe(3700.0, admission(6, 11))
    assert [s.at for s in trail.samples()] == [3700.0]  # older than the span: gone
