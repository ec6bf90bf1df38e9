"""Binding a namespace to its bucket and root: the I/O around `watermark.core.binding`.

`bind_namespace` writes both sides of a binding (the claim object in the bucket first,
created only if absent, then `{ns}/binding` by compare-and-swap); it is idempotent, and
it resumes a bind that was interrupted between the two writes. `BoundSource` is the
watermark source every sweeping command reads M through: it adds, from the same etcd
revision, the binding check (and, for sweepers that announce a shard, the shard check),
so a sweeper pointed at storage its namespace is not bound to deletes nothing.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gcd.errors import StorageError
from gcd.sweep.shards import ShardAnnouncement, check_shards
from watermark.core.binding import Binding, Claim, StorageTarget, check_binding, claim_key
from watermark.core.safe_epoch import SafeEpoch, compute_safe_epoch
from watermark.errors import ConfigError, InvalidRecord
from watermark.etcd.follow import GcFollower
from watermark.etcd.store import WatermarkStore

__all__ = ["BindOutcome", "BindingConflict", "BoundSource", "ClaimStore", "bind_namespace"]

CLAIM_MAX_BYTES = 16 * 1024


class ClaimStore(Protocol):
    """The two object calls a binding needs (`S3ObjectStore`, `MemoryObjectStore`)."""

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """A small object's body, or None when absent."""
        ...

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write a small object; with `if_absent`, False when the key already exists."""
        ...


class BindingConflict(ConfigError):
    """The namespace or the root is bound elsewhere; the message names both sides."""


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """What `bind_namespace` did."""

    binding: Binding
    changed: bool
    replaced: Binding | None = None


async def bind_namespace(
    store: WatermarkStore,
    objects: ClaimStore,
    target: StorageTarget,
    *,
    replace: bool = False,
    clock: Callable[[], float] = time.time,
) -> BindOutcome:
    """Bind `store`'s namespace to `target` (see the module docstring); BindingConflict if not."""
    namespace = store.namespace
    raw, revision = await store.get_binding()
    existing: Binding | None = None
    if raw is not None:
        try:
            existing = Binding.decode(raw)
        except InvalidRecord as exc:
            if not replace:
                raise BindingConflict(
                    f"namespace {namespace} has an unreadable binding ({exc}); inspect it, "
                    "then bind again with --replace"
                ) from None
    cluster_id = await store.cluster_id() or "unknown"
    key = claim_key(target.root)
    claim = await _read_claim(objects, target)
    if claim is not None and claim.namespace != namespace:
        raise BindingConflict(
            f"{target.describe()} is already claimed by {claim.describe()} ({key}); a root "
            f"belongs to one namespace: bind {namespace} to another root or bucket"
        )
    same = existing is not None and (existing.target, existing.cluster_id) == (target, cluster_id)
    if existing is not None and not same and not replace:
        raise BindingConflict(
            f"namespace {namespace} is already bound to {existing.target.describe()} in etcd "
            f"cluster {existing.cluster_id}; to move it to {target.describe()} in etcd cluster "
            f"{cluster_id}, bind again with --replace"
        )
    if same:
        assert existing is not None
        binding = existing
    elif existing is None and claim is not None and claim.cluster_id == cluster_id:
        # An earlier bind wrote the claim and stopped before etcd: finish it.
        binding = Binding(namespace, target, claim.binding_id, cluster_id, claim.claimed_at)
    else:
        binding = Binding(namespace, target, secrets.token_hex(8), cluster_id, clock())
    changed = False
    if claim is None:
        if not await objects.put_object(key, binding.claim().encode(), if_absent=True):
            raise BindingConflict(f"{target.describe()} was claimed while binding; run it again")
        changed = True
    elif claim.binding_id != binding.binding_id:
        if not replace:
            raise BindingConflict(
                f"{target.describe()} is claimed by an older binding of this namespace: "
                f"{claim.describe()}; if this etcd cluster replaces that one, bind again "
                "with --replace"
            )
        await objects.put_object(key, binding.claim().encode(), if_absent=False)
        changed = True
    if raw != binding.encode():
        if not await store.put_binding(binding.encode(), expected_revision=revision):
            raise BindingConflict(f"namespace {namespace}'s binding changed while binding; "
                                  "run it again")  # fmt: skip
        changed = True
    return BindOutcome(binding, changed, existing if existing is not binding else None)


async def _read_claim(objects: ClaimStore, target: StorageTarget) -> Claim | None:
    key = claim_key(target.root)
    raw = await objects.get_object(key, max_bytes=CLAIM_MAX_BYTES)
    if raw is None:
        return None
    try:
        return Claim.decode(raw)
    except InvalidRecord as exc:
        raise BindingConflict(
            f"{target.describe()} holds an unreadable claim {key} ({exc}); find out who wrote "
            "it, and delete it by hand only if no namespace owns this root"
        ) from None


class BoundSource:
    """M from one etcd revision, refused unless the namespace is bound to `target`."""

    def __init__(
        self,
        store: WatermarkStore,
        target: StorageTarget,
        objects: ClaimStore,
        *,
        shard: ShardAnnouncement | None = None,
        follower: GcFollower | None = None,
    ) -> None:
        self.store = store
        self.target = target
        self.objects = objects
        self.shard = shard
        self.follower = follower
        """Reads M through an etcd watch when set (`watermark.etcd.follow`), else in full."""

    async def get_paused(self) -> str | None:
        """The pause reason (None: not paused), for the sweeper's brake (`gcd.sweep.brake`)."""
        return await self.store.get_paused()

    async def read_safe_epoch(self) -> SafeEpoch:
        """`WatermarkStore.read_safe_epoch`, with `refused_reason` set on any mismatch."""
        if self.follower is not None:
            view, read = await self.follower.read()
        else:
            view = await self.store.read_gc_view()
            read = compute_safe_epoch(view)
        claim_raw: bytes | None = None
        if view.binding_raw is not None:
            try:
                claim_raw = await self.objects.get_object(
                    claim_key(self.target.root), max_bytes=CLAIM_MAX_BYTES
                )
            except StorageError as exc:
                unreadable = f"cannot read the claim {claim_key(self.target.root)}: {exc}"
                return dataclasses.replace(read, refused_reason=unreadable)
        reason = check_binding(
            self.store.namespace, view.binding_raw, view.cluster_id, self.target, claim_raw
        )
        if reason is None and self.shard is not None:
            reason = check_shards(self.shard, view.sweepers)
        return read if reason is None else dataclasses.replace(read, refused_reason=reason)
