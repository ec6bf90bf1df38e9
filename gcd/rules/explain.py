"""Why is this object still there? The verdict `gcd explain` gives one key (pure, no I/O).

Design notes: docs/internals/rules.md, `gcd.rules.explain`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from gcd.rules.decision import Verdict as RoundVerdict
from gcd.rules.decision import decide
from gcd.rules.layout import KeyLayout
from l0gc.contract.binding import claim_key, nested_root
from l0gc.contract.references import Reference

__all__ = [
    "WAITING_SHOWN",
    "Estimate",
    "Explanation",
    "GcFacts",
    "JournaledRequest",
    "KeyVerdict",
    "PartitionFact",
    "Reason",
    "StoreFacts",
    "VersionFact",
    "estimate_ready",
    "explain",
    "start_before",
]

WAITING_SHOWN: Final = 10
STALLED_STEPS: Final = 3.0
STALLED_MIN_S: Final = 60.0
"""A partition whose M(p) has not risen for STALLED_STEPS of its average steps (and at
least STALLED_MIN_S) has stalled: its past rate says nothing of when it moves again (a
writer that stopped), so the estimate says so instead of extrapolating."""
"""Partitions named in `waiting_on`; the rest are counted (`waiting_on_more`)."""


class KeyVerdict(enum.Enum):
    """What becomes of one key (issue 38 will add ``pending reclaim``: module docstring)."""

    NEVER = "never"
    DELETABLE = "deletable"
    KEPT = "kept"
    DELETED = "deleted"
    ABSENT = "absent"
    UNKNOWN = "unknown"
    """The store's answer for this key could not be read: nothing is claimed about it."""


class Reason(enum.Enum):
    """The fact behind a verdict, one per case of the module docstring."""

    OUTSIDE_ROOT = "outside_root"
    JOURNAL_OBJECT = "journal_object"
    CLAIM = "claim"
    UNPARSABLE = "unparsable"
    TEMPLATE_MISMATCH = "template_mismatch"
    NESTED_ROOT = "nested_root"
    JOURNALED = "journaled"
    HIDDEN = "hidden_by_delete_marker"
    NOT_FOUND = "not_found"
    PAUSED = "paused"
    BLOCKED = "blocked"
    WAITING = "waiting_on_partitions"
    GRACE = "grace_period"
    LOCKED = "object_lock"
    ELIGIBLE = "eligible"
    STORE_UNREADABLE = "store_unreadable"
    REFERENCE_CONFLICT = "reference_conflict"
    """A partition still references the key, whose epoch is at or below M: M is wrong."""


@dataclass(frozen=True, slots=True)
class PartitionFact:
    """One registered partition as the explanation names it."""

    name: str
    watermark: int
    owner: str | None = None
    updated_at: float | None = None
    reconciler_behind: bool | None = None
    """True: entries wait for the reconciler (M(p) cannot pass them); None: unknown."""
    unreconciled: int | None = None
    """How many log entries the reconciler has not lifted yet (None: unknown)."""
    rate: float | None = None
    """Recent M(p) rise in epochs per second (None: no history to tell)."""
    rate_since: float | None = None
    """Since when the rate is measured (unix seconds)."""
    moved_at: float | None = None
    """When M(p) last rose, from etcd's history (None: not seen in it)."""


@dataclass(frozen=True, slots=True)
class GcFacts:
    """The GC state of one etcd read, shared by every key of one call."""

    now: float
    grace_s: float
    safe_epoch: int | None
    cluster_epoch: int | None
    refused: str | None = None
    """Why a round would delete nothing (`gcd.rules.admission`), None when admitted."""
    paused: bool = False
    revision: int | None = None
    partitions: tuple[PartitionFact, ...] = ()
    """Every partition with a readable record, lowest M(p) first."""
    cluster_rate: float | None = None
    """Recent cluster epoch rise in epochs per second (None: unknown)."""
    journal_prefix: str | None = None
    references: Mapping[str, Reference] = field(default_factory=dict, compare=False)
    """Every key a partition still references, read with M (docs/references.md)."""


