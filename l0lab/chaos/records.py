"""What the chaos processes write down: partition logs and histories (JSON lines).

Every process of a chaos run records what it did in files of the run directory, so the
checker can judge the whole run afterwards, whichever processes were killed on the way
(a line is flushed as it is written; a process killed by SIGKILL loses at most the
line it was writing, which the reader skips).

Partition logs, ``plog/{partition}.jsonl``, are the writers' logs: the source of truth
for which entry references which object. A write appends an entry once its fence is
granted, then resolves it:

    {"op": "append", "offset": N, "key": K, "epoch": E, "token": T, "t": ...}
    {"op": "commit", "offset": N, "how": "ok" | "kept", "t": ...}
    {"op": "abort",  "offset": N, "why": "...", "t": ...}

"kept" is a commit whose answer was lost while its publisher died: the entry stays in
the log (the publisher's successor is told the log end, so it is protected). An entry
neither committed nor aborted belongs to a writer that was killed; its restart resolves
it. Offsets only increase; an aborted offset is never reused.

Histories, ``history/{actor}.jsonl``: writers' uploads (``upload``, before the PUT),
PUTs answered (``stored``) or failed (``put_failed``), and refused fences (``refused``);
an upload with neither was cut short by a kill, and may never have reached the store.
The reconcilers' lifts
(``lift``: everything of a partition through an offset, recorded before it is reported).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "Entry",
    "History",
    "PartitionLog",
    "Tail",
    "log_path",
    "read_lines",
]


def log_path(run_dir: Path, partition: str) -> Path:
    """The partition log's file ('/' in names becomes '__')."""
    return run_dir / "plog" / (partition.replace("/", "__") + ".jsonl")


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete JSON object line of `path` (a torn last line is skipped)."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.endswith("\n"):
                return  # being written, or torn by a kill
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                yield doc


class History:
    """An append-only JSON-lines file, one flushed line per event."""

    def __init__(self, path: Path, clock: Any = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._clock = clock
        self._file: TextIO = path.open("a", encoding="utf-8")

    def write(self, op: str, **fields: Any) -> float:
        """Append one event stamped with the wall clock; return the stamp."""
        now = float(self._clock())
        self._file.write(json.dumps({"op": op, "t": round(now, 6), **fields}) + "\n")
        self._file.flush()
        return now

    def close(self) -> None:
        """Close the file."""
        self._file.close()


@dataclass(slots=True)
class Entry:
    """One partition log entry as known so far."""

    offset: int
    key: str
    epoch: int
    token: str | None
    appended_at: float
    resolved: str | None = None
    """None (unresolved), "ok", "kept" or "abort"."""
    resolved_at: float | None = None

    @property
    def committed(self) -> bool:
        """True once the entry is in the log for good."""
        return self.resolved in {"ok", "kept"}


@dataclass(slots=True)
class Tail:
    """Reads a growing JSON-lines file incrementally (whole lines only)."""

    path: Path
    position: int = 0
    _partial: bytes = b""

    def read(self) -> list[dict[str, Any]]:
        """The objects of the lines completed since the last call."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.position)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.position += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        found: list[dict[str, Any]] = []
        for line in lines:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                found.append(doc)
        return found


@dataclass(slots=True)
class PartitionLog:
    """One partition's log: appended by its one writer, tailed by everyone else."""

    path: Path
    entries: dict[int, Entry] = field(default_factory=dict)
    next_offset: int = 0
    _file: TextIO | None = None

    @classmethod
    def open(cls, path: Path) -> PartitionLog:
        """Load what is there and open it for appending."""
        path.parent.mkdir(parents=True, exist_ok=True)
        log = cls(path)
        log.apply_all(read_lines(path))
        log._file = path.open("a", encoding="utf-8")
        return log

    @classmethod
    def read(cls, path: Path) -> PartitionLog:
        """The log as it is on disk, not opened for appending."""
        log = cls(path)
        log.apply_all(read_lines(path))
        return log

    def apply_all(self, docs: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> None:
        """Apply records read from the file (also used by readers that tail it)."""
        for doc in docs:
            self.apply(doc)

    def apply(self, doc: dict[str, Any]) -> None:
        """Apply one record."""
        offset = doc.get("offset")
        if type(offset) is not int:
            return
        if doc.get("op") == "append":
            self.entries[offset] = Entry(
                offset, str(doc["key"]), int(doc["epoch"]), doc.get("token"), float(doc["t"])
            )
            self.next_offset = max(self.next_offset, offset + 1)
        elif doc.get("op") in {"commit", "abort"} and offset in self.entries:
            entry = self.entries[offset]
            entry.resolved = "abort" if doc["op"] == "abort" else str(doc.get("how", "ok"))
            entry.resolved_at = float(doc["t"])

    @property
    def log_end(self) -> int:
        """The offset of the last entry, -1 when empty."""
        return self.next_offset - 1

    def unresolved(self) -> list[Entry]:
        """Entries neither committed nor aborted, by offset."""
        return sorted(
            (e for e in self.entries.values() if e.resolved is None), key=lambda e: e.offset
        )

    def _write(self, doc: dict[str, Any]) -> None:
        assert self._file is not None, "the log is open for reading only"
        self._file.write(json.dumps(doc) + "\n")
        self._file.flush()
        self.apply(doc)

    def append(self, key: str, epoch: int, token: str | None) -> Entry:
        """Append an entry at the next offset (its fence is granted)."""
        offset = self.next_offset
        self._write(
            {
                "op": "append",
                "offset": offset,
                "key": key,
                "epoch": epoch,
                "token": token,
                "t": round(time.time(), 6),
            }
        )
        return self.entries[offset]

    def commit(self, offset: int, how: str = "ok") -> None:
        """The entry is in the log for good ("kept": its publisher's answer was lost)."""
        self._write({"op": "commit", "offset": offset, "how": how, "t": round(time.time(), 6)})

    def abort(self, offset: int, why: str) -> None:
        """The entry is not in the log (its fence was refused or gone)."""
        self._write({"op": "abort", "offset": offset, "why": why, "t": round(time.time(), 6)})

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
