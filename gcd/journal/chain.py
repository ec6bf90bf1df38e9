"""One sweeper's chain of journal records: the line format, `seq` and `prev` (pure).

The daemon's `gcd.journal.records.JournalWriter` and a Spark task's
`gcd.spark.journal.TaskJournal` write the same records through it, so `gcd journal
verify`, `gcd explain` and `gcd restore` read both alike. Imports nothing an executor
lacks. Design notes: docs/internals/sweep.md, `gcd.journal.chain`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from gcd.observe.events import BatchAttempt, BatchOutcome
from l0gc import strictjson

__all__ = ["JOURNAL_VERSION", "Chain", "after_doc", "before_doc", "keys_digest", "line_digest"]

JOURNAL_VERSION: Final = 1


def keys_digest(keys: Iterable[str]) -> str:
    """SHA-256 (hex) of the keys joined by newlines, in batch order."""
    return hashlib.sha256("\n".join(keys).encode("utf-8", "surrogatepass")).hexdigest()


def line_digest(line: bytes) -> str:
    """SHA-256 (hex) of one record's line: the next record's ``prev``."""
    return hashlib.sha256(line).hexdigest()


def before_doc(attempt: BatchAttempt) -> dict[str, Any]:
    """The "before" record of `attempt`: why the request about to be sent is safe.

    The attempt's tuples go in as they are (JSON writes a tuple as an array): no copy of
    a thousand keys per record."""
    basis = attempt.basis
    keys = attempt.keys
    doc: dict[str, Any] = {
        "type": "before",
        "request": attempt.request,
        "batch": attempt.batch,
        "attempt": attempt.attempt,
        "safe_epoch": None if basis is None else basis.safe_epoch,
        "cluster_epoch": None if basis is None else basis.cluster_epoch,
        "revision": None if basis is None else basis.revision,
        "override": False if basis is None else basis.override,
        "pinning": [] if basis is None else [list(pair) for pair in basis.pinning],
        "count": len(keys),
        "first": keys[0] if keys else None,
        "last": keys[-1] if keys else None,
        "digest": keys_digest(keys),
        "keys": keys,
        "epochs": attempt.epochs,
    }
    if attempt.version_ids:
        doc["version_ids"] = attempt.version_ids
    if attempt.hides:
        doc["hides"] = attempt.hides
    if basis is not None and basis.round_id is not None:
        doc["round"] = basis.round_id
    return doc


def after_doc(outcome: BatchOutcome) -> dict[str, Any]:
    """The "after" record of `outcome`: what became of each key of its request (its
    tuples as they are, as in `before_doc`)."""
    doc: dict[str, Any] = {
        "type": "after",
        "request": outcome.attempt.request,
        "batch": outcome.attempt.batch,
        "attempt": outcome.attempt.attempt,
        "deleted": outcome.deleted,
        "failed": outcome.failed,
        # every key deleted, in the order sent (the usual answer): none unanswered,
        # found by one tuple compare instead of a set of the keys
        "unanswered": () if outcome.deleted == outcome.attempt.keys else outcome.unanswered,
        "request_error": outcome.request_error,
    }
    if outcome.deleted_version_ids:
        doc["deleted_version_ids"] = outcome.deleted_version_ids
    if outcome.markers:
        doc["markers"] = outcome.markers
    return doc


try:
    import msgspec
except ImportError:  # a Spark executor shipped l0gc alone (`gcd spark-package`): json only
    _FAST: Any = None
else:
    _FAST = msgspec.json.Encoder()


def encode_record(record: dict[str, Any]) -> bytes:
    """`record` as one line of JSON: ASCII, compact, the bytes `l0gc.strictjson.dumps`
    writes (InvalidJson on NaN or infinity).

    msgspec writes a 1,000-key record ten times faster than the json module (~0.02 us a
    key instead of ~0.2). For strings, integers, None, booleans, lists, tuples and dicts
    its bytes are json's whenever they are ASCII; floats it writes in another form
    (1e16, not 1e+16), so each float of the record's top level (the time, "at") goes in
    as json writes it. Anything else (output not ASCII or with a DEL: json escapes them;
    a lone surrogate; a type msgspec refuses) is written by strictjson itself, as is
    every record where msgspec is not installed (a Spark executor given only `gcd
    spark-package`'s zip).
    """
    floats = {name: value for name, value in record.items() if type(value) is float}
    if _FAST is not None and all(math.isfinite(value) for value in floats.values()):
        fast = record | {name: msgspec.Raw(repr(value)) for name, value in floats.items()}
        try:
            line: bytes = _FAST.encode(fast)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            if line.isascii() and b"\x7f" not in line:  # json escapes DEL, msgspec not
                return line
    return strictjson.dumps(record, what="journal record", compact=True).encode(
        "utf-8", "surrogatepass"
    )


@dataclass(slots=True)
class Chain:
    """The records of one sweeper so far: the next `seq`, and the digest it chains to."""

    sweeper: str
    seq: int = 0
    prev: str = ""

    def line(self, doc: dict[str, Any], now: float) -> bytes:
        """The next record's line (no newline) for `doc` (its "type" taken out), chained."""
        self.seq += 1
        record = {
            "v": JOURNAL_VERSION,
            "type": doc.pop("type"),
            "sweeper": self.sweeper,
            "seq": self.seq,
            "at": round(now, 6),
            "prev": self.prev,
            **doc,
        }
        line = encode_record(record)
        self.prev = line_digest(line)
        return line
