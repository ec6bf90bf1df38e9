"""Bringing back what l0gc deleted within its undo window (`gcd restore`).

Design notes: docs/internals/sweep.md, `gcd.undo.restore`.
"""

from __future__ import annotations

import enum
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gcd.journal.records import JournalRead, Record
from gcd.rules.versions import split_target, version_target
from gcd.storage.objectstore import BucketStore, ObjectInfo, SoftDeleteStore, VersionedStore

__all__ = [
    "JournaledDeletion",
    "KeyResult",
    "RestoreLog",
    "RestoreOutcome",
    "Selection",
    "deletions_in",
    "repair_steps",
    "restore",
    "select",
]

BATCH = 1000


@dataclass(frozen=True, slots=True)
class JournaledDeletion:
    """One key l0gc deleted, as its journal tells it."""

    key: str
    epoch: int
    at: float
    sweeper: str
    round: str | None
    marker: str | None
    """The delete marker l0gc wrote (a hidden key); None: the key's bytes were deleted."""
    hides: tuple[str, ...] = ()
    pinning: tuple[tuple[str, int], ...] = ()


class RestoreOutcome(enum.Enum):
    """What `restore` found, or did, for one key."""

    RESTORED = "restored"
    ALREADY_RESTORED = "already restored"
    ALREADY_RECLAIMED = "already reclaimed"
    NEVER_DELETED = "never deleted"
    SUPERSEDED = "superseded"
    """A version newer than l0gc's marker is current: left alone."""
    REFUSED = "refused"
    """The journal's marker is not a delete marker in the store: never deleted."""
    FAILED = "failed"


_Deletion = JournaledDeletion
_Outcome = RestoreOutcome


@dataclass(frozen=True, slots=True)
class KeyResult:
    """One key's outcome; `version_id` is the version current again (RESTORED)."""

    key: str
    outcome: _Outcome
    epoch: int | None = None
    version_id: str | None = None
    marker: str | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {
            "key": self.key,
            "outcome": self.outcome.value,
            "epoch": self.epoch,
            "version_id": self.version_id,
            "marker": self.marker,
            "detail": self.detail,
        }


