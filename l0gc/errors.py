"""Every exception of the watermark side, in one hierarchy grouped by who is at fault.

Design notes: docs/internals/kernel.md, `l0gc.errors`.
"""

# The exception names are part of the design (docs/algorithms.md, STYLE.md), not "...Error".

from __future__ import annotations

import reprlib
from dataclasses import KW_ONLY, dataclass, fields
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "AUTH_CODES",
    "CREDENTIALS_REJECTED",
    "LISTING_BROKEN",
    "MISSING_CODES",
    "AlreadyCommitted",
    "ConfigError",
    "EpochAhead",
    "EpochConflict",
    "EtcdUnavailable",
    "FenceExpired",
    "FenceTimeout",
    "FencingViolation",
    "GuardClosed",
    "IllegalTransition",
    "InvalidJson",
    "InvalidRecord",
    "InvalidSnapshot",
    "L0gcError",
    "LeaseExpired",
    "LiveOwner",
    "NoOwner",
    "NotServed",
    "PartitionNotHosted",
    "PartitionNotRegistered",
    "ReferencesFull",
    "Refused",
    "StaleEpoch",
    "StaleOwner",
    "StorageError",
    "Unavailable",
    "UsageError",
    "WatchLost",
    "WatermarkRegression",
    "WatermarkUnavailable",
    "WriteRefused",
]

_short = reprlib.Repr()  # keeps a huge bad value from flooding a message
_short.maxstring = _short.maxother = 60


def _span(bounds: tuple[int | None, int | None]) -> str:
    low, high = bounds
    if low is None or high is None:
        return "[]"
    return f"[{low}]" if low == high else f"[{low}, {high}]"


class L0gcError(Exception):
    """Base class of every error l0gc raises on purpose.

    An error with fields is a dataclass (``eq=False, repr=False``: identity and
    Exception's repr, as for any exception); its positional fields are its `args`, so it
    pickles with them as Exception.__init__ would have kept them.
    """

    def __post_init__(self) -> None:
        fields_ = fields(cast("DataclassInstance", self))
        self.args = tuple(getattr(self, f.name) for f in fields_ if not f.kw_only)


# -- the caller is at fault: fix the input; retrying as is fails again ----------


class UsageError(L0gcError):
    """The caller or operator asked for something invalid: a setting, an argument, an
    event the state machine cannot take in its state. Nothing was changed."""


class ConfigError(UsageError):
    """A setting or an argument is invalid; the message names it and says what is allowed."""


@dataclass(eq=False, repr=False)
class LiveOwner(ConfigError):
    """An operator action refused because the partition's owner is live (running, or
    published recently): the owner still admits writes the change would make deletable.
    `why` says what makes it live; see `watermark.api.owners`."""

    partition: str
    action: str
    why: str

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r}: refusing to {self.action} while its {self.why}: "
            "the owner still admits writes the change would make deletable; stop that "
            "publisher or move the partition first, or pass --force (and --reason) to "
            "revoke the owner first"
        )


@dataclass(eq=False, repr=False)
class NotServed(ConfigError):
    """A registration no publisher of the fleet would serve: replicas host only the
    partitions their ``--partitions`` list names, so a record of any other would be hosted
    by nobody, its unmoving M(p) holding back GC of the whole namespace (issue 55)."""

    partition: str
    served: str

    def __str__(self) -> str:
        return (
            f"partition {_short.repr(self.partition)} is not among the partitions this fleet "
            f"of replicas serves ({self.served}): registered, it would be hosted by nobody and "
            "hold back GC; add it to the replicas' --partitions (the chart's "
            "publisher.partitions) and roll them out, or register a name in that list"
        )


@dataclass(eq=False, repr=False)
class PartitionNotRegistered(ConfigError):
    """The partition has no record in etcd: it was never registered, or it was deleted."""

    partition: str

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r} is not registered (never registered, or deleted); "
            "register it before any object is written for it, then retry"
        )


class IllegalTransition(UsageError):
    """An event the state machine cannot take in its current state; nothing was changed.

    Raised for caller bugs: advancing a window to an epoch that is not above it, log
    offsets that do not increase, a reconciled offset that goes backwards or passes the
    end of the log.
    """


# -- refused to keep data safe: nothing changed; re-read, or retry with a new fence -


class Refused(L0gcError):
    """l0gc refused an operation to keep data safe, and nothing was changed: the caller
    lost a race (a newer epoch, owner or value) or its fence. Re-read and retry."""


class WriteRefused(Refused):
    """A writer's fence or commit was refused: the object it wrote is not committed, and
    the writer retries the write under a new fence (a new object key)."""


