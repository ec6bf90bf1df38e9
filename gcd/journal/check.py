"""Checking a deletion journal, and answering "who deleted this key, when, and why".

Design notes: docs/internals/sweep.md, `gcd.journal.check`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from gcd.journal.chain import keys_digest
from gcd.journal.records import JournalRead, Record, chain_digest
from gcd.rules.layout import KeyLayout
from l0gc.contract.binding import Binding
from l0gc.contract.journal_anchor import JournalAnchor, anchors_prefix
from l0gc.contract.kv import KV, RangeResult
from l0gc.contract.safe_epoch import GcView, compute_safe_epoch
from l0gc.errors import ConfigError, InvalidRecord, L0gcError
from l0gc.etcd.store import WatermarkStore

__all__ = [
    "Finding",
    "FindingKind",
    "KeyStory",
    "VerifyReport",
    "check_anchors",
    "check_history",
    "check_records",
    "etcd_anchors",
    "find_key",
    "history_reader",
]


class FindingKind(enum.Enum):
    """How bad a finding is."""

    VIOLATION = "violation"
    DAMAGE = "damage"
    UNVERIFIABLE = "unverifiable"
    TORN_TAIL = "torn_tail"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, where it was found and what it is."""

    kind: FindingKind
    source: str
    message: str

    def to_dict(self) -> dict[str, str]:
        """JSON form."""
        return {"kind": self.kind.value, "source": self.source, "message": self.message}


