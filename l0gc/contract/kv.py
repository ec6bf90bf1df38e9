"""The small key-value interface the watermark store needs from etcd.

Design notes: docs/internals/kernel.md, `l0gc.contract.kv`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = [
    "KV",
    "Change",
    "Compare",
    "Delete",
    "FoldReadable",
    "KeyChecks",
    "KeyValue",
    "PrefixWatch",
    "Put",
    "RangeFold",
    "RangeResult",
    "TxnResult",
    "Watchable",
]


class KeyValue(NamedTuple):
    """One stored key with its revisions. A NamedTuple, not a dataclass: a range read
    holds up to millions of them, and the cyclic GC stops tracking a tuple of plain
    values after its first collection (a dataclass instance it traverses at every full
    collection: ~2 s of a 1M-record read)."""

    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class RangeResult:
    """Keys under a prefix, all as of `revision`; the answering etcd's `cluster_id` (0: unknown)."""

    revision: int
    items: tuple[KeyValue, ...]
    cluster_id: int = 0


@dataclass(frozen=True, slots=True)
class Compare:
    """Transaction guard: the key's mod_revision equals `mod_revision` (0 = absent)."""

    key: str
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Put:
    """Transaction write; `lease` 0 = no lease."""

    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    """Transaction delete of one key."""

    key: str


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Whether every compare held (and so every op was applied), and the revision after."""

    succeeded: bool
    revision: int


@dataclass(frozen=True, slots=True)
class Change:
    """One key's change at `revision`: `value` None is a delete."""

    key: str
    value: bytes | None
    revision: int


class RangeFold(Protocol):
    """What a paged read of a prefix hands its keys to (`FoldReadable.range_fold`)."""

    def start(self, revision: int, cluster_id: int) -> None:
        """The read (re)starts at `revision`: forget every key given before."""
        ...

    def add(self, items: Iterable[tuple[str, bytes]]) -> None:
        """The next page's (key, value) pairs, in key order."""
        ...


class FoldReadable(Protocol):
    """A KV that can hand a large prefix over page by page instead of holding it whole."""

    async def range_fold(self, prefix: str, fold: RangeFold, *, revision: int = 0) -> None:
        """Every key under `prefix` at one revision (the current one, or `revision`),
        given to `fold` page by page after `fold.start(revision, cluster_id)`."""
        ...


class PrefixWatch(Protocol):
    """An open watch of one prefix."""

    async def sync(self) -> tuple[list[Change], int]:
        """Every change since the previous sync (whole revisions, in order), and a
        revision up to which every change has come (the server's current one where its
        answers are ordered with its events, else at least the last change's: see
        `l0gc.etcd.watch`); WatchLost once the watch has ended."""
        ...

    @property
    def answered(self) -> int:
        """The revision of the server's last progress answer: what `sync` vouched for
        where answers are ordered with events, maybe more otherwise (0: none yet)."""
        ...

    async def close(self) -> None:
        """Cancel the watch."""
        ...


@runtime_checkable
class KeyChecks(Protocol):
    """A KV that can answer about a prefix without sending its values (a follower's
    check, `l0gc.etcd.follow`)."""

    async def count(self, prefix: str, *, revision: int) -> int:
        """How many keys are under `prefix` at `revision`."""
        ...

    async def changed_keys(self, prefix: str, *, revision: int, after: int) -> dict[str, int]:
        """The keys under `prefix` at `revision` last changed after revision `after`, each
        with its mod revision (keys only)."""
        ...


@runtime_checkable
class Watchable(Protocol):
    """A KV that can follow a prefix."""

    async def watch_prefix(self, prefix: str, start_revision: int) -> PrefixWatch:
        """Watch `prefix` from `start_revision` (inclusive); WatchLost if it cannot."""
        ...


class KV(Protocol):
    """etcd's KV + lease surface, reduced to what l0gc uses."""

    async def get(self, key: str) -> KeyValue | None:
        """The key's current value, or None."""
        ...

    async def range_prefix(self, prefix: str, *, revision: int = 0) -> RangeResult:
        """Every key starting with `prefix`, consistently at one revision, sorted by key;
        at `revision` when not 0 (a KV without history raises EtcdUnavailable, as etcd does
        for a compacted revision)."""
        ...

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Put | Delete]) -> TxnResult:
        """Apply all `ops` atomically iff every compare holds."""
        ...

    async def lease_grant(self, ttl_s: int) -> int:
        """A new lease id that expires after `ttl_s` unless refreshed."""
        ...

    async def lease_refresh(self, lease_id: int) -> bool:
        """Keep a lease alive; False when it has already expired."""
        ...

    async def lease_revoke(self, lease_id: int) -> None:
        """Drop a lease and every key attached to it."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
