"""The deletion journal: why every DeleteObjects call a sweeper made was safe.

Design notes: docs/internals/sweep.md, `gcd.journal.records`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import structlog

from gcd.journal.chain import (
    JOURNAL_VERSION,
    Chain,
    after_doc,
    before_doc,
    line_digest,
)
from gcd.journal.index import INDEX_SUFFIX, IndexBuilder, index_name
from gcd.observe.events import BatchAttempt, BatchOutcome, DeletionNotRecorded
from gcd.observe.hooks import hook_of
from gcd.observe.telemetry import (
    DEFAULT_HOOK,
    JOURNAL_EVENTS,
    DefaultHook,
    JournalAppended,
    JournalFailed,
    JournalRotated,
)
from gcd.storage.objectstore import BucketStore
from l0gc import strictjson
from l0gc.contract.journal_anchor import JournalAnchor, audit_anchor_name, pruned_marker_name
from l0gc.errors import ConfigError, InvalidJson, InvalidRecord, StorageError
from l0gc.events import Emitter, Hooks

if TYPE_CHECKING:
    from gcd.observe.metrics import SweeperMetrics

__all__ = [
    "JournalRead",
    "JournalWriter",
    "Record",
    "chain_digest",
    "check_audit_prefix",
    "read_journal",
    "read_journal_objects",
    "segment_files",
    "ship_segments",
    "write_marker",
]

DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_AGE_S: Final = 3600.0
MAX_LINE_BYTES: Final = 4 * 1024 * 1024
"""A before record of 1000 keys of the S3 maximum (1024 bytes) fits with room to spare."""
_MAX_DEPTH = 3
_PATTERN = "journal-*.jsonl"
_ANCHOR_PREFIX = audit_anchor_name("")[: -len(".json")]
_PRUNED_PREFIX = pruned_marker_name("")[: -len(".json")]
log = structlog.get_logger("gcd.journal")


def check_audit_prefix(prefix: str, root: str) -> str:
    """The audit prefix without a trailing slash; ConfigError when it overlaps the root."""
    clean = prefix.strip().strip("/")
    base = root.strip("/")
    if not clean:
        raise ConfigError("--journal-prefix is empty; give a prefix such as l0gc-audit/journal")
    if clean == base or clean.startswith(base + "/") or base.startswith(clean + "/"):
        raise ConfigError(
            f"--journal-prefix {prefix!r} overlaps the swept root {root!r}: the journal must "
            "live outside it (a sweeper must never list its own journal); pick another prefix"
        )
    return clean


class JournalWriter:
    """Appends deletion records to rotated local segments (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        sweeper_id: str,
        *,
        namespace: str | None,
        bucket: str,
        root: str,
        endpoint_url: str | None = None,
        kind: str = "s3",
        metrics: SweeperMetrics | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
        hook: Hooks | DefaultHook = DEFAULT_HOOK,
    ) -> None:
        if max_bytes < 1024 or max_age_s <= 0:
            raise ConfigError(
                f"journal segments need --journal-max-bytes >= 1024 (got {max_bytes}) and "
                f"--journal-max-age > 0 (got {max_age_s}); fix the flags"
            )
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"journal directory {directory} cannot be created "
                f"({exc.strerror}); fix --journal-dir"
            ) from exc
        self.directory = directory
        self.sweeper_id = sweeper_id
        self._header = {
            "namespace": namespace,
            "bucket": bucket,
            "root": root,
            "endpoint_url": endpoint_url,
            "kind": kind,
        }
        self.metrics, hooks = hook_of(metrics, hook)
        """The metrics `hook` feeds by default (the journal itself only emits events)."""
        self.emit = Emitter(hooks, JOURNAL_EVENTS)
        """Where the journal's events go (`gcd.observe.telemetry`), its shipping's too."""
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._fsync = fsync
        self._clock = clock
        self._file: Any = None
        self._path: Path | None = None
        self._opened_at = 0.0
        self._size = 0
        self._segment = 0
        self._chain = Chain(sweeper_id)
        self.closed_segments: list[Path] = []
        """Segments closed by rotation or `close`, oldest first (for `ship_segments`)."""
        self.segment_ends: dict[Path, JournalAnchor] = {}
        """The last record of each closed segment (the audit prefix's anchor)."""
        self.on_append: Callable[[], None] | None = None
        """Called after each record is on disk (the anchor keeper wakes up)."""
        self._last_segment = ""
        self._index = IndexBuilder()
        """The index of the segment being written (`gcd.journal.index`)."""

    def anchor(self) -> JournalAnchor | None:
        """Where this sweeper's journal ends now (None before the first record)."""
        if not self._chain.seq:
            return None
        chain = self._chain
        return JournalAnchor(
            self.sweeper_id, chain.seq, chain.prev, self._last_segment, self._clock()
        )

    @property
    def current_segment(self) -> Path | None:
        """The segment being written, None before the first record and after `close`."""
        return self._path

    # -- the sink -----------------------------------------------------------------------

    def before(self, attempt: BatchAttempt) -> None:
        """Record why `attempt` is safe; DeletionNotRecorded if it cannot be written."""
        try:
            offset = self._append(before_doc(attempt))
        except (OSError, ValueError) as exc:
            self.emit(JournalFailed("before"))
            log.error("journal.write_failed", record="before", error=str(exc))
            raise DeletionNotRecorded(
                f"the deletion journal in {self.directory} cannot be written ({exc}); "
                f"{len(attempt.keys)} keys not deleted: fix the disk or --journal-dir"
            ) from exc
        self._index.before(offset, attempt.keys, attempt.epochs, attempt)

    def after(self, outcome: BatchOutcome) -> None:
        """Record what became of the attempt (a failure to write is logged and counted)."""
        attempt = outcome.attempt
        try:
            offset = self._append(after_doc(outcome))
        except (OSError, ValueError) as exc:
            self.emit(JournalFailed("after"))
            log.error("journal.write_failed", record="after", error=str(exc))
            return
        # the after names only keys of its before: indexed by the attempt's ranges
        self._index.after(offset, attempt.keys, attempt.epochs, attempt)

    # -- segments -----------------------------------------------------------------------

    def _append(self, doc: dict[str, Any]) -> int:
        """Write `doc` as the next record (rotating first when due); its line's offset."""
        now = self._clock()
        if (
            self._file is None
            or self._size >= self.max_bytes
            or (now - self._opened_at >= self.max_age_s)
        ):
            self._rotate(now)
        offset = self._size
        self._write(doc, now)
        return offset

    def _write(self, doc: dict[str, Any], now: float) -> None:
        line = self._chain.line(doc, now)
        self._file.write(line + b"\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._size += len(line) + 1
        self.emit(JournalAppended(len(line) + 1))
        if self.on_append is not None:
            self.on_append()

    def _rotate(self, now: float) -> None:
        self._close_segment()
        self._segment += 1
        self._path = self.directory / f"journal-{self.sweeper_id}-{self._segment:06d}.jsonl"
        self._last_segment = self._path.name
        self._file = self._path.open("ab")
        self._opened_at = now
        self._size = 0
        self.emit(JournalRotated())
        self._write({"type": "segment", "segment": self._segment, **self._header}, now)

    def _close_segment(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            assert self._path is not None
            self._write_index(self._path)
            end = self.anchor()
            if end is not None:
                self.segment_ends[self._path] = end
            self.closed_segments.append(self._path)
            self._path = None

    def close(self) -> None:
        """Close the current segment (it joins `closed_segments`)."""
        self._close_segment()

    def _write_index(self, path: Path) -> None:
        """Write the closed segment's index beside it (atomically); a failure only costs
        `gcd explain` a full read of the segment."""
        index, self._index = self._index, IndexBuilder()
        raw = index.encode(path.name, self._size)
        target = path.with_name(index_name(path.name))
        scratch = target.with_suffix(".tmp")
        try:
            scratch.write_bytes(raw)
            os.replace(scratch, target)
        except OSError as exc:
            log.warning("journal.index_failed", segment=path.name, error=str(exc))


def write_marker(directory: Path, end: JournalAnchor) -> None:
    """Write (atomically) the local pruned marker of `end`'s sweeper: the last record of
    the segments removed from `directory`."""
    path = directory / pruned_marker_name(end.sweeper)
    scratch = path.with_suffix(".tmp")
    scratch.write_bytes(end.encode())
    os.replace(scratch, path)


async def ship_segments(
    writer: JournalWriter,
    objects: BucketStore,
    prefix: str,
    *,
    shipped: set[Path] | None = None,
    keep_local: bool = True,
) -> int:
    """Upload closed segments not shipped yet to ``{prefix}/{file name}``; return how many.

    `objects` is a `gcd.storage.objectstore.BucketStore` (`put_object`, `get_object`). Each
    upload is read back and compared with the local segment (size and SHA-256). A failed
    or mismatched upload is logged, counted and retried on the next call (with every
    later segment: they go in order), and the local segment is kept. Without
    `keep_local`, a verified segment is then deleted locally, after the directory's
    pruned marker names its last record. Then ``{prefix}/anchor-{sweeper}.json`` records
    the end of the segments shipped (`l0gc.contract.journal_anchor`).
    """
    done = shipped if shipped is not None else set()
    count = 0
    end: JournalAnchor | None = None
    for path in list(writer.closed_segments):
        if path in done:
            continue
        key = f"{prefix}/{path.name}"
        try:
            body = path.read_bytes()
            await objects.put_object(key, body, if_absent=False)
            copy = await objects.get_object(key, max_bytes=len(body))
        except (OSError, StorageError) as exc:
            writer.emit(JournalFailed("ship"))
            log.warning("journal.ship_failed", segment=path.name, error=str(exc))
            break  # in order: the audit anchor never covers a segment not shipped
        if copy is None or len(copy) != len(body) or line_digest(copy) != line_digest(body):
            writer.emit(JournalFailed("ship"))
            log.error(
                "journal.ship_unverified",
                segment=path.name,
                key=key,
                size=len(body),
                stored=None if copy is None else len(copy),
                detail="the uploaded copy differs: the local segment is kept",
            )
            break
        done.add(path)
        count += 1
        end = writer.segment_ends.get(path, end)
        log.info("journal.segment_shipped", segment=path.name, key=key)
        await _ship_index(objects, prefix, path)
        if not keep_local:
            _delete_shipped(writer, path, done)
    if end is not None:
        name = audit_anchor_name(writer.sweeper_id)
        try:
            await objects.put_object(f"{prefix}/{name}", end.encode(), if_absent=False)
        except StorageError as exc:
            writer.emit(JournalFailed("anchor"))
            log.warning("journal.anchor_failed", where="audit prefix", error=str(exc))
    return count


async def _ship_index(objects: BucketStore, prefix: str, segment: Path) -> None:
    """Upload a shipped segment's index beside it (best effort: without it `gcd explain`
    reads the segment in full)."""
    index = segment.with_name(index_name(segment.name))
    try:
        body = index.read_bytes()
        await objects.put_object(f"{prefix}/{index.name}", body, if_absent=False)
    except FileNotFoundError:
        return
    except (OSError, StorageError) as exc:
        log.warning("journal.index_ship_failed", segment=segment.name, error=str(exc))


def _delete_shipped(writer: JournalWriter, path: Path, done: set[Path]) -> None:
    """Delete a shipped, verified segment locally (its end in the pruned marker first)."""
    end = writer.segment_ends.get(path)
    try:
        if end is not None:
            write_marker(writer.directory, end)
        path.unlink()
        path.with_name(index_name(path.name)).unlink(missing_ok=True)
    except OSError as exc:
        writer.emit(JournalFailed("local delete"))
        log.warning("journal.local_delete_failed", segment=path.name, error=str(exc))
        return
    writer.closed_segments.remove(path)
    writer.segment_ends.pop(path, None)
    done.discard(path)
    log.info("journal.local_segment_deleted", segment=path.name)


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One journal line, decoded; `source` says where it was read (file:line)."""

    doc: dict[str, Any]
    line: bytes
    source: str

    @property
    def kind(self) -> str:
        """ "segment", "before" or "after"."""
        return str(self.doc.get("type"))

    @property
    def sweeper(self) -> str:
        """The sweeper that wrote it."""
        return str(self.doc.get("sweeper"))


@dataclass(slots=True)
class JournalRead:
    """Every record found (in file order), and every line that could not be read."""

    records: list[Record] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    """"source: why" for each unreadable line."""
    torn: list[tuple[str, str]] = field(default_factory=list)
    """(file, "source: why") of each segment whose last line is cut short (no newline,
    not JSON): a crash mid-write if the file is its sweeper's last segment."""
    files: list[str] = field(default_factory=list)
    """The segment files read, in order."""
    audit_anchors: dict[str, JournalAnchor] = field(default_factory=dict)
    """Read from an audit prefix: each sweeper's anchor found there."""
    pruned: dict[str, JournalAnchor] = field(default_factory=dict)
    """Each sweeper's pruned marker: the last record of its segments removed (shipped
    and deleted locally, or expired from the audit prefix); its chain starts after it."""

    def by_sweeper(self) -> dict[str, list[Record]]:
        """Each sweeper's records in FILE order (never sorted: a reordering must show)."""
        grouped: dict[str, list[Record]] = {}
        for record in self.records:
            grouped.setdefault(record.sweeper, []).append(record)
        return grouped


def segment_files(paths: Sequence[Path]) -> list[Path]:
    """The segment files named by `paths` (files, or directories searched for segments)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob(_PATTERN)))
        elif path.exists():
            found.append(path)
        else:
            raise ConfigError(f"journal {path} does not exist; give a journal directory or file")
    return found


def _decode(raw: bytes, source: str, into: JournalRead) -> None:
    into.files.append(source)
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            doc = strictjson.loads(
                line, what="journal record", max_bytes=MAX_LINE_BYTES, max_depth=_MAX_DEPTH
            )
        except InvalidJson as exc:
            if number == len(lines):  # the last line, without its newline
                why = f"{where}: {len(line)} bytes without a newline, not a record ({exc})"
                into.torn.append((source, why))
            else:
                into.damaged.append(f"{where}: {exc}")
            continue
        if not isinstance(doc, dict) or doc.get("v") != JOURNAL_VERSION:
            into.damaged.append(f"{where}: not a version {JOURNAL_VERSION} journal record")
            continue
        if doc.get("type") not in {"segment", "before", "after"}:
            into.damaged.append(f"{where}: unknown record type {doc.get('type')!r}")
            continue
        into.records.append(Record(doc, line, where))


def read_journal(paths: Sequence[Path]) -> JournalRead:
    """Every record of the segment files under `paths` (and the directories' markers)."""
    read = JournalRead()
    for path in segment_files(paths):
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"journal segment {path} cannot be read ({exc.strerror})") from exc
        _decode(raw, str(path), read)
    for directory in (path for path in paths if path.is_dir()):
        for marker in sorted(directory.glob(_PRUNED_PREFIX + "*.json")):
            try:
                _decode_anchor(marker.read_bytes(), str(marker), read, into=read.pruned)
            except OSError as exc:
                read.damaged.append(f"{marker}: cannot be read ({exc.strerror})")
    return read


async def read_journal_objects(
    objects: BucketStore, prefix: str, *, max_bytes: int, newer_than: float | None = None
) -> JournalRead:
    """Every record of the segments shipped under `prefix` (an `S3ObjectStore`); with
    `newer_than`, only segments shipped (LastModified) at or after it (anchors always)."""
    read = JournalRead()
    token: str | None = None
    while True:
        page = await objects.list_page(prefix.rstrip("/") + "/", continuation_token=token)
        for info in page.objects:
            if info.key.rsplit("/", 1)[-1].startswith("restore-"):
                continue  # a restore's own log (`gcd.undo.restore`), not a segment
            if (
                newer_than is not None
                and info.last_modified_s < newer_than
                and not info.key.rsplit("/", 1)[-1].startswith((_ANCHOR_PREFIX, _PRUNED_PREFIX))
            ):
                continue
            body = await objects.get_object(info.key, max_bytes=max_bytes)
            if body is None:
                continue
            name = info.key.rsplit("/", 1)[-1]
            if name.startswith(_ANCHOR_PREFIX):
                _decode_anchor(body, info.key, read)
            elif name.startswith(_PRUNED_PREFIX):
                _decode_anchor(body, info.key, read, into=read.pruned)
            elif name.endswith(INDEX_SUFFIX):
                continue  # a segment's index (`gcd.journal.index`), not records
            else:
                _decode(body, info.key, read)
        token = page.next_token
        if token is None:
            return read


def _decode_anchor(
    body: bytes, key: str, read: JournalRead, into: dict[str, JournalAnchor] | None = None
) -> None:
    try:
        anchor = JournalAnchor.decode(body, key)
    except InvalidRecord as exc:
        read.damaged.append(f"{key}: {exc}")
        return
    (read.audit_anchors if into is None else into)[anchor.sweeper] = anchor


def chain_digest(record: Record) -> str:
    """The digest the next record of the same sweeper must carry as ``prev``."""
    return line_digest(record.line)