@dataclass(frozen=True, slots=True)
class VersionFact:
    """One stored version (or the object, on an unversioned bucket)."""

    last_modified_s: float
    size: int
    version_id: str | None = None
    delete_marker: bool = False
    lock: str | None = None
    """Why Object Lock keeps it ("legal hold", "retention COMPLIANCE"...), None: not locked."""
    retain_until: float | None = None
    is_latest: bool = False
    """The store's own IsLatest flag: the newest version even when two share a second."""


@dataclass(frozen=True, slots=True)
class StoreFacts:
    """What the store holds under exactly the key; `nested_root` covers it when set."""

    versions: tuple[VersionFact, ...] = ()
    nested_root: str | None = None
    error: str | None = None
    """Why the store's answer for this key could not be read (the verdict is unknown)."""

    @property
    def found(self) -> bool:
        """True when the store holds the key (any version)."""
        return bool(self.versions)


@dataclass(frozen=True, slots=True)
class JournaledRequest:
    """One journaled request that named the key, and what became of it."""

    at: float
    sweeper: str
    request: int | None
    outcome: str
    safe_epoch: int | None
    cluster_epoch: int | None
    revision: int | None
    epoch: int | None
    pinning: tuple[tuple[str, int], ...] = ()
    version_ids: tuple[str, ...] = ()
    source: str = ""
    marker: str | None = None
    """The delete marker this request wrote over the key (an undo window), if any."""
    round: str | None = None
    """The round that sent it (a Spark job's: ``{application}.{6 hex digits}``)."""
    when: str = ""
    """`at` as ISO-8601 UTC (the journal reader formats it: this module stays pure)."""

    @property
    def sender(self) -> str:
        """Who sent the request, for people: a sweeper, or a Spark application's batch."""
        if self.round is not None and self.sweeper.startswith("spark-"):
            application = self.round.rsplit(".", 1)[0]
            return (
                f"Spark application {application} at {self.when}, batch {self.request} "
                f"(round {self.round}, task journal {self.sweeper})"
            )
        return f"sweeper {self.sweeper} (request {self.request})"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        doc = asdict(self)
        doc["pinning"] = [list(p) for p in self.pinning]
        doc["version_ids"] = list(self.version_ids)
        return doc


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a kept key may become deletable: an estimate from recent rates, never a promise."""

    at: float | None
    """Unix seconds, None when no rate says (a partition that has not moved)."""
    slowest: str | None
    """The partition (or "cluster epoch") the estimate waits for longest."""
    basis: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form (`estimate: true` marks it as one)."""
        return {"estimate": True, "at": self.at, "slowest": self.slowest, "basis": self.basis}


