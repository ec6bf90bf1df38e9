"""The checker of a chaos run: a history in, a verdict out (pure, no I/O).

Theory of operation
-------------------
The run's processes write down what they did (`l0lab.chaos.records`); the sweepers write
the deletion journal (`gcd.journal.records`). From those the `RunHistory` rebuilds the ground truth
of every object: its upload, the log entry that references it (committed, kept or
aborted) and the moment the reconciler lifted that entry. An object is *protected*
from the moment a writer could have fenced it until its entry's lift is recorded (the
reconciler records a lift before it reports it, so no publisher can know of a lift
before the history does). A deletion is judged by when its DeleteObjects request began
(the journal's *before* record):

* LOSS: the key's entry is committed, and was not lifted before the request began (or
  never). This covers a delete while the entry was referenced, and a fence granted or
  an entry committed for an object already being deleted.
* safe: the entry was lifted before, or aborted, or the object never got an entry (an
  orphan: its fence was refused or its writer gave up).
* pending: the entry is not resolved yet (only while the run goes on).

`check_run` then applies every rule of the run to the facts gathered at the end: no
loss (and no referenced object missing when read back at the quiesce point), no
garbage at or below the final M left, no stored key gone without a journal record (a
PUT cut short by a writer's kill may never have reached the store), the journal
verified against etcd's history, M never going backwards, no fencing violation, every
fault followed by recovery within the stated bound, and the sweepers having deleted
something at all.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gcd.journal.check import FindingKind, VerifyReport
from gcd.journal.records import JournalRead
from l0lab.chaos.records import Entry, PartitionLog

__all__ = [
    "CheckResult",
    "Deletion",
    "FaultRecord",
    "RunFacts",
    "RunHistory",
    "check_run",
    "deletions_of",
]

MIN_SECONDS_FOR_DELETES = 30.0


@dataclass(slots=True)
class Upload:
    """One object a writer uploaded (or tried to)."""

    key: str
    partition: str
    epoch: int
    at: float
    put_failed: bool = False
    stored: bool = False  # the PUT was answered OK (an entry in the log also proves it)


@dataclass(frozen=True, slots=True)
class Deletion:
    """One key a DeleteObjects request deleted, per the journal."""

    key: str
    sweeper: str
    began_at: float
    answered_at: float


@dataclass(slots=True)
class FaultRecord:
    """One fault of the nemesis: what, to whom, when, and when the system recovered."""

    kind: str
    target: str
    started_at: float
    healed_at: float | None = None
    recovered_at: float | None = None
    m_advanced_at: float | None = None
    note: str = ""
    cut_short: bool = False
    """The wait for recovery ended early (the run stopped, or a live object was lost)."""

    @property
    def recovery_s(self) -> float | None:
        """Seconds from heal to recovery."""
        if self.healed_at is None or self.recovered_at is None:
            return None
        return self.recovered_at - self.healed_at

    def to_dict(self, origin: float) -> dict[str, Any]:
        """JSON form, times relative to `origin`."""

        def rel(at: float | None) -> float | None:
            return None if at is None else round(at - origin, 2)

        m_stall = (
            None
            if self.healed_at is None or self.m_advanced_at is None
            else round(self.m_advanced_at - self.healed_at, 2)
        )
        recovery = self.recovery_s
        return {
            "kind": self.kind,
            "target": self.target,
            "started_at_s": rel(self.started_at),
            "healed_at_s": rel(self.healed_at),
            "recovery_s": None if recovery is None else round(recovery, 2),
            "m_stall_s": m_stall,
            "note": self.note,
            "cut_short": self.cut_short,
        }


class RunHistory:
    """The ground truth of a run, rebuilt from its files (see the module docstring)."""

    def __init__(self) -> None:
        self.uploads: dict[str, Upload] = {}
        self.entries: dict[str, tuple[str, Entry]] = {}
        self.lifts: dict[str, list[tuple[int, float]]] = {}
        self.fencing_violations: list[dict[str, Any]] = []
        self.commits: dict[str, list[float]] = {}
        self._throughs: dict[str, list[int]] = {}

    def add_writer_events(self, docs: Iterable[dict[str, Any]]) -> None:
        """A writer's history."""
        for doc in docs:
            op = doc.get("op")
            if op == "upload":
                key = str(doc["key"])
                self.uploads[key] = Upload(
                    key, str(doc["partition"]), int(doc["epoch"]), float(doc["t"])
                )
            elif op == "put_failed" and doc.get("key") in self.uploads:
                self.uploads[str(doc["key"])].put_failed = True
            elif op == "stored" and doc.get("key") in self.uploads:
                self.uploads[str(doc["key"])].stored = True
            elif op == "fencing_violation":
                self.fencing_violations.append(doc)

    def add_log(self, partition: str, log: PartitionLog) -> None:
        """A partition log, as read."""
        for entry in log.entries.values():
            self.entries[entry.key] = (partition, entry)
        self.commits[partition] = sorted(
            e.resolved_at for e in log.entries.values() if e.committed and e.resolved_at
        )

    def add_lifts(self, docs: Iterable[dict[str, Any]]) -> None:
        """The reconcilers' history (a partition's lifts only ever go further)."""
        for doc in docs:
            if doc.get("op") == "lift":
                lifts = self.lifts.setdefault(str(doc["partition"]), [])
                lifts.append((int(doc["through"]), float(doc["t"])))
        for lifts in self.lifts.values():
            lifts.sort(key=lambda lift: lift[1])
        self._throughs = {p: [through for through, _ in lifts] for p, lifts in self.lifts.items()}

    def lifted_at(self, partition: str, offset: int) -> float | None:
        """When the first lift through `offset` was recorded, None if never."""
        throughs = self._throughs.get(partition, [])
        index = bisect.bisect_left(throughs, offset)
        return self.lifts[partition][index][1] if index < len(throughs) else None

    def judge(self, key: str, began_at: float, *, final: bool) -> str:
        """ "loss", "safe", "pending" or "unknown" for a deletion begun at `began_at`."""
        found = self.entries.get(key)
        if found is None:
            if key not in self.uploads:
                return "unknown"
            return "safe" if final else "pending"  # an orphan, or not appended yet
        partition, entry = found
        if entry.resolved is None:
            return "loss" if final else "pending"  # unresolved at the end counts as kept
        if entry.resolved == "abort":
            return "safe"
        lifted = self.lifted_at(partition, entry.offset)
        return "loss" if lifted is None or lifted > began_at else "safe"

    def is_garbage(self, key: str) -> bool:
        """True for a key no committed entry references any more (or ever did)."""
        found = self.entries.get(key)
        if found is None:
            return key in self.uploads
        partition, entry = found
        if not entry.committed:
            return entry.resolved == "abort"
        return self.lifted_at(partition, entry.offset) is not None

    def unlifted(self) -> list[str]:
        """Keys of committed entries not lifted yet (referenced now), sorted."""
        return sorted(
            key
            for key, (p, e) in self.entries.items()
            if e.committed and self.lifted_at(p, e.offset) is None
        )

    @property
    def max_epoch(self) -> int | None:
        """The newest epoch any writer stamped."""
        return max((u.epoch for u in self.uploads.values()), default=None)

    def longest_write_gap(self, start: float, end: float) -> tuple[float, str | None]:
        """The longest time any partition went without a committed write in [start, end]."""
        worst, where = 0.0, None
        for partition, times in self.commits.items():
            inside = [t for t in times if start <= t <= end]
            edges = [start, *inside, end]
            gap = max(b - a for a, b in itertools.pairwise(edges))
            if gap > worst:
                worst, where = gap, partition
        return worst, where


