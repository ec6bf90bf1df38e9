"""What a round reports: its summary (also the `--json` output), and the dry-run plan.

`RoundSummary` is a stable, versioned record: its fields are the `gcd sweep --json`
schema. Counting rules: `listed` counts the objects the round examined (objects a
LIST page returned beyond a skip point are not examined); every examined object is
exactly one of eligible, skipped_not_eligible, skipped_young or unparsable (keys
outside the root count as unparsable). `errors` counts keys that could not be deleted
plus listings abandoned after retries. Two more counts are eligible keys the round
kept on purpose, not errors: `skipped_paused`, not sent because a pause (or an
unreadable pause key) was seen during the round (`blocked_reason` then starts with
"paused during the round" or "pause state unknown"); `unsafe_keys`, keys S3 cannot
delete by name (`gcd.sweep.deleter`: never sent, or failing a request alone), kept and
logged; `skipped_nested`, keys kept because they lie under another namespace's root
claimed below this one (`nested_roots` names those roots, `gcd.sweep.nesting`; the
round is "partial"). `unlistable_prefixes` names the listing prefixes whose listing kept
failing after a retry budget, narrowed down to their prefix directory where the others
still answer (`gcd.sweep.listing`); they are skipped (each counts one error) so the other
prefixes are collected and the round ends. `poison_keys` names (the first 100 of) the
keys a DeleteObjects request with the key alone keeps failing for, kept and counted in
`unsafe_keys` (`gcd.sweep.deleter`). `deadline_exceeded` says the round's listing was
stopped by its deadline (`--round-deadline`; one error): batches already cut still went.

On a versioned bucket (`gcd.rules.versions`) every listed version and delete marker is
one object of these counts; `deleted_versions` and `deleted_markers` say how many of
`deleted` were versions holding bytes and delete markers. `locked` counts versions
Object Lock kept (not errors), `locked_reasons` how many of the examined ones were kept
for which reason, `locked_earliest_retain_until` the first of their retain-until dates.
With an undo window (`gcd.rules.undo`), `markers_written` counts the keys hidden behind a
delete marker (counted in `deleted`, no bytes freed), `versions_reclaimed` the versions and
l0gc markers freed once their window passed, and `undo` says the window, the rule used
("hide-then-reclaim" or "delayed-m"), the delayed M, what is pending reclaim (keys,
bytes, oldest) and the keys kept under another writer's marker; `round` is the round's
id, recorded in the journal (`gcd restore --round`).
`store` is what the round detected about the store (versioning, object_lock, listing,
batch_delete; `gcd.storage.objectstore.StoreFeatures`), None for stores that say nothing.

The plan (`--plan-out FILE`) is one JSON object per line for every key the round
selected for deletion: ``{"key", "epoch", "size", "last_modified"}`` with
last_modified in ISO-8601 UTC. A dry run writes exactly the keys a real run with the
same safe epoch would delete. The file is written under a temporary name and renamed
when complete.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from watermark.errors import ConfigError

__all__ = ["SUMMARY_VERSION", "PlanWriter", "RoundCounts", "RoundResult", "RoundSummary", "iso_utc"]

SUMMARY_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """The outcome of one round, as counted by the sweeper (fields in `--json` order)."""

    version: int = SUMMARY_VERSION
    safe_epoch: int | None = None
    cluster_epoch: int | None = None
    dry_run: bool = False
    listed: int = 0
    eligible: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    skipped_not_eligible: int = 0
    skipped_young: int = 0
    unparsable: int = 0
    errors: int = 0
    skipped_paused: int = 0
    unsafe_keys: int = 0
    list_requests: int = 0
    delete_requests: int = 0
    duration_s: float = 0.0
    blocked_reason: str | None = None
    deleted_versions: int = 0
    deleted_markers: int = 0
    locked: int = 0
    locked_reasons: dict[str, int] | None = None
    locked_earliest_retain_until: str | None = None
    store: dict[str, Any] | None = None
    skipped_nested: int = 0
    nested_roots: tuple[str, ...] = ()
    unlistable_prefixes: tuple[str, ...] = ()
    poison_keys: tuple[str, ...] = ()
    deadline_exceeded: bool = False
    round: str | None = None
    markers_written: int = 0
    versions_reclaimed: int = 0
    undo: dict[str, Any] | None = None

    @property
    def outcome(self) -> str:
        """The metrics outcome: blocked, paused, partial, ok or idle."""
        if self.blocked_reason is not None:
            return "paused" if self.blocked_reason.startswith("paused") else "blocked"
        if self.errors or self.nested_roots:
            return "partial"
        return "ok" if self.eligible else "idle"

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return asdict(self)

    def to_json(self) -> str:
        """The summary as one line of JSON with a "version" field."""
        return json.dumps(self.to_dict())


@dataclass(slots=True)
class RoundCounts:
    """Live counters of a round in progress (the counting fields of RoundSummary)."""

    listed: int = 0
    eligible: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    skipped_not_eligible: int = 0
    skipped_young: int = 0
    unparsable: int = 0
    errors: int = 0
    skipped_paused: int = 0
    unsafe_keys: int = 0
    list_requests: int = 0
    delete_requests: int = 0
    deleted_versions: int = 0
    deleted_markers: int = 0
    locked: int = 0
    skipped_nested: int = 0
    unlistable_prefixes: list[str] = field(default_factory=list)
    poison_keys: list[str] = field(default_factory=list)
    markers_written: int = 0
    versions_reclaimed: int = 0
    pending_keys: int = field(default=0, metadata={"summary": False})
    """Undo window: keys hidden or not yet old enough, kept (in the summary's `undo`)."""
    pending_bytes: int = field(default=0, metadata={"summary": False})
    oldest_pending_s: float | None = field(default=None, metadata={"summary": False})
    foreign_markers: int = field(default=0, metadata={"summary": False})
    """Undo window: eligible keys under a delete marker l0gc did not write, kept."""
    prefixes_total: int = field(default=0, metadata={"summary": False})
    """Listing prefixes of the round, and those listed to their end (the progress line's
    percentage: prefixes differ in size, so it and its ETA are estimates)."""
    prefixes_done: int = field(default=0, metadata={"summary": False})
    abandoned: int = field(default=0, metadata={"summary": False})
    """Keys left for the next round because of a stop (not in RoundSummary)."""
    locked_targets: list[str] = field(default_factory=list, metadata={"summary": False})
    """The first locked versions of the round, for its report (not in RoundSummary)."""

    def summary_fields(self) -> dict[str, Any]:
        """The counters that are RoundSummary fields."""
        return {
            f.name: tuple(sorted(value))
            if isinstance(value := getattr(self, f.name), list)
            else value
            for f in fields(self)
            if f.metadata.get("summary", True)
        }


@dataclass(frozen=True, slots=True)
class RoundResult:
    """A summary plus what the daemon needs to schedule the next round."""

    summary: RoundSummary
    young_ready_at_s: float | None = None
    """When the oldest object skipped as too young becomes old enough (epoch seconds)."""
    complete: bool = True
    """False when the round may have left deletable objects (cap, errors, stop)."""
    max_deleted_epoch: int | None = None


def iso_utc(epoch_s: float) -> str:
    """Epoch seconds as ISO-8601 UTC with a Z suffix."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


class PlanWriter:
    """Writes the plan as JSON lines; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(path.name + ".partial")
        self.count = 0
        try:
            self._file: IO[str] = self._tmp.open("w", encoding="utf-8")
        except OSError as exc:
            msg = f"cannot write the plan file {str(path)!r} ({exc.strerror}); pick a writable path"
            raise ConfigError(msg) from exc

    def write(self, key: str, epoch: int, size: int, last_modified_s: float) -> None:
        """Add one selected key."""
        line = {"key": key, "epoch": epoch, "size": size, "last_modified": iso_utc(last_modified_s)}
        self._file.write(json.dumps(line, sort_keys=True) + "\n")
        self.count += 1

    def close(self) -> None:
        """Flush and move the finished plan into place."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._tmp.replace(self.path)

    def __enter__(self) -> PlanWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
