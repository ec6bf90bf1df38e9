"""A long-running sweeper's view of the namespace: one full read, then an etcd watch.

Design notes: docs/internals/kernel.md, `l0gc.etcd.follow`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Literal

import structlog

from l0gc.contract.gcindex import GcIndex, NamespaceKeys
from l0gc.contract.kv import Change, KeyChecks, PrefixWatch
from l0gc.contract.namespace import pause_reason
from l0gc.contract.safe_epoch import GcView, PartitionSummary, SafeEpoch, judge
from l0gc.errors import EtcdUnavailable
from l0gc.etcd.store import WatermarkStore

__all__ = ["DEFAULT_VERIFY_EVERY", "FULL_CHECK_EVERY", "GcFollower", "ReadKind", "read_once"]

DEFAULT_VERIFY_EVERY = 30
"""Reads between two checks of the index (a daemon: at most one check per 30 rounds'
`--interval`, 5 min at 10 s)."""
FULL_CHECK_EVERY = 30
"""Checks between two that read the namespace in full (the others read keys only): at the
defaults, a daemon's every 2.5 h.
The full read finds what keys and revisions cannot (the index applying a change wrong);
at 1M records it costs ~12 s of CPU, so more often would cost an idle daemon > 1 % of a
core."""
ReadKind = Literal["full", "incremental", "checked", "verified", "mismatch"]
_log = structlog.get_logger("watermark.gcfollow")


def empty_index(store: WatermarkStore) -> GcIndex:
    """An index of `store`'s namespace to hand a full read to (`read_gc_into`)."""
    return GcIndex.empty(_namespace_keys(store), pause_reason)


def _namespace_keys(store: WatermarkStore) -> NamespaceKeys:
    return NamespaceKeys(
        epoch=store.epoch_key,
        partitions=store.partitions_prefix,
        paused=store.paused_key,
        binding=store.binding_key,
        sweepers=store.sweepers_prefix,
    )


async def read_once(store: WatermarkStore) -> tuple[GcView, SafeEpoch]:
    """One full read, page by page into a compact index, and M: what
    `read_gc_view` + `compute_safe_epoch` give, without holding every record at once
    (a one-shot `gcd sweep`; ~940 -> ~380 MiB peak at 1M records, bench/RESULTS.md
    section 20). No watch is opened."""
    index = empty_index(store)
    await store.read_gc_into(index)
    return index.view(), index.safe_epoch()


