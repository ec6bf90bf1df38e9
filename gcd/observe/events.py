"""What the deleter tells the outside world about each DeleteObjects call (records only).

The deleter emits two frozen records per request, `BatchAttempt` just before it is
sent and `BatchOutcome` once it is answered (or failed), to every `DeleteSink` it was
given; it knows nothing of what the sinks do. The deletion journal (`gcd.journal.records`) is
one sink; tests use others. Both records carry the `DeleteBasis` of the round: the
admission the sweeper deletes under (M, the cluster epoch, the etcd revision they were
read at, and the partitions pinning M), which is what makes a deletion explainable
afterwards.

A sink may refuse an attempt by raising `DeletionNotRecorded` from `before`: the
deleter then does not send the request (a deletion that cannot be explained is not
made) and counts its keys as errors. `after` must not raise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gcd.rules.admission import RoundAdmission
from l0gc.contract.references import Reference
from l0gc.errors import L0gcError

__all__ = ["BatchAttempt", "BatchOutcome", "DeleteBasis", "DeleteSink", "DeletionNotRecorded"]


class DeletionNotRecorded(L0gcError):
    """A sink could not record a deletion before it was made; the batch is not sent."""


@dataclass(frozen=True, slots=True)
class DeleteBasis:
    """The admission a round deletes under: why its deletions are safe."""

    safe_epoch: int
    cluster_epoch: int | None
    revision: int | None
    """The etcd revision M was read at; None without etcd (`--safe-epoch` alone)."""
    pinning: tuple[tuple[str, int], ...] = ()
    """(partition, M(p)) of the partitions whose M(p) is M (the first few)."""
    override: bool = False
    """True when M is an operator's `--safe-epoch`, checked against etcd but not read from it."""
    round_id: str | None = None
    """The round's id (`gcd sweep --json` "round"; `gcd restore --round`)."""
    references: Mapping[str, Reference] = field(default_factory=dict, compare=False)
    """Every key a partition still references, read with M: none of them is deleted."""

    @classmethod
    def of(cls, admission: RoundAdmission, *, override: bool = False) -> DeleteBasis:
        """The basis of an allowed admission."""
        if admission.safe_epoch is None:
            raise ValueError(f"admission {admission!r} allows no deletion: no basis")
        return cls(
            admission.safe_epoch,
            admission.cluster_epoch,
            admission.revision,
            admission.pinning,
            override,
            references=admission.references,
        )


@dataclass(frozen=True, slots=True)
class BatchAttempt:
    """One DeleteObjects request about to be sent."""

    basis: DeleteBasis | None
    keys: tuple[str, ...]
    epochs: tuple[int, ...]
    """The epoch of each key, in the same order."""
    attempt: int
    """0 for the first request of a batch, then 1, 2... for the retries of its leftovers."""
    batch: int
    """This deleter's sequence number of the batch (the same for all its requests)."""
    request: int
    """This deleter's sequence number of the request (pairs a before with its after)."""
    version_ids: tuple[str | None, ...] = ()
    """On a versioned bucket, the version id of each key (None: no version id), in the
    same order; empty when the request names no version."""
    hides: tuple[tuple[str, ...], ...] = ()
    """With an undo window on a versioned bucket: for each key, the version ids the
    delete marker this request writes will hide (newest first); empty otherwise."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What became of one `BatchAttempt`."""

    attempt: BatchAttempt
    deleted: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    """(key, S3 error code) of each key the answer says was not deleted."""
    request_error: str | None = None
    """The error code when the whole request failed (then nothing is known deleted)."""
    deleted_version_ids: tuple[str | None, ...] = ()
    """The version id of each deleted key, in `deleted`'s order; empty without versions."""
    markers: tuple[tuple[str, str], ...] = ()
    """(key, version id) of each delete marker the request wrote (an undo window's hidden
    keys on a versioned bucket: `gcd restore` deletes exactly these)."""

    @property
    def unanswered(self) -> tuple[str, ...]:
        """Keys of the attempt the answer did not mention (sent again by the deleter)."""
        if self.request_error is not None:
            return ()
        seen = set(self.deleted) | {key for key, _ in self.failed}
        return tuple(key for key in self.attempt.keys if key not in seen)


class DeleteSink(Protocol):
    """Consumes the deleter's records (see the module docstring)."""

    def before(self, attempt: BatchAttempt) -> None:
        """Called before the request is sent; raise DeletionNotRecorded to stop it."""
        ...

    def after(self, outcome: BatchOutcome) -> None:
        """Called once the request is answered or failed."""
        ...


def emit_before(sinks: Sequence[DeleteSink], attempt: BatchAttempt) -> None:
    """Give `attempt` to every sink, in order (the first refusal propagates)."""
    for sink in sinks:
        sink.before(attempt)


def emit_after(sinks: Sequence[DeleteSink], outcome: BatchOutcome) -> None:
    """Give `outcome` to every sink."""
    for sink in sinks:
        sink.after(outcome)
