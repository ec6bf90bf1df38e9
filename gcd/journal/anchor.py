"""Anchoring a sweeper's deletion journal outside its directory (the async shell).

Design notes: docs/internals/sweep.md, `gcd.journal.anchor`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from gcd.journal.prune import PRUNE_EVERY_S, PruneReport, prune_anchors, prune_audit
from gcd.journal.records import JournalWriter, ship_segments
from gcd.observe.telemetry import JournalFailed
from gcd.storage.objectstore import BucketStore
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key
from l0gc.contract.kv import KV, Compare, Put
from l0gc.errors import InvalidRecord, L0gcError

__all__ = ["AnchorKeeper"]

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
        for _ in range(_CAS_ATTEMPTS):
            result = await self._kv.txn(
                [Compare(self._key, self._mod_revision)], [Put(self._key, end.encode())]
            )
            if result.succeeded:
                self._anchored, self._mod_revision = end.seq, result.revision
                self.anchored += 1
                return
            stored = await self._kv.get(self._key)
            self._mod_revision = 0 if stored is None else stored.mod_revision
            if stored is None:
                continue
            try:
                seq = JournalAnchor.decode(stored.value, self._key).seq
            except InvalidRecord:
                seq = 0  # overwritten with garbage: our own end replaces it
            if seq >= end.seq:
                log.error(
                    "journal.anchor_ahead",
                    key=self._key,
                    stored=seq,
                    ours=end.seq,
                    detail="another process writes this sweeper's anchor",
                )
                self._anchored = seq
                return
        raise L0gcError(f"the journal anchor {self._key} kept changing under us")