@dataclass(eq=False, repr=False)
class StaleEpoch(WriteRefused):
    """A writer's epoch is below the fencing window: the write must not be committed.

    `epoch` is the refused epoch, `window` the fencing window `(oldest_accepted,
    latest_seen)` (`(None, None)` when empty) and `floor` the published watermark below
    which nothing is admitted after recovery, if any.
    """

    epoch: int
    window: tuple[int | None, int | None]
    floor: int | None = None

    def __str__(self) -> str:
        low = self.window[0]
        if self.floor is None or (low is not None and self.epoch < low):
            where = f"is below the fencing window {_span(self.window)}"
        else:
            where = (
                f"is at or below the published watermark {self.floor} (objects with that "
                f"epoch may already be deleted; fencing window {_span(self.window)})"
            )
        return (
            f"epoch {self.epoch} {where}; the writer must re-read the cluster epoch and "
            "re-upload the object with the new epoch"
        )


@dataclass(eq=False, repr=False)
class EpochAhead(WriteRefused):
    """A fence asked for an epoch above the cluster epoch; nothing was granted.

    No writer can have read such an epoch, so granting it would slide the fencing window
    past every real writer (their next fences are stale) and let M(p) run ahead of the
    objects still being written. `cluster_epoch` is the epoch read from etcd just before
    refusing.
    """

    epoch: int
    cluster_epoch: int

    def __str__(self) -> str:
        return (
            f"epoch {_short.repr(self.epoch)} is above the cluster epoch {self.cluster_epoch}: "
            "stamp objects with the cluster epoch you read (or a partition's created_epoch), "
            "never a later one; re-read the cluster epoch and re-upload the object"
        )


@dataclass(eq=False, repr=False)
class FenceTimeout(WriteRefused):
    """A fence was not granted before its deadline; the caller holds nothing.

    `epoch` is the requested epoch, `timeout_s` the deadline it had and `window` the
    fencing window when it gave up.
    """

    epoch: int
    timeout_s: float
    window: tuple[int | None, int | None]
    oldest: tuple[int, float] | None = None
    """(epoch, age in seconds) of the oldest fence still held when it gave up."""

    def __str__(self) -> str:
        if self.oldest is None:
            held = "no fence was held then: the window was busy sliding"
        else:
            epoch, age = self.oldest
            held = (
                f"a fence for epoch {epoch} granted {age:.1f} s ago is still held (neither "
                "committed nor aborted; it is reclaimed at its hold deadline)"
            )
        return (
            f"fence for epoch {self.epoch} not granted within {self.timeout_s:g} s (fencing "
            f"window {_span(self.window)}): {held}; retry the fence, and make writers commit "
            "or abort every fence they are granted"
        )


@dataclass(eq=False, repr=False)
class GuardClosed(WriteRefused):
    """The partition's fencing guard is closed; nothing was granted.

    It was released, this process lost the partition, or the service is shutting down.
    Queued fence requests are woken with this error.
    """

    partition: str

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r}: its fencing guard is closed (released, taken over "
            "by another owner, or the service is shutting down); send the write to the "
            "partition's current owner"
        )


@dataclass(eq=False, repr=False)
class FenceExpired(WriteRefused):
    """A fence is not held any more: the write must not be committed.

    It passed its deadline and was reclaimed so a window slide could proceed, or it was
    already committed or aborted.
    """

    partition: str
    epoch: int | None
    _: KW_ONLY
    why: str | None = None
    """How it ended when known: aborted, refused, reclaimed or revoked."""

    def __str__(self) -> str:
        what = "unknown fence" if self.epoch is None else f"fence for epoch {self.epoch}"
        cause = {
            None: "it expired and was reclaimed so the fencing window could slide, or it was "
            "already committed or aborted",
            "aborted": "it was aborted",
            "refused": "its commit was refused (see that answer), which released it",
            "reclaimed": "it passed its hold deadline and was reclaimed so the fencing window "
            "could slide",
            "revoked": "the publisher let the partition go (shutdown, hand-over or lost "
            "ownership) and revoked it",
        }.get(self.why, str(self.why))
        return (
            f"partition {self.partition!r}: {what} is not held ({cause}); do not commit the "
            "write: fence again, and re-upload with a current epoch if refused"
        )


@dataclass(eq=False, repr=False)
class AlreadyCommitted(WriteRefused):
    """A fence already committed at one offset is committed again at another one."""

    partition: str
    epoch: int
    committed: int
    offset: int

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r}: this fence (epoch {self.epoch}) was already "
            f"committed at offset {self.committed}, not {self.offset}; one fence commits one "
            "log entry: fence again for another entry"
        )


