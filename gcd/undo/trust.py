"""Which journal records `gcd restore` may act on: only those that verify.

Design notes: docs/internals/sweep.md, `gcd.undo.trust`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from gcd.journal.check import FindingKind, VerifyReport
from gcd.journal.records import JournalRead, Record

__all__ = ["trusted_records"]

_UNTRUSTED = (FindingKind.DAMAGE, FindingKind.VIOLATION)


def _file(source: str) -> str:
    """The segment of a record's or a damaged line's source ("file:line[: why]")."""
    return source.split(": ", 1)[0].rsplit(":", 1)[0]


def trusted_records(
    read: JournalRead,
    report: VerifyReport,
    anchored: Collection[str],
    *,
    namespace: str,
    bucket: str,
) -> tuple[list[Record], list[str]]:
    """(the records restore may act on, one line per reason something was left out);
    `report` is `check_records` with the anchors checked, `anchored` the sweepers with
    an anchor in etcd."""
    sweeper_of = {_file(record.source): record.sweeper for record in read.records}
    distrusted: dict[str, str] = {}
    for finding in report.findings:
        sweeper = sweeper_of.get(_file(finding.source))
        if finding.kind in _UNTRUSTED and sweeper is not None:
            distrusted.setdefault(sweeper, f"{finding.kind.value}: {finding.message}")
    for sweeper in sweeper_of.values():
        if sweeper not in anchored:
            distrusted.setdefault(
                sweeper,
                "no journal anchor in etcd for this sweeper: its records cannot be vouched for",
            )
    headers = _headers(read.records)
    kept: list[Record] = []
    foreign: dict[str, str] = {}
    for record in read.records:
        if record.sweeper in distrusted:
            continue
        segment = _file(record.source)
        header = headers.get(segment)
        why = _foreign(header, namespace, bucket)
        if why is not None:
            foreign.setdefault(segment, why)
        elif _outside(header, record):
            foreign[record.source] = f"keys outside the root {(header or {}).get('root')!r}"
        else:
            kept.append(record)
    reasons = [
        f"sweeper {sweeper}'s journal left out ({why})"
        for sweeper, why in sorted(distrusted.items())
    ]
    reasons += [f"{segment}: left out ({why})" for segment, why in sorted(foreign.items())]
    return kept, reasons


def _headers(records: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """Each segment's header (its first record, when that is a segment record)."""
    headers: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for record in records:
        segment = _file(record.source)
        if segment not in seen:
            seen.add(segment)
            if record.kind == "segment":
                headers[segment] = record.doc
    return headers


def _foreign(header: dict[str, Any] | None, namespace: str, bucket: str) -> str | None:
    """Why a segment with `header` is not this namespace's and bucket's, or None."""
    if header is None:
        return "the segment has no header"
    if header.get("namespace") != namespace or header.get("bucket") != bucket:
        return (
            f"written for namespace {header.get('namespace')!r} and bucket "
            f"{header.get('bucket')!r}, not {namespace!r} and {bucket!r}"
        )
    return None


def _outside(header: dict[str, Any] | None, record: Record) -> bool:
    """A before record naming a key outside its segment's root."""
    keys = record.doc.get("keys") if record.kind == "before" else None
    root = str((header or {}).get("root") or "").rstrip("/") + "/"
    return isinstance(keys, list) and not all(
        isinstance(key, str) and key.startswith(root) for key in keys
    )
