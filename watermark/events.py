"""What the publisher reports to instrumentation: small frozen events, one per outcome.

Design notes: docs/internals/publisher.md, `watermark.events`; how hooks receive them:
`l0gc.events`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from l0gc.contract.namespace import PublishStatus

__all__ = [
    "ClusterEpochRead",
    "Event",
    "FenceGranted",
    "FenceReclaimed",
    "FenceRefusal",
    "FenceRefused",
    "FenceReleased",
    "FencesRevoked",
    "FencingViolationFound",
    "HostedChanged",
    "IdleAdvanceSkipped",
    "IdleAdvanced",
    "PublishFailed",
    "PublishRefused",
    "PublishRound",
    "Published",
    "TickerAdvanceConflict",
    "TickerAdvanced",
    "TickerElected",
    "TickerLeadershipLost",
    "TickerStarted",
    "TickerTickFailed",
    "WindowSlid",
]

Bounds = tuple[int | None, int | None]


# -- the fence lock (watermark.core.fencelock, shell: watermark.service.guard) ----------


class FenceRefusal(enum.Enum):
    """Why a fence request ended without a fence."""

    STALE = "stale"
    """The epoch is below the window (or at/below the published M(p))."""
    TIMEOUT = "timeout"
    """The request's deadline passed while it waited for the lock."""
    CLOSED = "closed"
    """The guard was closed (shutdown, hand-over) before it could decide."""


@dataclass(frozen=True, slots=True)
class FenceGranted:
    """A fence was granted: a write at `epoch` may commit."""

    partition: str
    epoch: int
    slid: bool
    """True if this fence slid the window up to `epoch` (see `WindowSlid`)."""
    waited_s: float
    """Time the request waited for the lock, on the event loop's clock (0.0: at once)."""


@dataclass(frozen=True, slots=True)
class FenceReleased:
    """A held fence was given back (committed or aborted)."""

    partition: str


@dataclass(frozen=True, slots=True)
class FenceRefused:
    """A fence request ended without a fence; `reason` says why."""

    partition: str
    epoch: int
    reason: FenceRefusal
    window: Bounds
    """The window when it was refused."""
    floor: int | None
    inflight: int
    """Fences held when it was refused."""
    timeout_s: float | None
    """The request's acquisition timeout."""


@dataclass(frozen=True, slots=True)
class WindowSlid:
    """The fencing window slid up to `epoch` (every earlier holder had drained)."""

    partition: str
    epoch: int
    before: Bounds
    after: Bounds


@dataclass(frozen=True, slots=True)
class FenceReclaimed:
    """A held fence past its hold deadline was taken back (its commit is refused)."""

    partition: str
    epoch: int
    window: Bounds


@dataclass(frozen=True, slots=True)
class FencesRevoked:
    """Every fence still held was taken back (a drain that ran out of time, a drop)."""

    partition: str
    count: int


# -- the epoch ticker (watermark.service.ticker) ----------------------------------------


@dataclass(frozen=True, slots=True)
class TickerStarted:
    """This ticker runs and will advance the epoch every `interval_s` while it leads."""

    owner: str
    interval_s: float


@dataclass(frozen=True, slots=True)
class TickerElected:
    """This ticker became the leader of `namespace`."""

    owner: str
    namespace: str


@dataclass(frozen=True, slots=True)
class TickerLeadershipLost:
    """This ticker stopped leading: "resigned", "lease expired" or "leader key changed"."""

    owner: str
    reason: str


@dataclass(frozen=True, slots=True)
class TickerAdvanced:
    """The leader advanced the cluster epoch to `epoch`."""

    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class TickerAdvanceConflict:
    """Someone else (e.g. the admin CLI) advanced the epoch first; this tick did not."""

    owner: str
    error: str


@dataclass(frozen=True, slots=True)
class TickerTickFailed:
    """etcd failed during a tick; the next tick starts over."""

    owner: str
    error: str


# -- the publisher (watermark.service.publisher) ----------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    """A partition's record was written with M(p) = `watermark`."""

    partition: str
    watermark: int


@dataclass(frozen=True, slots=True)
class PublishRefused:
    """The store did not write a partition's record; `status` says why."""

    partition: str
    status: PublishStatus
    watermark: int
    owner_epoch: int
    stored_watermark: int | None
    stored_owner: str | None
    stored_owner_epoch: int | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class PublishFailed:
    """A publish round's store call failed; its `partitions` are published again next round."""

    partitions: int
    error: str


@dataclass(frozen=True, slots=True)
class PublishRound:
    """A publish round wrote `partitions` records (`ok` of them accepted) in `duration_s`."""

    partitions: int
    ok: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class ClusterEpochRead:
    """The publisher read the cluster epoch."""

    epoch: int


@dataclass(frozen=True, slots=True)
class IdleAdvanced:
    """An idle, reconciled partition's M(p) advanced to `watermark` at cluster `epoch`."""

    partition: str
    epoch: int
    watermark: int | None


@dataclass(frozen=True, slots=True)
class IdleAdvanceSkipped:
    """An idle advance could not fence its partition (refused); it is tried next round."""

    partition: str
    error: str


@dataclass(frozen=True, slots=True)
class FencingViolationFound:
    """A commit's epoch was below the applied window: fencing failed (a bug; see
    `l0gc.errors.FencingViolation`)."""

    partition: str
    offset: int
    epoch: int
    window: Bounds
    published_watermark: int | None
    error: str


@dataclass(frozen=True, slots=True)
class HostedChanged:
    """The publisher hosts `partitions`; the lowest M(p) it published is `min_watermark`
    (None: none published); `log_end_unknown` of them wait for their log end."""

    partitions: int
    min_watermark: int | None
    log_end_unknown: int = 0
    """Hosted partitions behind the cluster epoch whose log end is unknown."""
    log_end_unknown_for_s: float = 0.0
    """How long the oldest of them has waited for it (0: none waits)."""


Event = (
    FenceGranted
    | FenceReleased
    | FenceRefused
    | WindowSlid
    | FenceReclaimed
    | FencesRevoked
    | TickerElected
    | TickerLeadershipLost
    | TickerAdvanced
    | TickerAdvanceConflict
    | TickerTickFailed
    | Published
    | PublishRefused
    | PublishFailed
    | PublishRound
    | ClusterEpochRead
    | IdleAdvanced
    | IdleAdvanceSkipped
    | FencingViolationFound
    | HostedChanged
)
