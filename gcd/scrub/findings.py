"""The pure core of `gcd scrub`: what one HEAD answer means, what a missing key's journal
says, which listed keys are stranded garbage, which partitions never report.

No I/O, no clock, no randomness: `gcd.scrub.run` does the requests and passes every
answer and `now` in. The rules, and why each is drawn where it is, are in docs/scrub.md.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gcd.rules.explain import JournaledRequest
from gcd.rules.layout import KeyLayout
from gcd.rules.undo import MEntry
from l0gc.contract.binding import claim_key, covering_root, nested_root
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import Reference

__all__ = [
    "DELETING_OUTCOMES",
    "NOT_FOUND_CODES",
    "NOT_THE_OBJECT_CODES",
    "Cause",
    "HeadAnswer",
    "HeadVerdict",
    "ListedKey",
    "ListingTally",
    "MissingKey",
    "SilentPartition",
    "StrandedRule",
    "UnknownKey",
    "is_stranded",
    "missing_key",
    "silent_partition",
    "stranded_rule",
    "verdict",
]

NOT_FOUND_CODES: Final = frozenset({"NoSuchKey", "NotFound", "404", "BlobNotFound", "notFound"})
"""The codes that say "no such object": S3 (a HEAD has no body, so botocore says "404"),
Azure's BlobNotFound, GCS's notFound reason."""
NOT_THE_OBJECT_CODES: Final = frozenset(
    {"NoSuchBucket", "ContainerNotFound", "ResourceNotFound", "AccountNotFound"}
)
"""A 404 about something else than the object (the bucket, the container, the account):
the key's fate is unknown, never "missing"."""
DELETING_OUTCOMES: Final = ("deleted", "hidden", "unknown")
"""Journaled outcomes of a request that did (or may have) removed the key: deleted,
hidden behind a delete marker, or sent with no answer written (the sweeper stopped)."""


class HeadVerdict(enum.Enum):
    """What one HEAD of a referenced key says."""

    PRESENT = "present"
    MISSING = "missing"
    """The store answered NotFound for the object: it is gone."""
    UNKNOWN = "unknown"
    """Anything else: a 5xx, a throttle, a timeout, a refused request. Re-check it; never
    report it as missing (a store's bad minute is not a lost object)."""


@dataclass(frozen=True, slots=True)
class HeadAnswer:
    """One HEAD's answer as the store gave it: the HTTP status when one came back, the
    store's error code (or "Timeout", "ConnectionError"), and a message for people."""

    status: int | None = None
    code: str | None = None
    detail: str = ""


def verdict(answer: HeadAnswer) -> HeadVerdict:
    """PRESENT for a 2xx; MISSING only for a NotFound about the object itself; UNKNOWN
    for everything else (5xx, 429, 403, a timeout, a connection error, a 404 naming the
    bucket or container)."""
    if answer.status is not None and 200 <= answer.status < 300:
        return HeadVerdict.PRESENT
    if answer.code in NOT_THE_OBJECT_CODES:
        return HeadVerdict.UNKNOWN
    if answer.status == 404:
        return HeadVerdict.MISSING
    if answer.status is None and answer.code in NOT_FOUND_CODES:
        return HeadVerdict.MISSING
    return HeadVerdict.UNKNOWN


class Cause(enum.Enum):
    """Why a referenced key is missing, as the deletion journal tells it."""

    DELETED_BY_L0GC = "deleted_by_l0gc"
    """A journaled l0gc request deleted it (or may have): a bug in l0gc or in M. Page."""
    ABSENT_FROM_JOURNAL = "absent_from_journal"
    """No journaled request deleted it: something else did (a lifecycle rule, a person,
    another tool), or a sweeper ran without the journal given here."""
    JOURNAL_NOT_READ = "journal_not_read"
    """No journal was given (--journal-dir/--journal-prefix): who deleted it is not known."""