class GcFollower:
    """See the module docstring."""

    def __init__(
        self,
        store: WatermarkStore,
        *,
        verify_every: int = DEFAULT_VERIFY_EVERY,
        check_interval_s: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if verify_every < 1:
            raise ValueError(f"verify_every must be >= 1, got {verify_every}")
        if not check_interval_s >= 0:
            raise ValueError(f"check_interval_s must be >= 0, got {check_interval_s}")
        self.store = store
        self.verify_every = verify_every
        self.check_interval_s = check_interval_s
        self._monotonic = monotonic
        self._check_due = False  # a verify_every-th read came; waiting for check_interval_s
        self._checked_when = monotonic()
        self._keys = _namespace_keys(store)
        self._index: GcIndex | None = None
        self._watch: PrefixWatch | None = None
        self._reads = 0
        self._checks = 0
        self._checked_at = 0  # the revision the index was last read or checked in full at
        self._changed: dict[str, int] = {}  # key -> its last change since (-revision: deleted)
        self.last_kind: ReadKind | None = None
        """How the last read was made (for metrics and tests)."""
        self.changes_applied = 0

    async def read(self) -> tuple[GcView, SafeEpoch]:
        """The namespace view (without its partition records) and M, at one revision;
        EtcdUnavailable when etcd cannot be read at all."""
        self._reads += 1
        if self._index is None or self._watch is None:
            return await self._full()
        try:
            changes, revision = await self._watch.sync()
        except EtcdUnavailable as exc:
            _log.warning("watermark.watch_lost", namespace=self.store.namespace, error=str(exc))
            await self.close()
            return await self._full()
        self._index.apply(changes)
        # every change up to the revision the watch vouches for has come: the index is
        # etcd's at it (on etcd before 3.5.13, its last change's: `l0gc.etcd.watch`)
        self._index.revision = max(self._index.revision, revision)
        self.changes_applied += len(changes)
        self._note(changes)
        if self._reads % self.verify_every == 0:
            self._check_due = True
        if self._check_due and self._monotonic() - self._checked_when >= self.check_interval_s:
            return await self._check(self._index)
        self.last_kind = "incremental"
        return self._index.view(), self._index.safe_epoch()

    def _note(self, changes: list[Change]) -> None:
        for change in changes:
            deleted = change.value is None
            self._changed[change.key] = -change.revision if deleted else change.revision

    def _checked(self, index: GcIndex) -> None:
        """The index holds what etcd did at its revision: the next check starts there."""
        self._checked_at = index.revision
        self._changed = {}
        self._check_due = False
        self._checked_when = self._monotonic()

    async def _check(self, index: GcIndex) -> tuple[GcView, SafeEpoch]:
        self._checks += 1
        if self._checks % FULL_CHECK_EVERY and isinstance(self.store.kv, KeyChecks):
            # First at etcd's last progress answer where it is ahead of the index (an
            # etcd before 3.5.13: `l0gc.etcd.watch`); a pass there proves the index is
            # etcd's at it, so a quiet namespace's index moves on. A change still on its
            # way fails that check without being lost: then the index's own revision.
            answered = 0 if self._watch is None else self._watch.answered
            ahead = (answered,) if answered > index.revision else ()
            for revision in (*ahead, index.revision):
                try:
                    differs = await self._quick(self.store.kv, index, revision)
                except EtcdUnavailable as exc:  # e.g. too many changed keys for one answer
                    differs = f"the keys-only check failed: {exc}"
                if differs is None:
                    index.revision = revision
                    self._checked(index)
                    self.last_kind = "checked"
                    return index.view(), index.safe_epoch()
            _log.warning(
                "watermark.quick_check_differs",
                namespace=self.store.namespace,
                revision=index.revision,
                differs=differs,
            )
        return await self._verify(index)  # the full read decides

    async def _quick(self, kv: KeyChecks, index: GcIndex, revision: int) -> str | None:
        """None when etcd at `revision` (the index's, or a later one the watch may not
        have caught up to) holds what the index does, judged by keys and revisions (see
        the module docstring); else what differs."""
        partitions = self.store.partitions_prefix
        held = index.record_count()
        count = await kv.count(partitions, revision=revision)
        if count != held:
            return f"etcd holds {count} partition records, the index {held}"
        changed = await kv.changed_keys(partitions, revision=revision, after=self._checked_at)
        given = {
            key: at for key, at in self._changed.items() if at > 0 and key.startswith(partitions)
        }
        if changed != given:
            key = min(set(changed.items()) ^ set(given.items()))[0]
            return f"the record {key!r} changed at a revision the watch did not give"
        small = GcIndex.empty(self._keys, pause_reason)
        small.start(revision, 0)
        small.add(await self.store.read_small_keys(revision=revision))
        return index.small_keys_differ(small.view())

    async def _full(self) -> tuple[GcView, SafeEpoch]:
        index = GcIndex.empty(self._keys, pause_reason)
        await self.store.read_gc_into(index)  # page by page: the records are never all held
        self._index = index
        self._checked(index)
        self.last_kind = "full"
        kv = self.store.kv
        if hasattr(kv, "watch_prefix"):
            try:
                self._watch = await kv.watch_prefix(self.store.namespace + "/", index.revision + 1)
            except EtcdUnavailable as exc:  # the next read is a full one again
                _log.warning(
                    "watermark.watch_failed", namespace=self.store.namespace, error=str(exc)
                )
        return index.view(), index.safe_epoch()  # the index decoded every record once

    async def _verify(self, index: GcIndex) -> tuple[GcView, SafeEpoch]:
        check = index.checker()
        try:
            await self.store.read_gc_into(check, revision=index.revision)
        except EtcdUnavailable as exc:  # e.g. that revision was compacted: start afresh
            _log.warning(
                "watermark.verify_read_failed",
                namespace=self.store.namespace,
                revision=index.revision,
                error=str(exc),
            )
            await self.close()
            return await self._full()
        differs = check.differs()
        if differs is None:
            self._checked(index)
            self.last_kind = "verified"
            return index.view(), index.safe_epoch()
        self.last_kind = "mismatch"
        _log.error(
            "watermark.index_mismatch",
            namespace=self.store.namespace,
            revision=index.revision,
            differs=differs,
        )
        await self.close()
        full = check.read.view()
        blocked = dataclasses.replace(
            judge(full, PartitionSummary(check.records)),
            safe_epoch=None,
            blocked_reason=(
                f"the watched view of the namespace differs from a full read at revision "
                f"{index.revision} ({differs}): this round is blocked and the view rebuilt "
                "from a full read (report it: it is a bug or lost etcd history)"
            ),
        )
        return full, blocked

    async def close(self) -> None:
        """Cancel the watch; the next read is a full one."""
        watch, self._watch, self._index = self._watch, None, None
        if watch is not None:
            await watch.close()
