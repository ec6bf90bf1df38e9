"""Anchoring a sweeper's deletion journal outside its directory (the async shell).

Design notes: docs/internals/sweep.md, `gcd.journal.anchor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from gcd.journal.prune import PRUNE_EVERY_S, PruneReport, prune_anchors, prune_audit
from gcd.journal.records import JournalWriter, ship_segments
from gcd.observe.telemetry import JournalFailed
from gcd.storage.objectstore import BucketStore
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key
from l0gc.contract.kv import KV, Compare, Put
from l0gc.errors import InvalidRecord, L0gcError

__all__ = ["AnchorKeeper", "StoredAnchor", "anchoring", "put_anchor"]

log = structlog.get_logger("gcd.journal")
_CAS_ATTEMPTS = 5


class AnchorKeeper:
    """See the module docstring. `start`, then `close` (a last anchor and shipping)."""

    def __init__(
        self,
        writer: JournalWriter,
        *,
        kv: KV | None,
        namespace: str | None,
        objects: BucketStore | None = None,
        prefix: str | None = None,
        keep_local: bool = True,
        retention_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.writer = writer
        self._kv = kv if namespace is not None else None
        self._namespace = namespace
        self._key = None if namespace is None else anchor_key(namespace, writer.sweeper_id)
        self._objects = objects
        self._prefix = prefix
        self._keep_local = keep_local
        self._retention_s = retention_s
        self._clock = clock
        self._pruned_at: float | None = None
        self.pruned: list[PruneReport] = []
        """What each retention pass removed (for tests and logs)."""
        self._shipped: set[Path] = set()
        self._anchored = 0
        """The seq stored in etcd by this keeper (0: nothing yet)."""
        self._mod_revision = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.anchored = 0
        """How many anchors were written to etcd (for tests and logs)."""

    def start(self) -> None:
        """Follow the writer's appends."""
        self.writer.on_append = self._wake.set
        self._task = asyncio.create_task(self._follow(), name="journal-anchor")

    async def close(self) -> None:
        """Stop following; anchor the end and ship every segment (the writer is closed).

        A step in progress is let finish, never cancelled: an etcd call cancelled in the
        middle of connecting can leave the client waiting on its channel for minutes."""
        self.writer.on_append = None
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        await self.step()

    async def _follow(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            await self.step()

    async def step(self) -> None:
        """Anchor the writer's end in etcd and ship what is closed (errors logged)."""
        end = self.writer.anchor()
        if end is not None and self._kv is not None and end.seq > self._anchored:
            try:
                await self._put(end)
            except (L0gcError, OSError) as exc:
                self.writer.emit(JournalFailed("anchor"))
                log.warning(
                    "journal.anchor_failed",
                    where="etcd",
                    key=self._key,
                    seq=end.seq,
                    error=str(exc),
                )
        if self._prefix is not None and self._objects is not None:
            await ship_segments(
                self.writer,
                self._objects,
                self._prefix,
                shipped=self._shipped,
                keep_local=self._keep_local,
            )
            await self._prune()

    async def _prune(self) -> None:
        """The retention pass, at most once per PRUNE_EVERY_S (errors logged)."""
        now = self._clock()
        if self._retention_s is None or (
            self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_S
        ):
            return
        self._pruned_at = now
        assert self._prefix is not None
        assert self._objects is not None
        try:
            report = await prune_audit(
                self._objects, self._prefix, retention_s=self._retention_s, now=now
            )
            if self._kv is not None and self._namespace is not None:
                await prune_anchors(
                    self._kv, self._namespace, retention_s=self._retention_s, now=now, report=report
                )
        except (L0gcError, OSError) as exc:
            self.writer.emit(JournalFailed("prune"))
            log.warning("journal.prune_failed", error=str(exc))
            return
        self.pruned.append(report)

    async def _put(self, end: JournalAnchor) -> None:
        assert self._kv is not None
        assert self._key is not None
        stored = await put_anchor(self._kv, self._key, end, self._mod_revision)
        self._anchored, self._mod_revision = stored.seq, stored.mod_revision
        self.anchored += stored.written


@dataclass(frozen=True, slots=True)
class StoredAnchor:
    """What `put_anchor` left in etcd: the seq stored, at which mod revision, and
    whether this call wrote it."""

    seq: int
    mod_revision: int
    written: bool


async def put_anchor(kv: KV, key: str, end: JournalAnchor, mod_revision: int = 0) -> StoredAnchor:
    """Store `end` at `key` by compare-and-swap on `mod_revision` (the caller's last
    write; 0: none), never over a later end of the same chain."""
    for _ in range(_CAS_ATTEMPTS):
        result = await kv.txn([Compare(key, mod_revision)], [Put(key, end.encode())])
        if result.succeeded:
            return StoredAnchor(end.seq, result.revision, True)
        stored = await kv.get(key)
        mod_revision = 0 if stored is None else stored.mod_revision
        if stored is None:
            continue
        try:
            seq = JournalAnchor.decode(stored.value, key).seq
        except InvalidRecord:
            seq = 0  # overwritten with garbage: our own end replaces it
        if seq >= end.seq:
            log.error(
                "journal.anchor_ahead",
                key=key,
                stored=seq,
                ours=end.seq,
                detail="another process writes this sweeper's anchor",
            )
            return StoredAnchor(seq, mod_revision, False)
    raise L0gcError(f"the journal anchor {key} kept changing under us")


@contextlib.asynccontextmanager
async def anchoring(
    kv: KV,
    namespace: str,
    ends: Callable[[], Iterable[JournalAnchor]],
    *,
    every_s: float = 5.0,
) -> AsyncIterator[None]:
    """While the block runs, anchor in etcd every `every_s` the end of each chain that
    `ends()` gives (a Spark job's delete tasks, reported to its driver) newer than the
    one last anchored; once more when it ends. A failure is logged and retried at the
    next step (`gcd journal verify` says which chain is behind). A step in progress is
    let finish, never cancelled (see `AnchorKeeper.close`)."""
    anchored: dict[str, int] = {}
    stop = asyncio.Event()

    async def step() -> None:
        for end in list(ends()):
            if end.seq <= anchored.get(end.sweeper, 0):
                continue
            key = anchor_key(namespace, end.sweeper)
            try:
                anchored[end.sweeper] = (await put_anchor(kv, key, end)).seq
            except (L0gcError, OSError) as exc:
                log.warning("journal.anchor_failed", where="etcd", key=key, error=str(exc))

    async def run() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            await step()

    task = asyncio.create_task(run(), name="journal-anchoring")
    try:
        yield
    finally:
        stop.set()
        await task