@dataclass(frozen=True, slots=True)
class MissingKey:
    """A referenced key the store says is gone, with the journal's answer."""

    reference: Reference
    epoch: int | None
    """Its epoch when the layout parses it."""
    cause: Cause
    deletion: JournaledRequest | None = None
    """The journaled request that deleted it (the last one), when `cause` says l0gc."""
    named: int = 0
    """How many journaled requests named the key (deleting or not)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (docs/scrub.md)."""
        deletion = None
        if self.deletion is not None:
            found = self.deletion
            deletion = {
                "round": found.round,
                "at": found.at,
                "when": found.when,
                "safe_epoch": found.safe_epoch,
                "cluster_epoch": found.cluster_epoch,
                "sender": found.sender,
                "sweeper": found.sweeper,
                "request": found.request,
                "outcome": found.outcome,
                "source": found.source,
            }
        return {
            "key": self.reference.key,
            "partition": self.reference.partition,
            "offset": self.reference.offset,
            "epoch": self.epoch,
            "cause": self.cause.value,
            "deletion": deletion,
            "journaled_requests": self.named,
        }


def missing_key(
    reference: Reference, epoch: int | None, requests: Sequence[JournaledRequest] | None
) -> MissingKey:
    """Join a missing key with the journal: `requests` are the journaled requests naming
    it (None: no journal was read). The last one whose outcome deleted (or may have
    deleted) it makes the cause DELETED_BY_L0GC; none, ABSENT_FROM_JOURNAL."""
    if requests is None:
        return MissingKey(reference, epoch, Cause.JOURNAL_NOT_READ)
    deleting = [r for r in requests if r.outcome.startswith(DELETING_OUTCOMES)]
    if not deleting:
        return MissingKey(reference, epoch, Cause.ABSENT_FROM_JOURNAL, None, len(requests))
    last = max(deleting, key=lambda r: r.at)
    return MissingKey(reference, epoch, Cause.DELETED_BY_L0GC, last, len(requests))


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A referenced key whose HEAD had no usable answer, twice (it is re-checked once)."""

    reference: Reference
    code: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "key": self.reference.key,
            "partition": self.reference.partition,
            "offset": self.reference.offset,
            "code": self.code,
            "detail": self.detail,
        }


# -- stranded garbage ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StrandedRule:
    """Keys of epoch <= `threshold` last modified before `cutoff` have been garbage since
    `cutoff` at least: still listed, they are stranded (the sweepers should have taken
    them; docs/scrub.md)."""

    threshold: int
    cutoff: float
    """now - `after_s`, unix seconds."""
    after_s: float
    m_then: int
    """M as M's history held it at `cutoff`."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "threshold_epoch": self.threshold,
            "cutoff": self.cutoff,
            "after_s": self.after_s,
            "m_then": self.m_then,
        }


def stranded_rule(
    history: Sequence[MEntry], current: int | None, now: float, after_s: float
) -> StrandedRule | str:
    """The rule for this run, or why there is none (a sentence).

    M then is the last entry of M's history at or before now - `after_s`; the threshold is
    the lowest M since (that entry, every later one, and `current`): a key at or below it
    has been garbage for the whole of `after_s`, whatever M did meanwhile."""
    if not history:
        return (
            "M's history is absent (sweepers record it only with --undo-window): "
            "stranded garbage not checked"
        )
    cutoff = now - after_s
    before = [entry for entry in history if entry.at <= cutoff]
    if not before:
        oldest = min(entry.at for entry in history)
        return (
            f"M's history starts {now - oldest:.0f}s ago, less than --stranded-after "
            f"{after_s:g}s: stranded garbage not checked yet"
        )
    then = max(before, key=lambda entry: entry.at)
    lowest = min([then.m, *(e.m for e in history if e.at > cutoff)])
    if current is not None:
        lowest = min(lowest, current)
    return StrandedRule(threshold=lowest, cutoff=cutoff, after_s=after_s, m_then=then.m)


def is_stranded(rule: StrandedRule, epoch: int, last_modified_s: float, referenced: bool) -> bool:
    """True for a key of `epoch`, last modified at `last_modified_s`, that has been garbage
    for the rule's whole span: epoch at or below the threshold, written before the cutoff
    (a late orphan of an old epoch is young garbage), and referenced by no entry (a
    referenced key is kept on purpose, and the sweepers report it)."""
    return epoch <= rule.threshold and last_modified_s <= rule.cutoff and not referenced


@dataclass(frozen=True, slots=True)
class ListedKey:
    """One listed key as the findings show it."""

    key: str
    size: int
    last_modified_s: float
    epoch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "key": self.key,
            "epoch": self.epoch,
            "size": self.size,
            "last_modified": self.last_modified_s,
        }


