"""An in-memory `KV` with etcd's semantics, for unit tests and the deterministic simulation.

Design notes: docs/internals/kernel.md, `l0gc.etcd.memory`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from l0gc.contract.kv import (
    Change,
    Compare,
    Delete,
    KeyValue,
    Put,
    RangeResult,
    TxnResult,
)
from l0gc.errors import EtcdUnavailable, LeaseExpired, WatchLost

__all__ = ["MAX_TXN_OPS", "MemoryKV"]

MAX_TXN_OPS = 128
"""etcd's default `--max-txn-ops`: compares and operations each, per transaction."""

_ENDPOINT = "memory"


@dataclass(slots=True)
class _Lease:
    ttl_s: int
    expires_at: float


class MemoryKV:
    """The `KV` protocol in memory; see the module docstring for what it models."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._revision = 1  # an empty etcd reports revision 1
        self._data: dict[str, KeyValue] = {}
        self._leases: dict[int, _Lease] = {}
        self._history: list[Change] = []
        self._compacted = 0
        self._lease_ids = itertools.count(0x1000)
        self.unavailable = False
        self.closed = False

    @property
    def revision(self) -> int:
        """The current store revision."""
        return self._revision

    def _enter(self) -> None:
        if self.unavailable:
            raise EtcdUnavailable(_ENDPOINT, "simulated outage")
        self.expire_leases()

    def expire_leases(self) -> int:
        """Expire every lease whose TTL has run out on the clock; return how many."""
        now = self._now()
        expired = [lease_id for lease_id, lease in self._leases.items() if lease.expires_at <= now]
        for lease_id in expired:
            self._drop_lease(lease_id)
        return len(expired)

    def _drop_lease(self, lease_id: int) -> None:
        del self._leases[lease_id]
        doomed = [key for key, kv in self._data.items() if kv.lease == lease_id]
        if doomed:
            self._revision += 1
            for key in doomed:
                del self._data[key]
                self._history.append(Change(key, None, self._revision))

    async def get(self, key: str) -> KeyValue | None:
        """The key's current value, or None."""
        self._enter()
        return self._data.get(key)

    async def range_prefix(self, prefix: str, *, revision: int = 0) -> RangeResult:
        """Every key starting with `prefix`, sorted by key, at the current revision (no
        history is kept: another `revision` is EtcdUnavailable, as a compacted one is)."""
        self._enter()
        if revision not in (0, self._revision):
            raise EtcdUnavailable(_ENDPOINT, f"revision {revision} is not kept in memory")
        items = tuple(self._data[key] for key in sorted(self._data) if key.startswith(prefix))
        return RangeResult(revision=self._revision, items=items)

    async def count(self, prefix: str, *, revision: int) -> int:
        """`l0gc.contract.kv.KeyChecks.count`, at the current revision only."""
        return len((await self.range_prefix(prefix, revision=revision)).items)

    async def changed_keys(self, prefix: str, *, revision: int, after: int) -> dict[str, int]:
        """`l0gc.contract.kv.KeyChecks.changed_keys`, at the current revision only."""
        items = (await self.range_prefix(prefix, revision=revision)).items
        return {item.key: item.mod_revision for item in items if item.mod_revision > after}

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Put | Delete]) -> TxnResult:
        """Apply all `ops` atomically (at one new revision) iff every compare holds."""
        self._enter()
        if len(compares) > MAX_TXN_OPS or len(ops) > MAX_TXN_OPS:
            raise ValueError(f"too many operations in txn request (limit {MAX_TXN_OPS})")
        keys = [op.key for op in ops]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate key given in txn request")
        for compare in compares:
            current = self._data.get(compare.key)
            if (0 if current is None else current.mod_revision) != compare.mod_revision:
                return TxnResult(succeeded=False, revision=self._revision)
        for op in ops:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise LeaseExpired(op.lease)
        changes = [op for op in ops if isinstance(op, Put) or op.key in self._data]
        if changes:
            self._revision += 1
        for op in changes:
            if isinstance(op, Delete):
                del self._data[op.key]
                self._history.append(Change(op.key, None, self._revision))
                continue
            self._history.append(Change(op.key, op.value, self._revision))
            previous = self._data.get(op.key)
            self._data[op.key] = KeyValue(
                key=op.key,
                value=op.value,
                mod_revision=self._revision,
                create_revision=self._revision if previous is None else previous.create_revision,
                lease=op.lease,
            )
        return TxnResult(succeeded=True, revision=self._revision)

    def compact(self, revision: int) -> None:
        """Forget the history before `revision`: a watch from below it ends (WatchLost)."""
        self._compacted = max(self._compacted, revision)
        self._history = [c for c in self._history if c.revision >= revision]

    async def watch_prefix(self, prefix: str, start_revision: int) -> _MemoryWatch:
        """Changes under `prefix` from `start_revision` on (see `l0gc.contract.kv`)."""
        self._enter()
        return _MemoryWatch(self, prefix, start_revision)

    def _changes(self, prefix: str, after: int) -> list[Change]:
        return [c for c in self._history if c.revision > after and c.key.startswith(prefix)]

    async def lease_grant(self, ttl_s: int) -> int:
        """A new lease that expires `ttl_s` seconds from now on the injected clock."""
        self._enter()
        if ttl_s < 1:
            raise ValueError(f"lease TTL must be >= 1 s, got {ttl_s}")
        lease_id = next(self._lease_ids)
        self._leases[lease_id] = _Lease(ttl_s=ttl_s, expires_at=self._now() + ttl_s)
        return lease_id

    async def lease_refresh(self, lease_id: int) -> bool:
        """Restart the lease's TTL; False when it has already expired or was revoked."""
        self._enter()
        lease = self._leases.get(lease_id)
        if lease is None:
            return False
        lease.expires_at = self._now() + lease.ttl_s
        return True

    async def lease_revoke(self, lease_id: int) -> None:
        """Drop a lease and every key attached to it (no-op when already gone)."""
        self._enter()
        if lease_id in self._leases:
            self._drop_lease(lease_id)

    async def close(self) -> None:
        """Nothing to release; recorded for tests."""
        self.closed = True


class _MemoryWatch:
    """A watch on a `MemoryKV`: each sync returns the history since the previous one."""

    def __init__(self, kv: MemoryKV, prefix: str, start_revision: int) -> None:
        self._kv = kv
        self._prefix = prefix
        self._seen = start_revision - 1
        self.answered = 0
        """The revision at the last sync (`l0gc.contract.kv.PrefixWatch`)."""
        self.closed = False

    async def sync(self) -> tuple[list[Change], int]:
        """Changes since the last sync, and the current revision."""
        kv = self._kv
        if self.closed or kv.unavailable:
            raise WatchLost(_ENDPOINT, f"watch {self._prefix}: simulated outage")
        if self._seen + 1 < kv._compacted:
            raise WatchLost(_ENDPOINT, f"watch {self._prefix}: compacted at {kv._compacted}")
        changes = kv._changes(self._prefix, self._seen)
        self._seen = self.answered = kv.revision
        return changes, kv.revision

    async def close(self) -> None:
        """End the watch."""
        self.closed = True
