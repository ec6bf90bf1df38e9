"""`gcd explain`'s I/O: read etcd, the store and the journal once, then ask the rule.

Design notes: docs/internals/sweep.md, `gcd.explainer.answer`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from gcd.journal.search import JournalHits, SegmentSource, search_journal
from gcd.rules.admission import admit, unreachable
from gcd.rules.explain import (
    Explanation,
    GcFacts,
    PartitionFact,
    Reason,
    StoreFacts,
    VersionFact,
    explain,
    start_before,
)
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import BucketStore, DetectingStore, ObjectInfo, VersionedStore
from gcd.sweep.binding import BoundSource
from l0gc.contract.binding import claim_key, directories_below
from l0gc.contract.kv import KV
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import compute_safe_epoch
from l0gc.errors import InvalidRecord, L0gcError, StorageError
from l0gc.etcd.store import WatermarkStore

__all__ = [
    "HISTORY",
    "LOCK_PROBES",
    "ExplainReport",
    "explain_keys",
    "lookup_store",
    "read_gc_facts",
]

log = structlog.get_logger("gcd.explain")

HISTORY: Final = 6
"""Versions of a partition record read back for its recent M(p) rate."""
RATED: Final = 64
"""Partitions (lowest M(p) first) whose rate is read; beyond, the estimate says unknown."""
LOCK_PROBES: Final = 1000
LOOKUP_CONCURRENCY: Final = 8
_PAGE: Final = 1000


@dataclass(frozen=True, slots=True)
class ExplainReport:
    """Every key's explanation, and what was read to give them."""

    explanations: tuple[Explanation, ...]
    facts: GcFacts
    journal: dict[str, Any] | None
    list_requests: int

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document (`version` 1)."""
        return {
            "version": 1,
            "safe_epoch": self.facts.safe_epoch,
            "cluster_epoch": self.facts.cluster_epoch,
            "revision": self.facts.revision,
            "refused": self.facts.refused,
            "now": self.facts.now,
            "keys": [e.to_dict() for e in self.explanations],
            "journal": self.journal,
            "list_requests": self.list_requests,
        }


# -- etcd ------------------------------------------------------------------------------


async def read_gc_facts(
    store: WatermarkStore | None,
    source: BoundSource | None,
    *,
    grace_s: float,
    override: int | None = None,
    now: float | None = None,
    journal_prefix: str | None = None,
) -> GcFacts:
    """The GC state of one etcd read (`store`: a `WatermarkStore`, None without etcd;
    `source`: the `BoundSource` whose refusal a round would get, or None)."""
    clock = time.time() if now is None else now
    if store is None:
        admission = admit(None, override=override)
        return GcFacts(
            clock,
            grace_s,
            admission.safe_epoch,
            None,
            admission.blocked_reason,
            journal_prefix=journal_prefix,
        )
    try:
        view = await store.read_gc_view()
        read = compute_safe_epoch(view)
        if source is not None:
            bound = await source.read_safe_epoch()
            read = dataclasses.replace(read, refused_reason=bound.refused_reason)
    except (L0gcError, OSError) as exc:
        admission = unreachable(str(exc))
        return GcFacts(
            clock, grace_s, None, None, admission.blocked_reason, journal_prefix=journal_prefix
        )
    admission = admit(read, override=override)
    partitions = sorted(
        (_fact(name, raw) for name, raw in view.partitions.items()),
        key=lambda p: (p is None, p.watermark if p else 0, p.name if p else ""),
    )
    facts = [p for p in partitions if p is not None]
    return GcFacts(
        clock,
        grace_s,
        admission.safe_epoch if admission.allowed else read.safe_epoch,
        read.cluster_epoch,
        admission.blocked_reason,
        paused=admission.paused,
        revision=view.revision,
        partitions=tuple(facts),
        journal_prefix=journal_prefix,
        references=read.references,
    )


def _fact(name: str, raw: bytes) -> PartitionFact | None:
    try:
        record = PartitionRecord.decode(raw, partition=name)
    except InvalidRecord:
        return None  # M is then undefined: the refusal says which partition
    behind, unreconciled = _reconciler(record.tracker)
    return PartitionFact(
        name, record.watermark, record.owner, record.updated_at, behind, unreconciled
    )


def _reconciler(tracker: Mapping[str, Any] | None) -> tuple[bool | None, int | None]:
    """Whether entries wait for the reconciler, and how many (from the record's tracker)."""
    if not isinstance(tracker, Mapping):
        return None, None
    last, done = tracker.get("last_applied_offset"), tracker.get("reconciled_offset")
    if last is not None and type(last) is not int:
        return None, None
    if last is None:
        return False, 0
    lifted = done if type(done) is int else -1
    return lifted < last, max(0, last - lifted)


async def add_rates(store: WatermarkStore, facts: GcFacts, below: int) -> GcFacts:
    """`facts` with the recent M(p) rate of the partitions below epoch `below` (at most
    `RATED`) and of the cluster epoch: from etcd's history of their keys."""
    kv = store.kv
    rated: list[PartitionFact] = []
    for index, p in enumerate(facts.partitions):
        if p.watermark >= below or index >= RATED:
            rated.append(p)
            continue
        points = await _history(kv, store.partition_key(p.name), _record_point(p.name))
        rate, since = _rate(points, p.watermark, facts.now)
        rated.append(
            dataclasses.replace(
                p, rate=rate, rate_since=since, moved_at=_moved_at(points, p.watermark)
            )
        )
    # The epoch key carries no time; M(p) follows the cluster epoch, so the fastest
    # partition's pace stands in for the ticker's (None when no partition has moved).
    known = [p.rate for p in rated if p.rate is not None and p.rate > 0]
    cluster_rate = max(known) if known else None
    return dataclasses.replace(facts, partitions=tuple(rated), cluster_rate=cluster_rate)


def _record_point(name: str) -> Any:
    def point(value: bytes, _revision: int) -> tuple[float, int] | None:
        record = PartitionRecord.decode(value, partition=name)
        return None if record.updated_at is None else (record.updated_at, record.watermark)

    return point


async def _history(kv: KV, key: str, point: Any) -> list[tuple[float, int]]:
    """Up to `HISTORY` (time, value) points of `key`, newest first, from etcd's history;
    [] where the KV keeps none or it is compacted."""
    points: list[tuple[float, int]] = []
    try:
        item = await kv.get(key)
        while item is not None and len(points) < HISTORY:
            found = point(item.value, item.mod_revision)
            if found is not None:
                points.append(found)
            if item.mod_revision <= 1:
                break
            older = await kv.range_prefix(key, revision=item.mod_revision - 1)
            item = next((i for i in older.items if i.key == key), None)
    except (L0gcError, InvalidRecord, TypeError, OSError):
        pass  # compacted, or a KV without history: no rate, the estimate says so
    return points


def _moved_at(points: Sequence[tuple[float, int]], now_value: int) -> float | None:
    """When the value rose to `now_value`: the oldest of the newest points holding it,
    once an older point shows a lower value (None: the history never shows it rise)."""
    at: float | None = None
    for when, value in points:  # newest first
        if value < now_value:
            return at
        at = when
    return None


def _rate(
    points: Sequence[tuple[float, int]], now_value: int, now: float
) -> tuple[float | None, float | None]:
    """Epochs per second from the oldest point to now (a stall since then lowers it)."""
    if len(points) < 2:
        return None, None
    at, value = points[-1]
    if now <= at:
        return None, None
    return max(0.0, (now_value - value) / (now - at)), at


# -- the store -------------------------------------------------------------------------


async def lookup_store(
    objects: BucketStore, keys: Sequence[str], layout: KeyLayout
) -> tuple[dict[str, list[ObjectInfo]], dict[str, str], int]:
    """What the store holds under each of `keys` (every version on a versioned bucket),
    why the answer for a key could not be read (one hostile key, e.g. control characters
    a store echoes unescaped, spoils only its own answer), and how many LIST requests
    that took."""
    features = await objects.detect() if isinstance(objects, DetectingStore) else None
    versioned = features is not None and features.versioned and isinstance(objects, VersionedStore)
    ordered = features is None or features.ordered_listing
    wanted = sorted(set(keys))
    found: dict[str, list[ObjectInfo]] = {}
    failed: dict[str, str] = {}
    requests = [0]
    if ordered and not versioned:
        # Contiguous chunks, one lister each: a page answers the wanted keys it passes.
        size = -(-len(wanted) // LOOKUP_CONCURRENCY) or 1
        chunks = [wanted[i : i + size] for i in range(0, len(wanted), size)]
        await asyncio.gather(
            *(
                _merge_join(
                    objects,
                    chunk,
                    layout.listing_root,
                    found=found,
                    failed=failed,
                    requests=requests,
                )
                for chunk in chunks
            )
        )
    else:
        gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)

        async def one(key: str) -> None:
            async with gate:
                try:
                    found[key] = await _by_prefix(objects, key, versioned, requests)
                except StorageError as exc:
                    failed[key] = str(exc)

        await asyncio.gather(*(one(key) for key in wanted))
    return {k: v for k, v in found.items() if v}, failed, requests[0]


async def _merge_join(
    objects: BucketStore,
    wanted: list[str],
    root: str,
    *,
    found: dict[str, list[ObjectInfo]],
    failed: dict[str, str],
    requests: list[int],
) -> None:
    """Resolve sorted `wanted` keys with as few LIST pages as the store allows; a key
    whose page cannot be read is `failed` and the next key gets a page of its own."""
    at = 0
    while at < len(wanted):
        key = wanted[at]
        prefix = root if key.startswith(root) else ""
        requests[0] += 1
        try:
            page = await objects.list_page(prefix, start_after=start_before(key), max_keys=_PAGE)
        except StorageError as exc:
            failed[key] = str(exc)
            at += 1
            continue
        for obj in page.objects:
            found[obj.key] = [obj]  # one entry per key: pages of two chunks may overlap
        horizon = page.objects[-1].key if page.objects and page.next_token else None
        at += 1  # this page started at or before `key`: it is answered
        while (
            at < len(wanted)
            and wanted[at].startswith(prefix)
            and (horizon is None or wanted[at] <= horizon)
        ):
            at += 1


async def _by_prefix(
    objects: BucketStore, key: str, versioned: bool, requests: list[int]
) -> list[ObjectInfo]:
    lister = objects.list_page
    if versioned:
        assert isinstance(objects, VersionedStore), "versions are listed on a versioned store"
        lister = objects.list_versions_page
    token: str | None = None
    found: list[ObjectInfo] = []
    while True:
        requests[0] += 1
        page = await lister(key, continuation_token=token, max_keys=_PAGE)
        found += [obj for obj in page.objects if obj.key == key]
        token = page.next_token
        if token is None or (page.objects and page.objects[-1].key > key and not versioned):
            return found


async def _locks(objects: BucketStore, infos: Sequence[ObjectInfo]) -> list[VersionFact]:
    facts: list[VersionFact] = []
    for info in infos:
        lock: str | None = None
        until: float | None = None
        if info.version_id is not None and isinstance(objects, VersionedStore):
            reason, until = await objects.lock_state(info.key, info.version_id)
            lock = None if reason.startswith("no lock") else reason
        facts.append(
            VersionFact(
                info.last_modified_s,
                info.size,
                info.version_id,
                info.delete_marker,
                lock,
                until,
                info.is_latest,
            )
        )
    return facts


def _versions(infos: Sequence[ObjectInfo]) -> tuple[VersionFact, ...]:
    return tuple(
        VersionFact(i.last_modified_s, i.size, i.version_id, i.delete_marker, is_latest=i.is_latest)
        for i in infos
    )


# -- the whole answer ------------------------------------------------------------------


async def explain_keys(
    keys: Sequence[str],
    layout: KeyLayout,
    facts: GcFacts,
    *,
    objects: BucketStore,
    journal: SegmentSource | None = None,
    store: WatermarkStore | None = None,
) -> ExplainReport:
    """Explain every key of `keys` (in their order); see the module docstring.

    `objects` is the object store; `journal` where the deletion journal is read (None:
    no journal, a missing key is then `absent` without a search); `store` the
    `WatermarkStore` (rates for the estimate; None: no estimate).
    """
    root = layout.listing_root
    l0 = [k for k in dict.fromkeys(keys) if k.startswith(root) and layout.parse(k) is not None]
    claims = {k: [claim_key(d) for d in directories_below(k, layout.root)] for k in l0}
    lookup = set(l0) | {c for found in claims.values() for c in found}
    held, failed, requests = await lookup_store(objects, sorted(lookup), layout)
    hits = JournalHits()
    if journal is not None and l0:
        wanted = {k: _epoch(layout, k) for k in l0}
        hits = await search_journal(journal, wanted)
    if store is not None and facts.safe_epoch is not None:
        highest = max((_epoch(layout, k) or 0 for k in l0 if k in held), default=-1)
        if highest > facts.safe_epoch:
            facts = await add_rates(store, facts, highest)
    elif store is not None and facts.refused is not None and l0:
        facts = await add_rates(store, facts, max(_epoch(layout, k) or 0 for k in l0))
    probes = [0]
    answers: list[Explanation] = []
    lockable = isinstance(objects, DetectingStore) and bool(objects.detected.object_lock)
    where = None if journal is None else journal.describe()
    for key in keys:
        nested = next((c.rsplit("/", 1)[0] for c in claims.get(key, ()) if c in held), None)
        versions = held.get(key, [])
        error = next((failed[k] for k in (key, *claims.get(key, ())) if k in failed), None)
        found = StoreFacts(_versions(versions), nested, error)
        deletions = hits.deletions.get(key, [])
        answer = explain(key, layout, facts, found, deletions)
        if answer.reason is Reason.ELIGIBLE and lockable and probes[0] < LOCK_PROBES:
            probes[0] += len(versions)
            try:
                found = StoreFacts(tuple(await _locks(objects, versions)), nested)
            except StorageError as exc:
                log.warning("explain.lock_probe_failed", key=key, code=exc.code)
            answer = explain(key, layout, facts, found, deletions)
        answers.append(_with_search(answer, hits, where))
    summary = None if journal is None else {"source": where, **hits.summary()}
    return ExplainReport(tuple(answers), facts, summary, requests)


def _epoch(layout: KeyLayout, key: str) -> int | None:
    parsed = layout.parse(key)
    return None if parsed is None else parsed.epoch


def _with_search(answer: Explanation, hits: JournalHits, where: str | None) -> Explanation:
    """An absent or deleted key says which journal segments were searched for it."""
    if answer.verdict.value not in {"absent", "deleted"}:
        return answer
    searched = hits.searched.get(answer.key, [])
    facts = {
        **answer.facts,
        "journal_searched": {
            "source": where,
            "segments": searched[:20],
            "segments_more": max(0, len(searched) - 20),
            "segments_total": hits.segments,
        },
    }
    return dataclasses.replace(answer, facts=facts)