@dataclass(slots=True)
class ListingTally:
    """What one listing of the root found, fed key by key (`add`): unparsable keys,
    stranded garbage, nested roots (another namespace's claim below ours: its keys are
    not ours to judge)."""

    layout: KeyLayout
    rule: StrandedRule | None
    referenced: Collection[str] = frozenset()
    examples: int = 10
    listed: int = 0
    listed_bytes: int = 0
    unparsable: int = 0
    unparsable_bytes: int = 0
    unparsable_examples: list[ListedKey] = field(default_factory=list)
    stranded: int = 0
    stranded_bytes: int = 0
    nested: list[str] = field(default_factory=list)
    under_nested: int = 0
    _oldest: list[tuple[int, float, str, int]] = field(default_factory=list)
    """A max-heap (negated) of the `examples` stranded keys of the lowest epochs."""

    def add(self, key: str, size: int, last_modified_s: float) -> None:
        """Judge one listed key."""
        self.listed += 1
        self.listed_bytes += size
        root = self.layout.root
        if key == claim_key(root):
            return
        found = nested_root(key, root)
        if found is not None:
            self.nested.append(found)
            return
        if covering_root(key, root, self.nested) is not None:
            self.under_nested += 1
            return
        parsed = self.layout.parse(key)
        if parsed is None:
            self.unparsable += 1
            self.unparsable_bytes += size
            if len(self.unparsable_examples) < self.examples:
                self.unparsable_examples.append(ListedKey(key, size, last_modified_s))
            return
        if self.rule is None or not is_stranded(
            self.rule, parsed.epoch, last_modified_s, key in self.referenced
        ):
            return
        self.stranded += 1
        self.stranded_bytes += size
        item = (-parsed.epoch, -last_modified_s, key, size)
        if len(self._oldest) < self.examples:
            heapq.heappush(self._oldest, item)
        elif item > self._oldest[0]:
            heapq.heapreplace(self._oldest, item)

    @property
    def oldest_stranded(self) -> list[ListedKey]:
        """The stranded examples, lowest epoch first."""
        ordered = sorted(self._oldest, reverse=True)
        return [
            ListedKey(key, size, -neg_at, -neg_epoch) for neg_epoch, neg_at, key, size in ordered
        ]


# -- partitions that never report ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SilentPartition:
    """A partition pinning M whose record says nobody moves it: never published, not
    written for longer than the threshold, or waiting on the same thing that long."""

    partition: str
    reason: str
    """"never_published", "not_updated" or "waiting"."""
    detail: str
    watermark: int
    owner: str | None
    updated_at: float | None
    waiting: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "partition": self.partition,
            "reason": self.reason,
            "detail": self.detail,
            "watermark": self.watermark,
            "owner": self.owner,
            "updated_at": self.updated_at,
            "waiting": self.waiting,
        }


def silent_partition(
    record: PartitionRecord, cluster_epoch: int | None, now: float, after_s: float
) -> SilentPartition | None:
    """The finding for a record that holds M back and has not moved for `after_s`, or
    None. A record at the head (M(p) within two epochs of the cluster epoch, the window's
    steady state) holds nothing back, however old it is."""
    if cluster_epoch is None or record.watermark >= cluster_epoch - 2:
        return None
    behind = f"M(p) {record.watermark}, cluster epoch {cluster_epoch}"

    def found(reason: str, detail: str) -> SilentPartition:
        return SilentPartition(
            record.partition,
            reason,
            detail,
            record.watermark,
            record.owner,
            record.updated_at,
            record.waiting,
        )

    if record.updated_at is None:
        return found("never_published", f"{behind}; no owner ever published its record")
    age = now - record.updated_at
    if age > after_s:
        return found(
            "not_updated",
            f"{behind}; its record was last written {age:.0f}s ago (no running owner? "
            "a live waiting owner refreshes it every few minutes)",
        )
    waiting = record.waiting or {}
    since = waiting.get("since")
    if isinstance(since, int | float) and now - since > after_s:
        on = str(waiting.get("on", "?"))
        detail = f"{behind}; waiting on {on} for {now - since:.0f}s"
        if on == "reconciler":
            detail += (
                f" (committed offset {waiting.get('committed_offset')}, reconciled "
                f"{waiting.get('reconciled_offset')})"
            )
        return found("waiting", detail)
    return None