@dataclass(slots=True)
class VerifyReport:
    """What `verify` found."""

    records: int = 0
    sweepers: int = 0
    attempts: int = 0
    keys_deleted: int = 0
    outcome_unknown: int = 0
    """Attempts without an after record (the sweeper stopped mid-request)."""
    revisions_checked: int = 0
    findings: list[Finding] = field(default_factory=list)

    def count(self, kind: FindingKind) -> int:
        """How many findings of `kind`."""
        return sum(finding.kind is kind for finding in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (findings capped at 1000)."""
        doc = asdict(self)
        doc["findings"] = [finding.to_dict() for finding in self.findings[:1000]]
        doc["violations"] = self.count(FindingKind.VIOLATION)
        doc["damage"] = self.count(FindingKind.DAMAGE)
        doc["unverifiable"] = self.count(FindingKind.UNVERIFIABLE)
        doc["torn_tails"] = self.count(FindingKind.TORN_TAIL)
        return doc


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _befores(read: JournalRead) -> Iterable[Record]:
    return (record for record in read.records if record.kind == "before")


def check_records(read: JournalRead, *, layout: KeyLayout | None = None) -> VerifyReport:
    """The checks on the journal alone (see the module docstring)."""
    report = VerifyReport(records=len(read.records))
    report.findings.extend(
        Finding(FindingKind.DAMAGE, where.split(": ", 1)[0], where) for where in read.damaged
    )
    _check_torn(read, report)
    grouped = read.by_sweeper()
    report.sweepers = len(grouped)
    for sweeper, records in grouped.items():
        _check_stream(records, report, layout, read.pruned.get(sweeper))
    return report


_SEGMENT_NAME = re.compile(r"journal-(?P<sweeper>.+)-[0-9]+\.jsonl")


def _file_sweeper(source: str) -> str | None:
    match = _SEGMENT_NAME.fullmatch(source.replace("\\", "/").rsplit("/", 1)[-1])
    return None if match is None else match.group("sweeper")


def _check_torn(read: JournalRead, report: VerifyReport) -> None:
    last_file: dict[str | None, str] = {_file_sweeper(f): f for f in read.files}
    for source, message in read.torn:
        sweeper = _file_sweeper(source)
        if sweeper is not None and last_file.get(sweeper) == source:
            report.findings.append(
                Finding(
                    FindingKind.TORN_TAIL,
                    source,
                    f"sweeper {sweeper}: its last record was cut short by a crash mid-write (its "
                    f"request was never sent, the record is written first): {message}",
                )
            )
        else:
            report.findings.append(
                Finding(
                    FindingKind.DAMAGE,
                    source,
                    f"a line cut short in a segment that is not its sweeper's last: {message}",
                )
            )


def _check_stream(
    records: list[Record],
    report: VerifyReport,
    layout: KeyLayout | None,
    pruned: JournalAnchor | None = None,
) -> None:
    prev = ""
    expected_seq = 1
    pruned_head = pruned is not None and _int(records[0].doc.get("seq")) != 1
    if pruned is not None and pruned_head:
        # Its first segments were removed (shipped, or expired): the chain goes on from
        # the last record removed, as its pruned marker names it.
        prev, expected_seq = pruned.digest, pruned.seq + 1
    first_request: object = None  # of the stream's first before record
    highest_m: int | None = None
    open_attempts: dict[object, Record] = {}
    for record in records:
        doc = record.doc
        seq = _int(doc.get("seq"))
        if seq != expected_seq:
            missing = (
                f"records {expected_seq}..{seq - 1} are missing"
                if (seq is not None and seq > expected_seq)
                else f"seq {seq!r} out of order"
            )
            report.findings.append(
                Finding(FindingKind.DAMAGE, record.source, f"sweeper {record.sweeper}: {missing}")
            )
        elif doc.get("prev") != prev:
            report.findings.append(
                Finding(
                    FindingKind.DAMAGE,
                    record.source,
                    f"sweeper {record.sweeper} record {seq}: the chain is broken (prev does not "
                    "match the record before it): a record was edited, removed or reordered",
                )
            )
        prev = chain_digest(record)
        expected_seq = (seq or expected_seq) + 1
        if record.kind == "before":
            report.attempts += 1
            _check_before(record, report, layout)
            m = _int(doc.get("safe_epoch"))
            if m is not None and not doc.get("override"):
                if highest_m is not None and m < highest_m:
                    report.findings.append(
                        Finding(
                            FindingKind.VIOLATION,
                            record.source,
                            f"sweeper {record.sweeper} deleted under M = {m} after having used "
                            f"M = {highest_m}: M went backwards",
                        )
                    )
                highest_m = m if highest_m is None else max(highest_m, m)
            open_attempts[doc.get("request")] = record
            first_request = doc.get("request") if first_request is None else first_request
        elif record.kind == "after":
            before = open_attempts.pop(doc.get("request"), None)
            if before is None and pruned_head and _before_pruned(doc, first_request):
                continue  # its before record was in a segment removed
            _check_after(record, before, report)
    report.outcome_unknown += len(open_attempts)


def _check_before(record: Record, report: VerifyReport, layout: KeyLayout | None) -> None:
    doc, source = record.doc, record.source

    def bad(kind: FindingKind, message: str) -> None:
        report.findings.append(Finding(kind, source, message))

    keys, epochs = doc.get("keys"), doc.get("epochs")
    if (
        not isinstance(keys, list)
        or not isinstance(epochs, list)
        or len(keys) != len(epochs)
        or (not all(isinstance(k, str) for k in keys) or not all(type(e) is int for e in epochs))
    ):
        bad(FindingKind.DAMAGE, "before record without matching keys and epochs")
        return
    if (
        doc.get("count") != len(keys)
        or doc.get("digest") != keys_digest(keys)
        or (keys and (doc.get("first") != keys[0] or doc.get("last") != keys[-1]))
    ):
        bad(
            FindingKind.DAMAGE,
            "before record: count, first/last key or digest do not match its keys",
        )
    m, cluster = _int(doc.get("safe_epoch")), _int(doc.get("cluster_epoch"))
    if m is None:
        bad(FindingKind.VIOLATION, f"{len(keys)} keys sent for deletion without an admitted M")
        return
    if cluster is not None and m >= cluster:
        bad(FindingKind.VIOLATION, f"M = {m} is not below the cluster epoch {cluster} it claims")
    for key, epoch in zip(keys, epochs, strict=True):
        if epoch > m:
            bad(
                FindingKind.VIOLATION,
                f"deletion above the M it claims: {key!r} has epoch {epoch}, M = {m}",
            )
        if layout is not None:
            parsed = layout.parse(key)
            if parsed is None or parsed.epoch != epoch:
                found = None if parsed is None else parsed.epoch
                bad(
                    FindingKind.VIOLATION,
                    f"{key!r} does not parse to the epoch {epoch} recorded (layout gives {found})",
                )


def _before_pruned(after: dict[str, Any], first_request: object) -> bool:
    """An after record, in a chain whose head was pruned, of a request made before the
    first one whose before record is left (request numbers grow in a sweeper process)."""
    request = _int(after.get("request"))
    first = _int(first_request)
    return request is not None and (
        first_request is None or (first is not None and request < first)
    )


def _check_after(record: Record, before: Record | None, report: VerifyReport) -> None:
    doc = record.doc
    deleted = doc.get("deleted")
    if before is None:
        report.findings.append(
            Finding(
                FindingKind.DAMAGE,
                record.source,
                f"after record of request {doc.get('request')!r} without its before record",
            )
        )
        return
    if not isinstance(deleted, list):
        report.findings.append(
            Finding(
                FindingKind.DAMAGE, record.source, "after record without a list of deleted keys"
            )
        )
        return
    named = set(before.doc.get("keys") or ())
    stray = [key for key in deleted if key not in named]
    if stray:
        report.findings.append(
            Finding(
                FindingKind.VIOLATION,
                record.source,
                f"{len(stray)} deleted keys were not in the batch's before record,"
                f" e.g. {stray[0]!r}",
            )
        )
    report.keys_deleted += len(deleted) - len(stray)


# -- against the anchors ---------------------------------------------------------------


def check_anchors(
    read: JournalRead,
    anchors: dict[str, JournalAnchor],
    report: VerifyReport,
    *,
    where: str,
    shipped: dict[str, JournalAnchor] | None = None,
    require_all: bool = False,
) -> list[str]:
    """Each sweeper's journal must reach its anchor and hold the anchored record.

    `where` names the anchors' home ("etcd", "the audit prefix"). With `shipped` (the
    audit prefix's anchors, when the journal was read from there) an etcd anchor beyond
    the shipped end is unverifiable (not shipped yet), not damage. `require_all`: an
    anchored sweeper without records here is damage (its segments were deleted); else
    it is a note (its journal lives on another host). Returns notes.
    """
    grouped = read.by_sweeper()
    notes: list[str] = []
    elsewhere = sorted(set(anchors) - set(grouped))
    for sweeper in elsewhere:
        if require_all:
            anchor = anchors[sweeper]
            report.findings.append(
                Finding(
                    FindingKind.DAMAGE,
                    where,
                    f"sweeper {sweeper}: {where} anchors its journal at record {anchor.seq} "
                    f"({anchor.segment}) but none of its records is here: its segments were "
                    "deleted",
                )
            )
    if elsewhere and not require_all:
        notes.append(
            f"{len(elsewhere)} sweepers anchored in {where} have no records here "
            f"(journals of other hosts, or deleted), e.g. {elsewhere[0]}"
        )
    for sweeper, records in grouped.items():
        found = anchors.get(sweeper)
        if found is None:
            if where != "etcd" or not _ran_without_etcd(records):
                report.findings.append(
                    Finding(
                        FindingKind.UNVERIFIABLE,
                        records[-1].source,
                        f"sweeper {sweeper}: no anchor in {where}, so whether its journal's end "
                        "was cut cannot be checked (written before anchoring, or the anchor "
                        "was deleted)",
                    )
                )
            continue
        _check_end(
            records,
            found,
            report,
            where=where,
            shipped=None if shipped is None else shipped.get(sweeper),
        )
    return notes


async def etcd_anchors(
    kv: KV, namespace: str, endpoints: Sequence[str], report: VerifyReport
) -> dict[str, JournalAnchor]:
    """The namespace's anchors; a namespace with nothing stored is a usage error."""
    stored = await kv.range_prefix(namespace + "/")
    if not stored.items:
        raise ConfigError(
            f"nothing is stored under namespace {namespace!r} in etcd "
            f"{','.join(endpoints)}: is --namespace (or --etcd) right? Nothing was verified"
        )
    anchors: dict[str, JournalAnchor] = {}
    prefix = anchors_prefix(namespace)
    for item in stored.items:
        if not item.key.startswith(prefix):
            continue
        try:
            anchor = JournalAnchor.decode(item.value, item.key)
        except InvalidRecord as exc:
            report.findings.append(Finding(FindingKind.DAMAGE, item.key, str(exc)))
            continue
        anchors[anchor.sweeper] = anchor
    return anchors


def _ran_without_etcd(records: list[Record]) -> bool:
    """A sweeper that ran without etcd (its segment records name no namespace)."""
    return all(r.doc.get("namespace") is None for r in records if r.kind == "segment")


def _check_end(
    records: list[Record],
    anchor: JournalAnchor,
    report: VerifyReport,
    *,
    where: str,
    shipped: JournalAnchor | None,
) -> None:
    sweeper = anchor.sweeper
    last = records[-1]
    last_seq = _int(last.doc.get("seq")) or 0
    if anchor.seq > last_seq:
        if shipped is not None and shipped.seq == last_seq and shipped.digest == chain_digest(last):
            report.findings.append(
                Finding(
                    FindingKind.UNVERIFIABLE,
                    last.source,
                    f"sweeper {sweeper}: records {last_seq + 1}..{anchor.seq} anchored in {where} "
                    "are not shipped yet (the sweeper still runs, or its last upload failed)",
                )
            )
            return
        report.findings.append(
            Finding(
                FindingKind.DAMAGE,
                last.source,
                f"sweeper {sweeper}: the journal ends at record {last_seq} but {where} anchored "
                f"record {anchor.seq} ({anchor.segment}): records {last_seq + 1}..{anchor.seq} "
                "are missing (the last segment or the last records were removed)",
            )
        )
        return
    held = next((r for r in records if _int(r.doc.get("seq")) == anchor.seq), None)
    if held is not None and chain_digest(held) != anchor.digest:
        report.findings.append(
            Finding(
                FindingKind.DAMAGE,
                held.source,
                f"sweeper {sweeper}: record {anchor.seq} is not the one anchored in {where} "
                "(its digest differs): the journal was rewritten",
            )
        )


# -- against etcd's history ------------------------------------------------------------

ViewAt = Callable[[int], Awaitable[GcView]]
"""Reads the namespace at a revision (e.g. `WatermarkStore.read_gc_view` on a KV that
reads at that revision)."""


async def check_history(read: JournalRead, view_at: ViewAt, report: VerifyReport) -> None:
    """Recompute M at every revision the journal claims; add findings to `report`."""
    targets = {
        (rec.doc.get("bucket"), rec.doc.get("root"))
        for rec in read.records
        if rec.kind == "segment"
    }
    by_revision: dict[int, list[Record]] = {}
    for record in _befores(read):
        revision = _int(record.doc.get("revision"))
        if revision is None:
            if _int(record.doc.get("safe_epoch")) is not None:
                report.findings.append(
                    Finding(
                        FindingKind.UNVERIFIABLE,
                        record.source,
                        "no etcd revision recorded (M given with --safe-epoch and no etcd)",
                    )
                )
            continue
        by_revision.setdefault(revision, []).append(record)
    for revision, records in sorted(by_revision.items()):
        try:
            view = await view_at(revision)
        except (L0gcError, OSError) as exc:
            text = str(exc)
            why = (
                "compacted: etcd no longer holds this revision"
                if "compacted" in text
                else "a future revision: etcd was restored, or this is another cluster"
                if "future revision" in text
                else f"etcd unreadable: {text}"
            )
            report.findings.extend(
                Finding(FindingKind.UNVERIFIABLE, r.source, f"revision {revision}: {why}")
                for r in records
            )
            continue
        report.revisions_checked += 1
        _compare(revision, view, records, targets, report)


def _compare(
    revision: int,
    view: GcView,
    records: list[Record],
    targets: set[tuple[Any, Any]],
    report: VerifyReport,
) -> None:
    truth = compute_safe_epoch(view)
    bound = _bound_target(view)
    for record in records:
        doc = record.doc
        claimed, cluster = _int(doc.get("safe_epoch")), _int(doc.get("cluster_epoch"))
        if claimed is None:
            continue
        problems: list[str] = []
        if bound is not None and targets and bound not in targets:
            problems.append(
                f"the namespace was bound to s3://{bound[0]}/{bound[1]}, not to "
                "the bucket/root this journal deleted from"
            )
        if truth.cluster_epoch is not None and cluster != truth.cluster_epoch:
            problems.append(f"claims cluster epoch {cluster}, etcd held {truth.cluster_epoch}")
        if doc.get("override"):
            if truth.cluster_epoch is None or claimed >= truth.cluster_epoch:
                problems.append(
                    f"override M = {claimed} is not below the cluster epoch {truth.cluster_epoch}"
                )
        elif truth.safe_epoch is None:
            problems.append(f"M was undefined there ({truth.blocked_reason})")
        elif claimed > truth.safe_epoch:
            problems.append(f"claims M = {claimed}, etcd gives M = {truth.safe_epoch}")
        for problem in problems:
            report.findings.append(
                Finding(FindingKind.VIOLATION, record.source, f"revision {revision}: {problem}")
            )


def _bound_target(view: GcView) -> tuple[str, str] | None:
    if view.binding_raw is None:
        return None
    try:
        binding = Binding.decode(view.binding_raw)
    except InvalidRecord:
        return None
    return binding.target.bucket, binding.target.root


# -- show ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyStory:
    """One attempt to delete a key: who, when, under which M, and what came of it."""

    sweeper: str
    at: float
    epoch: int | None
    safe_epoch: int | None
    cluster_epoch: int | None
    revision: int | None
    override: bool
    pinning: list[Any]
    outcome: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def find_key(read: JournalRead, key: str) -> list[KeyStory]:
    """Every attempt to delete `key`, oldest first."""
    afters = {
        (rec.sweeper, rec.doc.get("request")): rec for rec in read.records if rec.kind == "after"
    }
    stories: list[KeyStory] = []
    for record in _befores(read):
        doc = record.doc
        keys = _list(doc.get("keys"))
        if key not in keys:
            continue
        epochs = _list(doc.get("epochs"))
        index = keys.index(key)
        after = afters.get((record.sweeper, doc.get("request")))
        stories.append(
            KeyStory(
                sweeper=record.sweeper,
                at=float(doc.get("at") or 0.0),
                epoch=_int(epochs[index]) if index < len(epochs) else None,
                safe_epoch=_int(doc.get("safe_epoch")),
                cluster_epoch=_int(doc.get("cluster_epoch")),
                revision=_int(doc.get("revision")),
                override=bool(doc.get("override")),
                pinning=list(doc.get("pinning") or []),
                outcome=_outcome(key, after),
                source=record.source,
            )
        )
    stories.sort(key=lambda story: story.at)
    return stories


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _outcome(key: str, after: Record | None) -> str:
    if after is None:
        return "unknown (no after record: the sweeper stopped during the request)"
    doc = after.doc
    if doc.get("request_error") is not None:
        return f"request failed ({doc.get('request_error')}), retried"
    if key in (doc.get("deleted") or ()):
        marker = next(
            (
                pair[1]
                for pair in doc.get("markers") or ()
                if isinstance(pair, list) and len(pair) == 2 and pair[0] == key
            ),
            None,
        )
        if marker is not None:  # an undo window: hidden, `gcd restore` brings it back
            return f"hidden (delete marker {marker})"
        return "deleted"
    for pair in doc.get("failed") or ():
        if isinstance(pair, list) and pair and pair[0] == key:
            return f"failed ({pair[1] if len(pair) > 1 else '?'})"
    return "not mentioned in the answer, retried"


class _AtRevision:
    """The `range_prefix` of a `KV`, pinned to one revision (read-only)."""

    def __init__(self, kv: KV, revision: int) -> None:
        self._kv = kv
        self._revision = revision

    async def range_prefix(self, prefix: str) -> RangeResult:
        return await self._kv.range_prefix(prefix, revision=self._revision)


def history_reader(kv: KV, namespace: str) -> ViewAt:
    """`ViewAt` for `namespace`: the sweepers' own `read_gc_view`, at a past revision."""

    async def view_at(revision: int) -> GcView:
        # WatermarkStore.read_gc_view only calls range_prefix: the same decoding of the
        # namespace as the sweepers', without a second copy of it here.
        store = WatermarkStore(cast(KV, _AtRevision(kv, revision)), namespace)
        return await store.read_gc_view()

    return view_at
