"""Admission: which M a round may use, decided once for the sweep, the daemon and Spark."""

from __future__ import annotations

import pytest

from gcd.rules.admission import RoundAdmission, SafetyGate, admit, unreachable
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.errors import ConfigError


def read(safe: int | None = 5, cluster: int | None = 9, **extra: object) -> SafeEpoch:
    return SafeEpoch(revision=3, cluster_epoch=cluster, safe_epoch=safe, partition_count=1, **extra)  # type: ignore[arg-type]


def test_defined_m_is_admitted_with_its_revision() -> None:
    """A defined M below the cluster epoch is admitted, with the etcd revision."""
    admission = admit(read())
    assert admission.allowed
    assert admission.safe_epoch == 5
    assert admission.revision == 3


def test_regression_of_m_is_refused_and_not_remembered() -> None:
    """An M below one already used is refused as a regression; the gate keeps the highest."""
    gate = SafetyGate()
    assert gate.admit(read(7)).allowed
    lower = gate.admit(read(6))
    assert not lower.allowed
    assert lower.regression
    assert lower.safe_epoch is None
    assert gate.highest == 7
    assert gate.admit(read(7)).allowed  # the same M again is fine
    assert not gate.admit(None, override=3).allowed  # an override cannot regress either


def test_pause_wins_over_a_valid_m_and_an_override() -> None:
    """Paused: nothing is admitted, whatever M or the override says."""
    admission = admit(read(paused=True, paused_reason="migration"), override=2)
    assert admission == RoundAdmission(None, 9, "paused: migration", paused=True)


def test_override_is_checked_against_the_cluster_epoch() -> None:
    """An override above the cluster epoch, or with the cluster epoch unknown, is refused."""
    assert not admit(read(), override=10).allowed
    assert admit(read(), override=9).safe_epoch == 9
    assert not admit(read(cluster=None), override=1).allowed


def test_m_undefined_or_above_cluster_is_refused() -> None:
    """Fail closed: no M, or an M above the cluster epoch, admits nothing."""
    undefined = admit(read(None, blocked_reason="record malformed", blocked_partition="t/0"))
    assert not undefined.allowed
    assert undefined.blocked_reason == "safe epoch undefined: record malformed (partition 't/0')"
    assert not admit(read(10, 9)).allowed


def test_no_source_needs_an_override() -> None:
    """Without etcd, only an override gives M; neither is a configuration error."""
    assert admit(None, override=4).safe_epoch == 4
    with pytest.raises(ConfigError):
        admit(None)


def test_unreachable_etcd_admits_nothing() -> None:
    """etcd unreachable with no read at hand: blocked, with the error in the reason."""
    admission = unreachable("connection refused")
    assert not admission.allowed
    assert admission.blocked_reason == "etcd unreachable, no safe epoch yet: connection refused"
