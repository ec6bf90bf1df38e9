"""Admission: which safe epoch M a round may delete up to, or why it may delete nothing.

Design notes: docs/internals/rules.md, `gcd.rules.admission`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from l0gc.contract.references import Reference
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.errors import ConfigError

__all__ = ["UNREACHABLE", "RoundAdmission", "SafetyGate", "admit", "unreachable"]

UNREACHABLE = "etcd unreachable, no safe epoch yet"
"""How the reason of a round refused for an unreachable etcd starts (exit 4)."""


@dataclass(frozen=True, slots=True)
class RoundAdmission:
    """The M a round may use, or the reason it may not delete anything."""

    safe_epoch: int | None
    cluster_epoch: int | None
    blocked_reason: str | None = None
    paused: bool = False
    regression: bool = False
    revision: int | None = None
    """The etcd revision M was read at (None without etcd)."""
    pinning: tuple[tuple[str, int], ...] = ()
    """(partition, M(p)) of the partitions pinning M, as read (for the deletion journal)."""
    references: Mapping[str, Reference] = field(default_factory=dict)
    """Every key a partition still references, read with M (docs/references.md)."""

    @property
    def allowed(self) -> bool:
        """True when the round may delete up to `safe_epoch`."""
        return self.blocked_reason is None and self.safe_epoch is not None


def unreachable(error: str) -> RoundAdmission:
    """The refusal when etcd could not be read and no earlier read may stand in."""
    return RoundAdmission(None, None, f"{UNREACHABLE}: {error}")


def admit(
    read: SafeEpoch | None, *, override: int | None = None, highest_used: int | None = None
) -> RoundAdmission:
    """Which M a round may use, given the etcd read, an override and the last M used."""
    if read is None:
        if override is None:
            raise ConfigError("no safe epoch source: give --etcd ENDPOINTS or --safe-epoch N")
        return _check_regression(RoundAdmission(override, None), highest_used)
    cluster = read.cluster_epoch
    if read.paused:
        reason = f"paused: {read.paused_reason or 'no reason given'}"
        return RoundAdmission(None, cluster, reason, paused=True)
    if read.refused_reason is not None:
        return RoundAdmission(None, cluster, read.refused_reason)
    if override is not None:
        if cluster is None:
            why = read.blocked_reason or "cluster epoch missing"
            return RoundAdmission(None, None, f"cannot check --safe-epoch {override}: {why}")
        if override > cluster:
            return RoundAdmission(
                None, cluster, f"--safe-epoch {override} is above the cluster epoch {cluster}"
            )
        return _check_regression(
            RoundAdmission(override, cluster, revision=read.revision, references=read.references),
            highest_used,
        )
    if read.safe_epoch is None:
        reason = read.blocked_reason or "global watermark undefined"
        if read.blocked_partition is not None and read.blocked_partition not in reason:
            reason = f"{reason} (partition {read.blocked_partition!r})"
        return RoundAdmission(None, cluster, f"safe epoch undefined: {reason}")
    if cluster is None or read.safe_epoch > cluster:
        return RoundAdmission(
            None, cluster, f"safe epoch {read.safe_epoch} is above the cluster epoch {cluster}"
        )
    pinning = tuple((record.partition, record.watermark) for record in read.pinning)
    admission = RoundAdmission(
        read.safe_epoch,
        cluster,
        revision=read.revision,
        pinning=pinning,
        references=read.references,
    )
    return _check_regression(admission, highest_used)


def _check_regression(admission: RoundAdmission, highest_used: int | None) -> RoundAdmission:
    epoch = admission.safe_epoch
    if epoch is not None and highest_used is not None and epoch < highest_used:
        reason = (
            f"safe epoch regression: {epoch} is below {highest_used}, which this process "
            "already used; etcd went backwards (restored backup? wrong namespace?): check it, "
            "then restart the sweeper if the lower value is really intended"
        )
        return RoundAdmission(None, admission.cluster_epoch, reason, regression=True)
    return admission


class SafetyGate:
    """Remembers the highest M used by this process and refuses to go below it."""

    def __init__(self) -> None:
        self.highest: int | None = None

    def admit(self, read: SafeEpoch | None, *, override: int | None = None) -> RoundAdmission:
        """`admit` against this process's history; an allowed M is remembered."""
        admission = admit(read, override=override, highest_used=self.highest)
        if admission.allowed:
            assert admission.safe_epoch is not None
            if self.highest is None or admission.safe_epoch > self.highest:
                self.highest = admission.safe_epoch
        return admission