def _strings(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def deletions_in(read: JournalRead) -> list[_Deletion]:
    """Every key deletion the journal records as done (an after record lists it)."""
    befores: dict[tuple[str, object], Record] = {}
    found: list[_Deletion] = []
    for record in read.records:
        if record.kind == "before":
            befores[(record.sweeper, record.doc.get("request"))] = record
        elif record.kind == "after":
            before = befores.get((record.sweeper, record.doc.get("request")))
            if before is not None:
                found += _deleted(before.doc, record.doc, record.sweeper)
    return found


def _deleted(before: dict[str, Any], after: dict[str, Any], sweeper: str) -> list[_Deletion]:
    keys, epochs = _strings(before.get("keys")), _strings(before.get("epochs"))
    versions = _strings(before.get("version_ids")) or [None] * len(keys)
    hides = _strings(before.get("hides")) or [[]] * len(keys)
    sent = {
        version_target(str(key), version): index
        for index, (key, version) in enumerate(zip(keys, versions, strict=False))
    }
    markers = {
        str(pair[0]): str(pair[1])
        for pair in _strings(after.get("markers"))
        if isinstance(pair, list) and len(pair) == 2
    }
    gone_versions = _strings(after.get("deleted_version_ids")) or [None] * len(
        _strings(after.get("deleted"))
    )
    pinning = tuple(
        (str(p[0]), int(p[1]))
        for p in _strings(before.get("pinning"))
        if isinstance(p, list) and len(p) == 2
    )
    result = []
    for key, version in zip(_strings(after.get("deleted")), gone_versions, strict=False):
        index = sent.get(version_target(str(key), version))
        if index is None or not isinstance(epochs[index], int):
            continue
        result.append(
            _Deletion(
                str(key),
                epochs[index],
                float(after.get("at", 0.0)),
                sweeper,
                before.get("round"),
                markers.get(str(key)) if version is None else None,
                tuple(str(v) for v in _strings(hides[index])),
                pinning,
            )
        )
    return result


@dataclass(frozen=True, slots=True)
class Selection:
    """Which deletions to restore (an empty criterion selects every deletion)."""

    since: float | None = None
    until: float | None = None
    rounds: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()
    """The partitions whose M(p) was wrong: named in the repair steps, not a filter
    (see the module docstring)."""
    keys: tuple[str, ...] = ()

    def matches(self, deletion: _Deletion) -> bool:
        """True when `deletion` is selected."""
        return (
            (self.since is None or deletion.at >= self.since)
            and (self.until is None or deletion.at <= self.until)
            and (not self.rounds or deletion.round in self.rounds)
            and (not self.keys or deletion.key in self.keys)
        )


def select(deletions: Iterable[_Deletion], selection: Selection) -> dict[str, _Deletion]:
    """The newest selected deletion of each key (in journal order: the later wins)."""
    chosen: dict[str, _Deletion] = {}
    for deletion in deletions:
        if selection.matches(deletion):
            chosen[deletion.key] = deletion
    return chosen


class RestoreLog:
    """The restore's own journal: one JSON line per request, before and after, fsynced."""

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._file: IO[str] | None = None
        self.lines: list[str] = []

    def write(self, doc: dict[str, Any]) -> None:
        """Append one record (to the file when there is one)."""
        line = json.dumps({"v": 1, "at": round(self._clock(), 6), **doc}, sort_keys=True)
        self.lines.append(line)
        if self.path is None:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class _Plan:
    results: list[KeyResult] = field(default_factory=list)
    targets: list[tuple[_Deletion, str, ObjectInfo | None]] = field(default_factory=list)
    undeletes: list[_Deletion] = field(default_factory=list)
    """Deleted plainly on a store with soft delete: the store brings them back."""


async def restore(
    store: BucketStore,
    chosen: dict[str, _Deletion],
    *,
    wanted: Sequence[str] = (),
    dry_run: bool = False,
    log: RestoreLog | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[KeyResult]:
    """Restore every chosen key (see the module docstring); keys in `wanted` that the
    journal never deleted are NEVER_DELETED. `store` is a versioned S3 store."""
    plan = _Plan()
    plan.results += [KeyResult(key, _Outcome.NEVER_DELETED) for key in wanted if key not in chosen]
    total = len(chosen)
    for done, deletion in enumerate(chosen.values(), start=1):
        await _inspect(store, deletion, plan)
        if progress is not None:
            progress(done, total)
    for start in range(0, len(plan.targets), BATCH):
        part = plan.targets[start : start + BATCH]
        if dry_run:
            plan.results += [
                KeyResult(
                    d.key,
                    _Outcome.RESTORED,
                    d.epoch,
                    None if top is None else top.version_id,
                    marker,
                    "dry run: not restored",
                )
                for d, marker, top in part
            ]
            continue
        plan.results += await _send(store, part, log)
    for deletion in plan.undeletes:
        if dry_run:
            plan.results.append(
                KeyResult(
                    deletion.key, _Outcome.RESTORED, deletion.epoch, detail="dry run: not restored"
                )
            )
        else:
            plan.results.append(await _undelete(store, deletion, log))
    return sorted(plan.results, key=lambda result: result.key)


async def _inspect(store: BucketStore, deletion: _Deletion, plan: _Plan) -> None:
    if deletion.marker is None and isinstance(store, SoftDeleteStore):
        plan.undeletes.append(deletion)
        return
    if deletion.marker is None:
        plan.results.append(
            KeyResult(
                deletion.key,
                _Outcome.ALREADY_RECLAIMED,
                deletion.epoch,
                detail="deleted without an undo window",
            )
        )
        return
    listed = await _versions(store, deletion.key)
    ids = {obj.version_id: obj for obj in listed}
    data = sorted(
        (obj for obj in listed if not obj.delete_marker and obj.version_id in deletion.hides),
        key=lambda obj: -obj.last_modified_s,
    )
    latest = next((obj for obj in listed if obj.is_latest), None)
    if deletion.marker in ids:
        if not ids[deletion.marker].delete_marker:
            plan.results.append(
                KeyResult(
                    deletion.key,
                    _Outcome.REFUSED,
                    deletion.epoch,
                    marker=deletion.marker,
                    detail="the journal names a data version as l0gc's delete marker: not "
                    "deleted (a forged or damaged journal? `gcd journal verify`)",
                )
            )
        elif latest is not None and latest.version_id != deletion.marker:
            plan.results.append(
                KeyResult(
                    deletion.key,
                    _Outcome.SUPERSEDED,
                    deletion.epoch,
                    latest.version_id,
                    deletion.marker,
                    "a version newer than l0gc's marker is current: left alone",
                )
            )
        else:
            plan.targets.append((deletion, deletion.marker, data[0] if data else None))
        return
    if latest is not None and not latest.delete_marker and latest.version_id in deletion.hides:
        plan.results.append(
            KeyResult(
                deletion.key,
                _Outcome.ALREADY_RESTORED,
                deletion.epoch,
                latest.version_id,
                deletion.marker,
            )
        )
        return
    hidden_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deletion.at))
    plan.results.append(
        KeyResult(
            deletion.key,
            _Outcome.ALREADY_RECLAIMED,
            deletion.epoch,
            marker=deletion.marker,
            detail=f"gone for good: hidden at {hidden_at}, its versions "
            "freed once the undo window passed",
        )
    )


async def _versions(store: BucketStore, key: str) -> list[ObjectInfo]:
    """Every version and marker of exactly `key`."""
    assert isinstance(store, VersionedStore), (
        "a versioned deletion is restored on a versioned store"
    )
    found: list[ObjectInfo] = []
    token: str | None = None
    while True:
        page = await store.list_versions_page(key, continuation_token=token)
        found += [obj for obj in page.objects if obj.key == key]
        if page.next_token is None or (page.objects and page.objects[-1].key > key):
            return found
        token = page.next_token