@dataclass(frozen=True, slots=True)
class Explanation:
    """The answer for one key: a verdict, the reason, one sentence, and the facts."""

    key: str
    verdict: KeyVerdict
    reason: Reason
    summary: str
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The `--json` object of this key (key, verdict, reason, summary, then the facts)."""
        return {
            "key": self.key,
            "verdict": self.verdict.value,
            "reason": self.reason.value,
            "summary": self.summary,
            **self.facts,
        }


def start_before(key: str) -> str:
    """A StartAfter that lists `key` first among the keys >= it: the greatest string
    below `key` that we can write (one code point lower, then U+10FFFF), else the key
    without its last character (which sorts below it too)."""
    if not key:
        return ""
    last = ord(key[-1])
    lower = last - 1
    if lower < 0 or 0xD800 <= lower <= 0xDFFF:
        return key[:-1]
    return key[:-1] + chr(lower) + "\U0010ffff"


def estimate_ready(epoch: int, facts: GcFacts, waiting: Sequence[PartitionFact]) -> Estimate:
    """When every partition in `waiting` (and the cluster epoch) passes `epoch`, at the
    rates they rose at recently: the latest of their times. An estimate: a stalled
    partition or a burst of writes moves it."""
    latest: float | None = None
    slowest: str | None = None
    unknown: list[str] = []
    needs = [(p.name, epoch - p.watermark, p.rate) for p in waiting]
    if facts.cluster_epoch is not None and epoch >= facts.cluster_epoch:
        needs.append(("cluster epoch", epoch - facts.cluster_epoch + 1, facts.cluster_rate))
    moved = {p.name: p.moved_at for p in waiting}
    stalled: list[tuple[str, float]] = []
    for name, missing, rate in needs:
        if rate is None or rate <= 0 or not math.isfinite(rate):
            unknown.append(name)
            continue
        at = moved.get(name)
        if at is not None and facts.now - at > max(STALLED_MIN_S, STALLED_STEPS / rate):
            stalled.append((name, facts.now - at))
            continue
        at = facts.now + missing / rate
        if latest is None or at > latest:
            latest, slowest = at, name
    said: list[str] = []
    if unknown:
        what = ", ".join(unknown[:3]) + (
            f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        )
        said.append(f"{what} has not moved recently")
    if stalled:
        name, idle = stalled[0]
        more = f" (and {len(stalled) - 1} more)" if len(stalled) > 1 else ""
        said.append(
            f"{name}{more} has not risen for {idle:.0f} s though it rose before "
            "(a writer that stopped?)"
        )
    if said:
        first = unknown[0] if unknown else stalled[0][0]
        return Estimate(None, first, "no estimate: " + "; ".join(said))
    return Estimate(latest, slowest, "from the recent rise of M(p) of the partitions waited on")


def _never(key: str, reason: Reason, summary: str, **facts: Any) -> Explanation:
    return Explanation(key, KeyVerdict.NEVER, reason, summary, facts)


def _not_l0(key: str, layout: KeyLayout, facts: GcFacts) -> Explanation | None:
    """The `never` verdicts that need no look at the store."""
    root = layout.listing_root
    prefix = facts.journal_prefix
    if prefix is not None and key.startswith(prefix.rstrip("/") + "/"):
        return _never(
            key,
            Reason.JOURNAL_OBJECT,
            f"a deletion journal object under {prefix}, outside the root {root}: never deleted",
        )
    if not key.startswith(root):
        return _never(
            key, Reason.OUTSIDE_ROOT, f"outside the root {root}: not an L0 key of this namespace"
        )
    if key == claim_key(layout.root) or nested_root(key, layout.root) is not None:
        return _never(
            key,
            Reason.CLAIM,
            "an l0gc claim object (a namespace's binding in the bucket): never deleted",
        )
    if layout.parse(key) is None:
        if layout.read_fields(key) is not None:
            return _never(
                key,
                Reason.TEMPLATE_MISMATCH,
                f"the key pattern reads it, but the "
                f"template {layout.template!r} does not give it back exactly: never "
                "deleted",
            )
        return _never(
            key,
            Reason.UNPARSABLE,
            f"not parsed by the layout {layout.pattern!r}: "
            "never deleted (the sweeper counts it as unparsable)",
        )
    return None


def explain(
    key: str,
    layout: KeyLayout,
    facts: GcFacts,
    store: StoreFacts,
    journal: Sequence[JournaledRequest] = (),
) -> Explanation:
    """The verdict for `key` (see the module docstring)."""
    early = _not_l0(key, layout, facts)
    if early is not None:
        return early
    parsed = layout.parse(key)
    assert parsed is not None  # _not_l0 returned every key that does not parse
    epoch = parsed.epoch
    if store.nested_root is not None:
        return _never(
            key,
            Reason.NESTED_ROOT,
            f"under {store.nested_root}, another "
            "namespace's root nested in this one (its claim object is there): "
            "never deleted by this namespace",
            nested_root=store.nested_root,
        )
    base: dict[str, Any] = {
        "epoch": epoch,
        "safe_epoch": facts.safe_epoch,
        "cluster_epoch": facts.cluster_epoch,
        "revision": facts.revision,
    }
    reference = facts.references.get(key)
    if reference is not None:
        base["referenced_by"] = {"partition": reference.partition, "offset": reference.offset}
    if store.error is not None:
        return Explanation(
            key,
            KeyVerdict.UNKNOWN,
            Reason.STORE_UNREADABLE,
            f"unknown: the store's answer for this key could not be read "
            f"({store.error}); nothing is claimed about it",
            {**base, "error": store.error},
        )
    if not store.found:
        return _gone(key, base, journal)
    hidden = _hidden(key, base, store, journal)
    if hidden is not None:
        return hidden
    base["versions"] = [_version(v) for v in store.versions]
    if journal:
        base["journal"] = [d.to_dict() for d in journal]
    if reference is not None and facts.safe_epoch is not None and epoch <= facts.safe_epoch:
        return Explanation(
            key,
            KeyVerdict.KEPT,
            Reason.REFERENCE_CONFLICT,
            f"kept: a reference conflict: partition {reference.partition!r}'s entry at offset "
            f"{reference.offset} still references it, yet its epoch {epoch} <= M "
            f"{facts.safe_epoch}: M is wrong, so sweepers delete nothing and pause GC "
            "(docs/references.md#a-reference-conflict)",
            base,
        )
    if facts.refused is not None:
        reason = Reason.PAUSED if facts.paused else Reason.BLOCKED
        what = "GC is paused" if facts.paused else "GC is blocked"
        return Explanation(
            key,
            KeyVerdict.KEPT,
            reason,
            f"kept: {what}: {facts.refused}",
            {**base, "refused": facts.refused, **_waiting(epoch, facts)},
        )
    assert facts.safe_epoch is not None  # an admitted read has M
    youngest = max(v.last_modified_s for v in store.versions)
    verdict, _ = decide(key, youngest, layout, facts.safe_epoch, facts.now, facts.grace_s)
    if verdict is RoundVerdict.NOT_ELIGIBLE:
        waiting = _waiting(epoch, facts)
        return Explanation(
            key,
            KeyVerdict.KEPT,
            Reason.WAITING,
            _waiting_summary(epoch, facts, waiting),
            {**base, **waiting},
        )
    if verdict is RoundVerdict.TOO_YOUNG:
        ends = youngest + facts.grace_s
        return Explanation(
            key,
            KeyVerdict.KEPT,
            Reason.GRACE,
            f"kept: inside the grace period of {facts.grace_s:g} s (epoch "
            f"{epoch} <= M {facts.safe_epoch}); deletable after it ends",
            {**base, "last_modified": youngest, "grace_s": facts.grace_s, "grace_ends": ends},
        )
    locked = [
        v
        for v in store.versions
        if v.lock is not None and (v.retain_until is None or v.retain_until > facts.now)
    ]
    if locked:
        until = [v.retain_until for v in locked if v.retain_until is not None]
        latest = max(until) if until else None
        return Explanation(
            key,
            KeyVerdict.KEPT,
            Reason.LOCKED,
            f"kept: Object Lock retains {len(locked)} version(s) "
            f"({locked[0].lock}); the store refuses to delete them",
            {**base, "locked": len(locked), "lock": locked[0].lock, "retain_until": latest},
        )
    count = len(store.versions)
    what = "it" if count == 1 else f"its {count} versions and delete markers"
    return Explanation(
        key,
        KeyVerdict.DELETABLE,
        Reason.ELIGIBLE,
        f"deletable: epoch {epoch} <= M {facts.safe_epoch} and older than the "
        f"grace period; the next round deletes {what}",
        base,
    )


def _version(v: VersionFact) -> dict[str, Any]:
    return {
        "version_id": v.version_id,
        "last_modified": v.last_modified_s,
        "size": v.size,
        "delete_marker": v.delete_marker,
        "lock": v.lock,
        "retain_until": v.retain_until,
    }


def _hidden(
    key: str, base: dict[str, Any], store: StoreFacts, journal: Sequence[JournaledRequest]
) -> Explanation | None:
    """`deleted` for a key whose newest version is a delete marker l0gc wrote inside an
    undo window (`gcd sweep --undo-window`): its bytes are still there, and `gcd restore
    --key` brings it back until a later round frees its versions."""
    # The store's IsLatest, not the clock: a marker written in the second its object was
    # (second-resolution stores) ties on last_modified.
    flagged = [v for v in store.versions if v.is_latest]
    newest = flagged[0] if flagged else max(store.versions, key=lambda v: v.last_modified_s)
    if not newest.delete_marker or newest.version_id is None:
        return None
    mine = [d for d in journal if d.marker is not None and d.marker == newest.version_id]
    if not mine:
        return Explanation(
            key,
            KeyVerdict.DELETED,
            Reason.HIDDEN,
            f"deleted: hidden behind delete marker {newest.version_id}, which "
            "no journal record read names; its older versions are still in "
            "the store. If l0gc wrote it, the journal was not read in full "
            "(give --journal-dir and --journal-prefix both, as the sweepers "
            "run); else someone else deleted it",
            {
                **base,
                "marker": newest.version_id,
                "restorable": None,
                "versions": [_version(v) for v in store.versions],
                "journal": [d.to_dict() for d in journal],
            },
        )
    last = mine[-1]
    return Explanation(
        key,
        KeyVerdict.DELETED,
        Reason.JOURNALED,
        f"deleted (hidden behind delete marker {last.marker}) by {last.sender} "
        f"under M {last.safe_epoch}; "
        f"its bytes are kept for the undo window: `gcd restore --key {key}` "
        "brings it back (with GC paused)",
        {
            **base,
            "deleted": last.to_dict(),
            "restorable": True,
            "restore": f"gcd restore --key {key}",
            "versions": [_version(v) for v in store.versions],
            "journal": [d.to_dict() for d in journal],
        },
    )


def _gone(key: str, base: dict[str, Any], journal: Sequence[JournaledRequest]) -> Explanation:
    deleted = [d for d in journal if d.outcome == "deleted"]
    attempts = [d.to_dict() for d in journal]
    if deleted:
        last = deleted[-1]
        live = (
            "; a partition still references it: a live object was deleted, page someone"
            if "referenced_by" in base
            else ""
        )
        return Explanation(
            key,
            KeyVerdict.DELETED,
            Reason.JOURNALED,
            f"deleted by {last.sender} under "
            f"M {last.safe_epoch}; no version of it is left in the store, so "
            "only a store's own soft delete could still bring it back "
            f"(`gcd restore --storage azure|gcs`){live}",
            {**base, "deleted": last.to_dict(), "restorable": False, "journal": attempts},
        )
    summary = "absent: not in the store, and no journal record deleted it"
    if journal:
        summary += f" ({len(journal)} attempt(s) recorded, none deleted it)"
    if "referenced_by" in base:
        summary += (
            ": a partition still references it, so a live object is missing (deleted "
            "behind l0gc's back?): `gcd scrub`"
        )
    return Explanation(
        key, KeyVerdict.ABSENT, Reason.NOT_FOUND, summary, {**base, "journal": attempts}
    )


def _waiting(epoch: int, facts: GcFacts) -> dict[str, Any]:
    """Every partition with M(p) below `epoch`, capped, and the estimate."""
    if facts.safe_epoch is not None and epoch <= facts.safe_epoch:
        return {}
    behind = [p for p in facts.partitions if p.watermark < epoch]
    shown = behind[:WAITING_SHOWN]
    doc: dict[str, Any] = {
        "waiting_on": [_partition(p, facts.now) for p in shown],
        "waiting_on_more": len(behind) - len(shown),
        "epoch_open": facts.cluster_epoch is not None and epoch >= facts.cluster_epoch,
    }
    doc["estimate"] = estimate_ready(epoch, facts, behind).to_dict()
    return doc


def _partition(p: PartitionFact, now: float) -> dict[str, Any]:
    age = None if p.updated_at is None else round(max(0.0, now - p.updated_at), 3)
    return {
        "partition": p.name,
        "watermark": p.watermark,
        "owner": p.owner,
        "updated_at": p.updated_at,
        "age_s": age,
        "reconciler_behind": p.reconciler_behind,
        "unreconciled": p.unreconciled,
        "rate_epochs_per_s": p.rate,
    }


def _waiting_summary(epoch: int, facts: GcFacts, waiting: dict[str, Any]) -> str:
    names = [p["partition"] for p in waiting["waiting_on"]]
    more = waiting["waiting_on_more"]
    text = f"kept: epoch {epoch} > M {facts.safe_epoch}"
    if names:
        text += f"; waiting on {', '.join(names)}" + (f" and {more} more" if more else "")
    if waiting["epoch_open"]:
        text += f"; its epoch is not closed yet (cluster epoch {facts.cluster_epoch})"
    return text
