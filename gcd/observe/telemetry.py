"""What the sweep engine reports to instrumentation: small frozen events, nothing else.

Design notes: docs/internals/sweep.md, `gcd.observe.telemetry`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from gcd.observe.report import RoundSummary
from gcd.rules.admission import RoundAdmission

__all__ = [
    "DAEMON_EVENTS",
    "DEFAULT_HOOK",
    "DELETER_EVENTS",
    "DELETE_SENT",
    "JOURNAL_EVENTS",
    "LIST_SENT",
    "SWEEPER_EVENTS",
    "UNSAFE_KEY_KEPT",
    "VERSION_LOCKED",
    "AdmissionShown",
    "DefaultHook",
    "DeleteFailed",
    "DeleteSent",
    "DeletesBraked",
    "JournalAppended",
    "JournalFailed",
    "JournalRotated",
    "ListFailed",
    "ListSent",
    "ObjectsDeleted",
    "PageExamined",
    "ReferenceConflictFound",
    "RoundFinished",
    "RoundNotListed",
    "StalenessShown",
    "UndoPendingCounted",
    "UndoWindowSet",
    "UnsafeKeyKept",
    "VersionLocked",
    "WatermarkAgeShown",
]


class DefaultHook(enum.Enum):
    """`hook=` not given: the hook of the engine's own `SweeperMetrics`."""

    METRICS = "metrics"


DEFAULT_HOOK: Final = DefaultHook.METRICS


# -- a round (gcd.sweep.sweeper, gcd.sweep.listing, gcd.sweep.pages) --------------------


@dataclass(frozen=True, slots=True)
class UndoWindowSet:
    """A sweeper was built with this undo window (`--undo-window`; 0: deletions final)."""

    window_s: float


@dataclass(frozen=True, slots=True)
class ListSent:
    """One LIST request sent (a LIST sent ahead and discarded unread included)."""


LIST_SENT: Final = ListSent()
"""The one `ListSent` (an event's value never depends on who listens: it is shared)."""


@dataclass(frozen=True, slots=True)
class ListFailed:
    """One LIST request failed with `code` (the store's error code, not normalised)."""

    code: str


@dataclass(frozen=True, slots=True)
class PageExamined:
    """The objects of one listed page were decided: `listed` examined, of which
    `skipped` (reason, count) were not selected; reasons are
    `gcd.observe.metrics.SKIP_REASONS`, each at most once, counts above 0."""

    listed: int
    skipped: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class UndoPendingCounted:
    """At a round's end with an undo window: the keys and bytes it kept, and when the
    oldest delete marker pending reclaim was written (None: none pending)."""

    keys: int
    bytes: int
    oldest_s: float | None


@dataclass(frozen=True, slots=True)
class ReferenceConflictFound:
    """A key at or below M that `partition`'s entry at `offset` still references: kept,
    and GC paused (M is wrong; docs/references.md)."""

    partition: str
    offset: int
    key: str
    epoch: int
    safe_epoch: int


@dataclass(frozen=True, slots=True)
class RoundFinished:
    """A round that listed ended with `summary`.

    `max_deleted_epoch` is the highest epoch it deleted (None: none); `succeeded_at_s`
    is the time it ended when it had no error and M stayed in force (the brake did not
    stop it), else None.
    """

    summary: RoundSummary
    max_deleted_epoch: int | None
    succeeded_at_s: float | None


@dataclass(frozen=True, slots=True)
class RoundNotListed:
    """A round that listed nothing ended: `outcome` is blocked, paused, idle or error."""

    outcome: str


@dataclass(frozen=True, slots=True)
class AdmissionShown:
    """What the sweeper now knows of M: `safe_epoch` None while unknown (blocked, paused,
    no etcd read yet), and whether deletion is blocked or paused."""

    safe_epoch: int | None
    cluster_epoch: int | None
    blocked: bool
    paused: bool

    @classmethod
    def of(cls, admission: RoundAdmission) -> AdmissionShown:
        """M when `admission` allows deletion; unknown, blocked or paused otherwise."""
        if admission.allowed:
            return cls(admission.safe_epoch, admission.cluster_epoch, False, False)
        return cls(None, admission.cluster_epoch, not admission.paused, admission.paused)


SWEEPER_EVENTS: Final = (
    UndoWindowSet,
    ListSent,
    ListFailed,
    PageExamined,
    UndoPendingCounted,
    ReferenceConflictFound,
    RoundFinished,
    RoundNotListed,
    AdmissionShown,
)
"""What a `Sweeper` (with its lister and page decider) emits."""


# -- the deleter (gcd.sweep.deleter) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteSent:
    """One DeleteObjects request sent."""


@dataclass(frozen=True, slots=True)
class DeleteFailed:
    """A DeleteObjects request failed whole, or `count` keys of one failed, with `code`."""

    code: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class UnsafeKeyKept:
    """An eligible key S3 cannot delete by name was kept (XML-unsafe or poison)."""


@dataclass(frozen=True, slots=True)
class VersionLocked:
    """An eligible version Object Lock refused to delete was kept."""


@dataclass(frozen=True, slots=True)
class DeletesBraked:
    """`count` selected keys were not sent because the brake stopped the round."""

    count: int


@dataclass(frozen=True, slots=True)
class ObjectsDeleted:
    """One answer deleted `objects` (`bytes` freed): `versions` and `markers` of them by
    version id; `markers_written` keys hidden behind a marker (undo window) and
    `versions_reclaimed` versions freed once their window passed."""

    objects: int
    bytes: int
    versions: int = 0
    markers: int = 0
    markers_written: int = 0
    versions_reclaimed: int = 0


DELETE_SENT: Final = DeleteSent()
UNSAFE_KEY_KEPT: Final = UnsafeKeyKept()
VERSION_LOCKED: Final = VersionLocked()
DELETER_EVENTS: Final = (
    DeleteSent,
    DeleteFailed,
    UnsafeKeyKept,
    VersionLocked,
    DeletesBraked,
    ObjectsDeleted,
)
"""What a `BatchDeleter` emits."""


# -- the daemon (gcd.service.daemon) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatermarkAgeShown:
    """Seconds since M was last read from etcd (capped; 0 without etcd)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class StalenessShown:
    """Seconds since the daemon's last iteration completed, and since a read M above
    the last listed one has waited for a round (0: none waits)."""

    since_last_round_s: float
    unapplied_s: float


DAEMON_EVENTS: Final = (WatermarkAgeShown, StalenessShown, AdmissionShown, RoundNotListed)
"""What a `Daemon` emits (through its sweeper's hook)."""


# -- the deletion journal (gcd.journal.records, gcd.journal.anchor) -----------------


@dataclass(frozen=True, slots=True)
class JournalAppended:
    """One record of `size` bytes (its newline included) is on disk."""

    size: int


@dataclass(frozen=True, slots=True)
class JournalRotated:
    """A new journal segment was opened."""


@dataclass(frozen=True, slots=True)
class JournalFailed:
    """A journal write, upload or local clean-up failed; `stage` says which (for
    readers of the event; the metric has no label)."""

    stage: str


JOURNAL_EVENTS: Final = (JournalAppended, JournalRotated, JournalFailed)
"""What a `JournalWriter` (and the journal's shipping and anchors) emits."""