def deletions_of(read: JournalRead) -> list[Deletion]:
    """Every key the journal says was deleted, with when its request began and ended."""
    befores = {(r.sweeper, r.doc.get("request")): r for r in read.records if r.kind == "before"}
    found: list[Deletion] = []
    for record in read.records:
        if record.kind != "after":
            continue
        before = befores.get((record.sweeper, record.doc.get("request")))
        began = float(before.doc["at"]) if before is not None else float(record.doc["at"])
        answered = float(record.doc["at"])
        found.extend(
            Deletion(str(key), record.sweeper, began, answered)
            for key in record.doc.get("deleted") or ()
        )
    return found


def unanswered_of(read: JournalRead) -> list[Deletion]:
    """Keys of requests without an after record (the sweeper was killed while the request
    was in flight): S3 may have deleted them. Judged when the request began."""
    answered = {(r.sweeper, r.doc.get("request")) for r in read.records if r.kind == "after"}
    found: list[Deletion] = []
    for record in read.records:
        if record.kind == "before" and (record.sweeper, record.doc.get("request")) not in answered:
            at = float(record.doc["at"])
            found.extend(
                Deletion(str(key), record.sweeper, at, at) for key in record.doc.get("keys") or ()
            )
    return found


@dataclass(slots=True)
class RunFacts:
    """Everything measured in a run, for `check_run`."""

    ledger: RunHistory
    deletions: list[Deletion]
    present: set[str]
    readback_missing: list[str]
    final_m: int | None
    cluster_epoch: int | None
    journal: VerifyReport
    faults: list[FaultRecord]
    m_samples: list[tuple[float, int]]
    started_at: float
    faulty_until: float
    recovery_bound_s: float
    harness_problems: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    unanswered: list[Deletion] = field(default_factory=list)
    """`unanswered_of`: keys a killed sweeper's request may have deleted."""