@dataclass(eq=False, repr=False)
class PartitionNotHosted(WriteRefused):
    """This publisher does not host the partition (never adopted, released, or lost)."""

    partition: str

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r} is not hosted by this publisher: adopt it first "
            "(`watermark serve --partitions`, or POST /v1/partitions/{partition}/adopt), or "
            "send the request to the partition's owner"
        )


@dataclass(eq=False, repr=False)
class ReferencesFull(Refused):
    """A commit would hold more references than the partition's cap: refused, nothing
    changed, its fence still held (commit it again once the reconciler releases some)."""

    partition: str
    held: int
    asked: int
    max_keys: int
    size: int

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r}: {self.held} object keys are referenced by entries "
            f"the reconciler has not released, and this commit names {self.asked} more: over "
            f"the cap of {self.max_keys} keys (`watermark serve --max-references`) or 512 KiB "
            f"({self.size} bytes); the reconciler is behind or does not name what it lifted: "
            "let it catch up and commit again, or raise --max-references"
        )


@dataclass(eq=False, repr=False)
class NoOwner(Refused):
    """No replica owns the partition right now (`watermark serve --replicated`): it is
    being handed over or adopted after a replica left, and the wait for it ran out."""

    partition: str
    reason: str
    waited_s: float

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r} has no owner yet ({self.reason}; waited "
            f"{self.waited_s:.1f} s): retry in a second, at any replica; a partition without "
            "an owner for longer than the replicas' lease TTL needs a look (is any replica "
            "that lists it running?)"
        )


@dataclass(eq=False, repr=False)
class StaleOwner(Refused):
    """This process no longer owns the partition: its `owner_epoch` is not the current one."""

    partition: str
    owner_epoch: int
    current_owner_epoch: int

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r}: this process holds owner_epoch {self.owner_epoch} "
            f"but the current owner_epoch is {self.current_owner_epoch}; another owner took "
            "over, so stop publishing for this partition and drop its local state"
        )


@dataclass(eq=False, repr=False)
class EpochConflict(Refused):
    """A compare-and-swap lost: `key` changed underneath (e.g. another process advanced
    the cluster epoch, or a partition record kept changing during a publish)."""

    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.key}: {self.detail}; it was changed concurrently: re-read it and retry"


@dataclass(eq=False, repr=False)
class WatermarkRegression(Refused):
    """A publish would lower a partition's M(p); it was refused (M(p) only goes up)."""

    partition: str
    attempted: int
    current: int

    def __str__(self) -> str:
        return (
            f"partition {self.partition!r}: refused to lower the published watermark from "
            f"{self.current} to {self.attempted}; objects up to {self.current} may already be "
            "deleted: rebuild this partition's GC state from its log instead of publishing"
        )


@dataclass(eq=False, repr=False)
class LeaseExpired(Refused):
    """An etcd lease is gone (expired or revoked): keys bound to it are deleted."""

    lease_id: int

    def __str__(self) -> str:
        return f"etcd lease {self.lease_id:#x} has expired or was revoked; grant a new lease"


# -- what was stored or sent is malformed: it is never trusted, nothing is deleted -


class InvalidRecord(L0gcError, ValueError):
    """A stored document (partition record, cluster epoch) does not decode exactly.

    A malformed record makes the global safe epoch undefined: sweepers delete nothing.
    """


@dataclass(eq=False, repr=False)
class InvalidJson(InvalidRecord):
    """A JSON document (a stored record, a request body) broke `l0gc.strictjson`'s rules.

    `what` names the document, `problem` the rule it broke (and where, when known).
    """

    what: str
    problem: str

    def __str__(self) -> str:
        return (
            f"{self.what}: {self.problem}; only strict JSON is accepted (UTF-8, bounded size "
            "and nesting, no duplicate keys, no NaN or Infinity): fix whatever "
            "produced it and write it again"
        )


@dataclass(eq=False, repr=False)
class InvalidSnapshot(InvalidRecord):
    """A partition GC snapshot is malformed; `field` names the offending field.

    A snapshot is part of the partition record, so this is also an `InvalidRecord`.
    """

    field: str
    problem: str

    @classmethod
    def bad_value(cls, field: str, value: object, expected: str) -> InvalidSnapshot:
        """Build the error for a field whose value is not what `expected` describes."""
        return cls(field, f"got {_short.repr(value)}, expected {expected}")

    def __str__(self) -> str:
        return (
            f"invalid partition GC snapshot: field {self.field!r}: {self.problem}; it was not "
            "written by a compatible l0gc tracker or is corrupted: do not publish from it, "
            "rebuild the GC state by replaying the partition log"
        )


