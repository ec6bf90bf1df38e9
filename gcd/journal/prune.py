"""Retention of the deletion journal: shipped segments and anchors that have aged out.

Design notes: docs/internals/sweep.md, `gcd.journal.prune`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from gcd.journal.index import index_name
from gcd.storage.objectstore import BucketStore, ObjectInfo
from l0gc import strictjson
from l0gc.contract.journal_anchor import (
    JournalAnchor,
    anchors_prefix,
    audit_anchor_name,
    pruned_marker_name,
)
from l0gc.contract.kv import KV, Compare, Delete
from l0gc.errors import InvalidJson, InvalidRecord, StorageError

__all__ = ["PRUNE_EVERY_S", "PruneReport", "prune_anchors", "prune_audit"]

PRUNE_EVERY_S = 3600.0
_SEGMENT = re.compile(r"journal-(?P<sweeper>.+)-(?P<number>[0-9]+)\.jsonl")
_MAX_SEGMENT_READ = 1 << 30
log = structlog.get_logger("gcd.journal")


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (and kept)."""

    segments_deleted: int = 0
    segments_kept: int = 0
    sweepers_gone: int = 0
    """Sweepers whose every segment aged out (their anchor and marker deleted too)."""
    markers_written: int = 0
    anchors_deleted: int = 0
    """etcd anchors of sweepers long gone."""
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def _list(objects: BucketStore, prefix: str) -> list[ObjectInfo]:
    found: list[ObjectInfo] = []
    token: str | None = None
    while True:
        page = await objects.list_page(prefix, continuation_token=token)
        found.extend(page.objects)
        token = page.next_token
        if token is None:
            return found


def _last_record(body: bytes, sweeper: str, segment: str, now: float) -> JournalAnchor | None:
    """The anchor of a segment's last complete record, None if it has none."""
    for line in reversed(body.split(b"\n")):
        if not line.strip():
            continue
        try:
            doc = strictjson.loads(line, what="journal record", max_bytes=len(line) + 1)
        except InvalidJson:
            return None
        seq = doc.get("seq") if isinstance(doc, dict) else None
        if type(seq) is not int or seq < 1 or doc.get("sweeper") != sweeper:
            return None
        return JournalAnchor(sweeper, seq, hashlib.sha256(line).hexdigest(), segment, now)
    return None


async def _delete(objects: BucketStore, keys: Sequence[str], report: PruneReport) -> None:
    for start in range(0, len(keys), 1000):
        result = await objects.delete_batch(list(keys[start : start + 1000]))
        names = (key.rsplit("/", 1)[-1] for key in result.deleted)
        report.segments_deleted += sum(1 for name in names if _SEGMENT.fullmatch(name))
        for failure in result.errors:
            report.errors += 1
            log.warning("journal.prune_delete_failed", key=failure.key, code=failure.code)


def _with_indexes(expired: Sequence[ObjectInfo]) -> list[str]:
    """The keys of expired segments and of their indexes (`gcd.journal.index`)."""
    return [key for info in expired for key in (info.key, index_name(info.key))]


async def prune_audit(
    objects: BucketStore, prefix: str, *, retention_s: float, now: float
) -> PruneReport:
    """Delete the segments under `prefix` older than `retention_s` (see the module
    docstring); `objects` lists, gets, puts and deletes (`S3ObjectStore` and the like)."""
    report = PruneReport()
    base = prefix.rstrip("/") + "/"
    cutoff = now - retention_s
    segments: dict[str, list[tuple[int, ObjectInfo]]] = {}
    for info in await _list(objects, base):
        match = _SEGMENT.fullmatch(info.key[len(base) :])
        if match is not None:
            segments.setdefault(match["sweeper"], []).append((int(match["number"]), info))
    for sweeper, found in sorted(segments.items()):
        found.sort(key=lambda pair: pair[0])
        expired: list[ObjectInfo] = []
        for _, info in found:
            if info.last_modified_s >= cutoff:
                break
            expired.append(info)
        report.segments_kept += len(found) - len(expired)
        if not expired:
            continue
        try:
            if len(expired) == len(found):  # the sweeper is long gone
                extra = [base + audit_anchor_name(sweeper), base + pruned_marker_name(sweeper)]
                await _delete(objects, _with_indexes(expired) + extra, report)
                report.sweepers_gone += 1
                continue
            newest = expired[-1]
            body = await objects.get_object(newest.key, max_bytes=_MAX_SEGMENT_READ)
            end = None if body is None else _last_record(body, sweeper, newest.key, now)
            if end is None:
                report.errors += 1
                log.error(
                    "journal.prune_unreadable",
                    key=newest.key,
                    detail="its last record cannot be read: nothing pruned for this sweeper",
                )
                continue
            marker_key = base + pruned_marker_name(sweeper)
            stored = await objects.get_object(marker_key, max_bytes=4096)
            try:
                known = None if stored is None else JournalAnchor.decode(stored, marker_key)
            except InvalidRecord:
                known = None
            higher = known is not None and known.seq >= end.seq
            if not higher:
                await objects.put_object(marker_key, end.encode(), if_absent=False)
                report.markers_written += 1
            await _delete(objects, _with_indexes(expired), report)
        except StorageError as exc:
            report.errors += 1
            log.warning("journal.prune_failed", sweeper=sweeper, error=str(exc))
    log.info("journal.pruned", prefix=prefix, **report.to_dict())
    return report


async def prune_anchors(
    kv: KV, namespace: str, *, retention_s: float, now: float, report: PruneReport | None = None
) -> PruneReport:
    """Delete the etcd anchors whose last record is older than `retention_s`."""
    report = report if report is not None else PruneReport()
    cutoff = now - retention_s
    for item in (await kv.range_prefix(anchors_prefix(namespace))).items:
        try:
            anchor = JournalAnchor.decode(item.value, item.key)
        except InvalidRecord:
            continue  # `gcd journal verify` reports it; never delete what cannot be read
        if anchor.at >= cutoff:
            continue
        if (await kv.txn([Compare(item.key, item.mod_revision)], [Delete(item.key)])).succeeded:
            report.anchors_deleted += 1
            log.info("journal.anchor_pruned", key=item.key, at=anchor.at)
    return report