@dataclass(slots=True)
class CheckResult:
    """What the checker concluded."""

    problems: list[str] = field(default_factory=list)
    losses: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every rule held."""
        return not self.problems


def check_run(facts: RunFacts) -> CheckResult:
    """Apply every rule of the run (see the module docstring)."""
    verdict = CheckResult()
    ledger = facts.ledger
    _losses(facts, verdict)
    deleted = {d.key for d in facts.deletions}
    maybe = {d.key for d in facts.unanswered if d.key not in facts.present}
    garbage_left = sorted(
        key
        for key in facts.present
        if key in ledger.uploads
        and ledger.is_garbage(key)
        and facts.final_m is not None
        and ledger.uploads[key].epoch <= facts.final_m
    )
    landed = {
        key for key, upload in ledger.uploads.items() if upload.stored or key in ledger.entries
    }
    gone = [key for key in landed if not (key in facts.present or key in deleted or key in maybe)]
    back = sorted(deleted & facts.present)
    committed = sum(1 for _, e in ledger.entries.values() if e.committed)
    gap, gap_where = ledger.longest_write_gap(facts.started_at, facts.faulty_until)
    m_stalls = [
        f.m_advanced_at - f.healed_at
        for f in facts.faults
        if f.m_advanced_at is not None and f.healed_at is not None
    ]
    verdict.counts = {
        "objects_written": len(ledger.uploads),
        "puts_cut_short": sum(
            1
            for key, upload in ledger.uploads.items()
            if key not in landed and not upload.put_failed
        ),
        "objects_committed": committed,
        "orphans": sum(
            1
            for key in ledger.uploads
            if ledger.entries.get(key) is None or not ledger.entries[key][1].committed
        ),
        "objects_deleted": len(deleted),
        "live_lost": len(verdict.losses),
        "garbage_left": len(garbage_left),
        "final_m": facts.final_m,
        "cluster_epoch": facts.cluster_epoch,
        "max_epoch_written": ledger.max_epoch,
        "longest_write_unavailability_s": round(gap, 2),
        "longest_write_unavailability_partition": gap_where,
        "longest_m_stall_after_fault_s": round(max(m_stalls, default=0.0), 2),
        "fencing_violations": len(ledger.fencing_violations),
        "faults_by_kind": dict(Counter(f.kind for f in facts.faults)),
    }
    problems = verdict.problems
    if verdict.losses:
        problems.append(
            f"{len(verdict.losses)} live objects lost (deleted while an "
            "unreconciled entry referenced them, or missing at read-back)"
        )
    if garbage_left:
        problems.append(
            f"{len(garbage_left)} garbage objects at or below the final M "
            f"{facts.final_m} left, e.g. {garbage_left[0]}"
        )
    if gone:
        problems.append(
            f"{len(gone)} objects are gone without a journal record of their "
            f"deletion, e.g. {min(gone)}"
        )
    if back:
        problems.append(
            f"{len(back)} objects the journal says were deleted are still there, e.g. {back[0]}"
        )
    if ledger.fencing_violations:
        first = ledger.fencing_violations[0]
        problems.append(
            f"{len(ledger.fencing_violations)} fencing violations (a publisher "
            f"refused a commit below its window: partition {first.get('partition')} "
            f"epoch {first.get('epoch')})"
        )
    _journal(facts.journal, problems)
    _m_monotonic(facts.m_samples, problems)
    _recoveries(facts, problems)
    if not deleted and facts.duration_s >= MIN_SECONDS_FOR_DELETES:
        problems.append(f"nothing was deleted in a {facts.duration_s:.0f} s run")
    problems.extend(facts.harness_problems)
    return verdict


def _losses(facts: RunFacts, verdict: CheckResult) -> None:
    seen: set[str] = set()
    gone = [d for d in facts.unanswered if d.key not in facts.present]
    for deletion in sorted([*facts.deletions, *gone], key=lambda d: d.began_at):
        if deletion.key in seen:
            continue
        if facts.ledger.judge(deletion.key, deletion.began_at, final=True) == "loss":
            seen.add(deletion.key)
            verdict.losses.append(
                _loss(
                    facts.ledger,
                    deletion.key,
                    "deleted while referenced",
                    deletion.sweeper,
                    deletion.began_at,
                )
            )
    for key in facts.readback_missing:
        if key not in seen:
            seen.add(key)
            verdict.losses.append(_loss(facts.ledger, key, "missing at read-back", None, None))


def _loss(
    ledger: RunHistory, key: str, how: str, sweeper: str | None, at: float | None
) -> dict[str, Any]:
    partition, entry = ledger.entries.get(key, ("?", None))
    lifted = None if entry is None else ledger.lifted_at(partition, entry.offset)
    return {
        "key": key,
        "how": how,
        "partition": partition,
        "epoch": None if entry is None else entry.epoch,
        "offset": None if entry is None else entry.offset,
        "sweeper": sweeper,
        "deleted_at": at,
        "lifted_at": lifted,
    }


def _journal(report: VerifyReport, problems: list[str]) -> None:
    for kind in FindingKind:
        if kind is FindingKind.TORN_TAIL:
            continue  # a sweeper killed mid-write: its request was never sent
        found = [f for f in report.findings if f.kind is kind]
        if found:
            problems.append(
                f"gcd journal verify: {len(found)} {kind.value} findings, e.g. "
                f"{found[0].source}: {found[0].message}"
            )


def _m_monotonic(samples: list[tuple[float, int]], problems: list[str]) -> None:
    highest: int | None = None
    for _, m in samples:
        if highest is not None and m < highest:
            problems.append(f"the global M went backwards in etcd: {highest} then {m}")
            return
        highest = m if highest is None else max(highest, m)


def _recoveries(facts: RunFacts, problems: list[str]) -> None:
    bound = facts.recovery_bound_s
    for fault in facts.faults:
        if fault.healed_at is None:
            problems.append(f"fault {fault.kind} on {fault.target} was never healed")
        elif fault.recovered_at is None and not fault.cut_short:
            problems.append(
                f"no recovery within {bound:g} s after {fault.kind} on "
                f"{fault.target} ({fault.note or 'see the report'})"
            )
        elif (fault.recovery_s or 0.0) > bound:
            took = fault.recovery_s or 0.0
            problems.append(
                f"recovery after {fault.kind} on {fault.target} took {took:.1f} s, "
                f"above the bound of {bound:g} s"
            )
