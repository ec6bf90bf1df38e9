"""Where a sweeper's deletion journal ends, kept outside the journal (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.journal_anchor`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from l0gc import strictjson
from l0gc.errors import InvalidJson, InvalidRecord

__all__ = [
    "ANCHOR_VERSION",
    "JournalAnchor",
    "anchor_key",
    "anchors_prefix",
    "audit_anchor_name",
    "pruned_marker_name",
]

ANCHOR_VERSION = 1
_MAX_ANCHOR_BYTES = 4096
_AUDIT_PREFIX = "anchor-"


def anchors_prefix(namespace: str) -> str:
    """The etcd prefix of a namespace's journal anchors."""
    return f"{namespace}/journal/"


def anchor_key(namespace: str, sweeper: str) -> str:
    """The etcd key of one sweeper's journal anchor."""
    return anchors_prefix(namespace) + sweeper


def audit_anchor_name(sweeper: str) -> str:
    """The object name (under the audit prefix) of one sweeper's anchor."""
    return f"{_AUDIT_PREFIX}{sweeper}.json"


def pruned_marker_name(sweeper: str) -> str:
    """The file (journal directory) or object (audit prefix) name of one sweeper's
    pruned marker: an anchor of the last record of its segments removed, from which the
    chain of its remaining records starts."""
    return f"pruned-{sweeper}.json"


@dataclass(frozen=True, slots=True)
class JournalAnchor:
    """A sweeper's journal reached record `seq`, whose line has SHA-256 `digest`."""

    sweeper: str
    seq: int
    digest: str
    segment: str
    """The segment file holding that record (for people)."""
    at: float

    def encode(self) -> bytes:
        """The stored JSON (other fields may be added: readers ignore unknown ones)."""
        doc = {
            "version": ANCHOR_VERSION,
            "sweeper": self.sweeper,
            "seq": self.seq,
            "digest": self.digest,
            "segment": self.segment,
            "at": round(self.at, 6),
        }
        return strictjson.dumps(doc, what="journal anchor", compact=True).encode()

    @classmethod
    def decode(cls, raw: bytes, where: str) -> JournalAnchor:
        """Decode `raw`; InvalidRecord naming `where` when it is not an anchor."""
        try:
            doc: Any = strictjson.loads(
                raw, what=f"journal anchor {where}", max_bytes=_MAX_ANCHOR_BYTES
            )
        except InvalidJson as exc:
            raise InvalidRecord(str(exc)) from exc
        if not isinstance(doc, dict) or doc.get("version") != ANCHOR_VERSION:
            raise InvalidRecord(f"journal anchor {where}: not a version {ANCHOR_VERSION} anchor")
        sweeper, seq, digest = doc.get("sweeper"), doc.get("seq"), doc.get("digest")
        segment, at = doc.get("segment", ""), doc.get("at", 0.0)
        if (
            not isinstance(sweeper, str)
            or type(seq) is not int
            or seq < 1
            or (
                not isinstance(digest, str)
                or not isinstance(segment, str)
                or type(at) not in (int, float)
                or not math.isfinite(at)
            )
        ):
            raise InvalidRecord(f"journal anchor {where}: needs sweeper, seq >= 1, digest")
        return cls(sweeper, seq, digest, segment, float(at))