async def _send(
    store: BucketStore, part: list[tuple[_Deletion, str, ObjectInfo | None]], log: RestoreLog | None
) -> list[KeyResult]:
    targets = [version_target(d.key, marker) for d, marker, _ in part]
    if log is not None:
        log.write({"type": "restore-before", "targets": [[d.key, m] for d, m, _ in part]})
    try:
        answer = await store.delete_batch(targets)
    except Exception as exc:  # noqa: BLE001 - the log and the results say what failed
        if log is not None:
            log.write({"type": "restore-after", "request_error": str(exc)})
        return [
            KeyResult(d.key, _Outcome.FAILED, d.epoch, marker=m, detail=str(exc))
            for d, m, _ in part
        ]
    gone = set(answer.deleted)
    errors = {failure.key: failure.code for failure in answer.errors}
    if log is not None:
        log.write(
            {
                "type": "restore-after",
                "restored": [list(split_target(t)) for t in targets if t in gone],
                "failed": [[*split_target(t), code] for t, code in errors.items()],
            }
        )
    results = []
    for (deletion, marker, _), target in zip(part, targets, strict=True):
        if target in gone:
            results.append(await _read_back(store, deletion, marker))
        else:
            results.append(
                KeyResult(
                    deletion.key,
                    _Outcome.FAILED,
                    deletion.epoch,
                    marker=marker,
                    detail=errors.get(target, "not in the answer"),
                )
            )
    return results


async def _read_back(store: BucketStore, deletion: _Deletion, marker: str) -> KeyResult:
    """RESTORED only when the key's current version is one the marker hid (what the
    store says now, not what the delete answered)."""
    listed = await _versions(store, deletion.key)
    latest = next((obj for obj in listed if obj.is_latest), None)
    if (
        latest is not None
        and not latest.delete_marker
        and (not deletion.hides or latest.version_id in deletion.hides)
    ):
        return KeyResult(deletion.key, _Outcome.RESTORED, deletion.epoch, latest.version_id, marker)
    now = (
        "nothing"
        if latest is None
        else f"{'a delete marker' if latest.delete_marker else 'version'} {latest.version_id}"
    )
    return KeyResult(
        deletion.key,
        _Outcome.FAILED,
        deletion.epoch,
        marker=marker,
        detail=f"l0gc's marker was deleted but no hidden version came back (current: {now})",
    )


async def _undelete(store: BucketStore, deletion: _Deletion, log: RestoreLog | None) -> KeyResult:
    """One key back through the store's own soft delete (`SoftDeleteStore.undelete`)."""
    assert isinstance(store, SoftDeleteStore), "an undelete needs a soft-delete store"
    generation = deletion.hides[0] if deletion.hides else None
    if log is not None:
        log.write({"type": "undelete-before", "key": deletion.key, "generation": generation})
    try:
        answer = await store.undelete(deletion.key, generation)
    except Exception as exc:  # noqa: BLE001 - the log and the result say what failed
        if log is not None:
            log.write({"type": "undelete-after", "key": deletion.key, "error": str(exc)})
        return KeyResult(deletion.key, _Outcome.FAILED, deletion.epoch, detail=str(exc))
    if log is not None:
        log.write({"type": "undelete-after", "key": deletion.key, "answer": answer})
    outcome = {"restored": _Outcome.RESTORED, "live": _Outcome.ALREADY_RESTORED}.get(
        answer, _Outcome.ALREADY_RECLAIMED
    )
    detail = None
    if answer == "live":
        detail = "an object is live under this name: not overwritten"
    elif outcome is _Outcome.ALREADY_RECLAIMED:
        detail = "the store's soft delete retention passed"
    return KeyResult(deletion.key, outcome, deletion.epoch, generation, detail=detail)


def repair_steps(
    results: Sequence[KeyResult], chosen: dict[str, _Deletion], partitions: Sequence[str]
) -> list[str]:
    """The commands that keep the restored objects: lower the wrong M(p) below the lowest
    restored epoch (the `partitions` the operator named as wrong; without one, a step to
    fill in: the partitions pinning M at the deletions are usually innocent ones),
    then resume GC."""
    kept = [r for r in results if r.outcome in {_Outcome.RESTORED, _Outcome.ALREADY_RESTORED}]
    if not kept:
        return []
    lowest = min(r.epoch for r in kept if r.epoch is not None)
    names = list(partitions)
    steps = [
        f"watermark partition repair {name} --watermark {lowest - 1} --force "
        '--reason "restored objects from a wrong M(p)"'
        for name in names
    ]
    if not names:
        steps.append(
            f"watermark partition repair PARTITION --watermark {lowest - 1} --force "
            "  # the partition whose M(p) was wrong"
        )
    return [*steps, "gcd resume"]