# -- a dependency is down or cannot be trusted now: deletion stops; retry later ----


class Unavailable(L0gcError):
    """A dependency (etcd, the object store) could not be reached, failed a call, or gave
    an answer that cannot be trusted right now. Sweepers delete nothing on it."""


@dataclass(eq=False, repr=False)
class EtcdUnavailable(Unavailable):
    """etcd could not be reached or refused a call; `endpoint` is the one tried last.

    After a failed write the outcome is unknown: re-read before deciding to write again.
    """

    endpoint: str
    reason: str

    def __str__(self) -> str:
        return (
            f"etcd at {self.endpoint} unavailable: {self.reason}; check that etcd is running "
            "and reachable (--etcd, TLS and auth settings), then retry"
        )


class WatchLost(EtcdUnavailable):
    """A watch of the namespace ended (compacted, cancelled, connection lost, no answer):
    the follower reads the whole namespace again and watches from there."""


@dataclass(eq=False, repr=False)
class WatermarkUnavailable(Unavailable):
    """The global safe epoch M cannot be computed; sweepers must delete nothing.

    `partition` names the partition whose record is the cause, when there is one.
    """

    reason: str
    partition: str | None = None

    def __str__(self) -> str:
        if self.partition is None:
            return (
                f"global watermark unavailable: {self.reason}; nothing is deleted until it "
                "is fixed: see docs/operations.md#gc-blocked"
            )
        return (
            f"global watermark unavailable: {self.reason} (partition {self.partition!r}); "
            "nothing is deleted until it is fixed: see docs/operations.md#gc-blocked (look "
            "at the record with `watermark partition show`, fix it with `watermark partition "
            "repair`, or deregister the partition if it is gone)"
        )


# -- l0gc itself is at fault: an invariant broke (a bug; report it) --------------


@dataclass(eq=False, repr=False)
class FencingViolation(L0gcError):
    """A committed entry's epoch is below the applied window: fencing failed.

    The leader must never commit an epoch below its fencing window, so this entry's
    object may already have been garbage collected. `window` is the applied window
    `(previous_applied, max_applied)` at the time, its lower bound raised to the
    fence's if that is higher.
    """

    offset: int
    epoch: int
    window: tuple[int, int]

    def __str__(self) -> str:
        return (
            f"entry at offset {self.offset} has epoch {self.epoch}, below the applied window "
            f"{_span(self.window)}: fencing failed and its object may already be deleted; "
            "the entry was not applied: stop publishing this partition's watermark and "
            "investigate the leader's fencing"
        )


# The object stores' errors (the sweepers' side)
CREDENTIALS_REJECTED: Final = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "InvalidClientTokenId",
    }
)
"""S3's codes for credentials it does not accept (unknown, expired, badly signed)."""
AUTH_CODES: Final = frozenset(
    {
        "401",
        "403",
        "AccessDenied",
        "AllAccessDisabled",
        *CREDENTIALS_REJECTED,
        "NoCredentials",
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "forbidden",
        "unauthorized",
    }
)
"""Codes (S3, Azure, GCS reasons, HTTP statuses) that mean the credentials or their
permissions are the problem: the only failures whose advice is "check credentials"."""
MISSING_CODES: Final = frozenset({"NoSuchBucket", "ContainerNotFound", "notFound", "404"})
LISTING_BROKEN: Final = "ListingBroken"
"""Our code, not the store's: every request was answered, but the pages do not make a
listing (one sent back to a cursor it had already given, or too many of them)."""


@dataclass(eq=False, repr=False)
class StorageError(Unavailable):
    """An object-store call failed; `code` is the service's error code.

    `retryable` says whether the same call may succeed later (throttling, timeouts,
    5xx) or will keep failing (access denied, no such bucket).
    """

    message: str
    code: str
    retryable: bool

    def __str__(self) -> str:
        if self.retryable:
            advice = "retryable: retry with backoff"
        elif self.code in AUTH_CODES:
            advice = "not retryable: check the credentials and their permissions"
        elif self.code in MISSING_CODES:
            advice = "not retryable: check the bucket (container) name and the endpoint"
        elif self.code == LISTING_BROKEN:
            advice = "not retryable: the store answered, but its pages do not make a listing"
        else:
            advice = f"not retryable: the store refused the request with {self.code}"
        return f"{self.message} (code {self.code}; {advice})"
