"""Binding a namespace to its bucket and root: the I/O around `l0gc.contract.binding`.

Design notes: docs/internals/sweep.md, `gcd.sweep.binding`.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import structlog

from gcd.rules.listguard import DEFAULT_MAX_PAGES, ListingGuard
from gcd.storage.objectstore import BucketStore
from gcd.storage.retry import REQUEST_DEADLINE_S, deadline
from gcd.sweep.shards import ShardAnnouncement, check_shards
from l0gc.contract.binding import (
    Binding,
    Claim,
    StorageTarget,
    ancestor_roots,
    check_ancestor_claims,
    check_binding,
    claim_key,
    nested_root,
    overlap_conflict,
)
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.contract.spark_job import SparkJob, spark_job_key
from l0gc.errors import LISTING_BROKEN, ConfigError, InvalidRecord, StorageError
from l0gc.etcd.follow import GcFollower, read_once
from l0gc.etcd.store import WatermarkStore

__all__ = [
    "BindOutcome",
    "BindingConflict",
    "BoundSource",
    "ClaimTooLarge",
    "bind_namespace",
    "find_nested_claims",
    "read_ancestor_claims",
    "read_claim_object",
]

_log = structlog.get_logger("gcd.binding")

CLAIM_MAX_BYTES = 16 * 1024
_PROGRESS_PAGES = 100  # a bind over a root of 1M keys lists 1,000 pages
_MAX_BIND_PAGES = 100 * DEFAULT_MAX_PAGES  # 10G keys: only a store inventing tokens gets here


class BindingConflict(ConfigError):
    """The namespace or the root is bound elsewhere; the message names both sides."""


class ClaimTooLarge(BindingConflict):
    """An object at a claim key too big to be a claim; the message says what to do."""


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """What `bind_namespace` did."""

    binding: Binding
    changed: bool
    replaced: Binding | None = None


async def bind_namespace(
    store: WatermarkStore,
    objects: BucketStore,
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
    await _refuse_nesting(objects, namespace, cluster_id, target)
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
        # Two binds of nested roots at one moment both pass the check above (neither claim
        # exists yet). Checking again once ours is written closes that: of two racing
        # binds, the later check sees the earlier claim, so at most one keeps its claim.
        try:
            await _refuse_nesting(objects, namespace, cluster_id, target)
        except BindingConflict as exc:
            await objects.delete_batch([key])
            raise BindingConflict(
                f"{exc} (a bind of that root ran at the same moment; this one took its claim "
                "back: if that bind failed too, run this one again)"
            ) from None
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
            raise BindingConflict(
                f"namespace {namespace}'s binding changed while binding; run it again"
            )
        changed = True
    return BindOutcome(binding, changed, existing if existing is not binding else None)


async def _refuse_nesting(
    objects: BucketStore, namespace: str, cluster_id: str, target: StorageTarget
) -> None:
    """BindingConflict when `target.root` lies inside or contains another claimed root."""
    above = await read_ancestor_claims(objects, target.root)
    problem = check_ancestor_claims(namespace, cluster_id, target, above)
    if problem is None:
        below = await find_nested_claims(objects, target.root)
        if below:
            root, raw = min(below.items())
            problem = overlap_conflict(namespace, target, root, raw, inside=False)
    if problem is not None:
        raise BindingConflict(problem)


async def read_claim_object(objects: BucketStore, key: str) -> bytes | None:
    """The claim object at `key` (None: absent); one that is too big to be a claim is
    refused with a message that says so (ClaimTooLarge), not as a storage failure. The
    answer is read within `REQUEST_DEADLINE_S`, as every claim request here is."""
    try:
        async with deadline(REQUEST_DEADLINE_S, f"reading the claim {key}"):
            raw = await objects.get_object(key, max_bytes=CLAIM_MAX_BYTES)
    except StorageError as exc:
        if exc.code != "EntityTooLarge":
            raise
        raw = None
        too_big = True
    else:
        too_big = raw is not None and len(raw) > CLAIM_MAX_BYTES
    if too_big:
        raise ClaimTooLarge(
            f"the claim object {key} is larger than {CLAIM_MAX_BYTES} bytes, so l0gc did not "
            "write it (a claim is a few hundred bytes of JSON): find out who wrote it; if no "
            "namespace owns this root, delete it and bind again (docs/operations.md"
            "#binding-a-namespace)"
        )
    return raw


async def read_ancestor_claims(objects: BucketStore, root: str) -> dict[str, bytes]:
    """The claim objects at `root`'s proper ancestors (`ancestor_roots`), by root: one
    one-key LIST of each ancestor's claim key (allowed by a prefix-scoped s3:ListBucket,
    absent keys need no s3:GetObject), and a GET only of a claim that is there."""
    found: dict[str, bytes] = {}
    for ancestor in ancestor_roots(root):
        key = claim_key(ancestor)
        async with deadline(REQUEST_DEADLINE_S, f"looking for the claim {key}"):
            page = await objects.list_page(key, max_keys=1)
        if page.objects and page.objects[0].key == key:
            raw = await read_claim_object(objects, key)
            if raw is not None:
                found[ancestor] = raw
    return found


async def find_nested_claims(objects: BucketStore, root: str) -> dict[str, bytes]:
    """The claim objects strictly below `root`, by the root they claim: one listing of
    `root/` (a LIST per 1,000 keys, each answer read within `REQUEST_DEADLINE_S`;
    progress logged every `_PROGRESS_PAGES` pages), a GET of each claim found. A store
    that sends the listing back to a continuation token it gave before
    (`gcd.rules.listguard`) would be paged through forever: that stops the bind with a
    StorageError; not knowing what lies below is never taken as nothing."""
    found: dict[str, bytes] = {}
    token: str | None = None
    guard = ListingGuard(max_pages=_MAX_BIND_PAGES)
    listed = 0
    while True:
        async with deadline(REQUEST_DEADLINE_S, f"listing {root}/ for nested claims"):
            page = await objects.list_page(root + "/", continuation_token=token)
        listed += len(page.objects)
        for obj in page.objects:
            nested = nested_root(obj.key, root)
            if nested is not None:
                found[nested] = await read_claim_object(objects, obj.key) or b""
        if page.next_token is None:
            return found
        token = page.next_token
        broken = guard.advance(None, token)
        if broken is not None:
            raise StorageError(
                f"listing {root}/ for claims of nested roots: {broken}; the store is not "
                "listing correctly, so the bind cannot tell whether another namespace "
                "claims a root below: fix the store (or the proxy before it) and bind again",
                LISTING_BROKEN,
                retryable=False,
            )
        if guard.pages % _PROGRESS_PAGES == 0:
            _log.info(
                "bind.listing", root=root, pages=guard.pages, keys=listed, claims_found=len(found)
            )


async def _read_claim(objects: BucketStore, target: StorageTarget) -> Claim | None:
    key = claim_key(target.root)
    try:
        raw = await read_claim_object(objects, key)
    except ClaimTooLarge as exc:
        raise BindingConflict(f"{target.describe()}: {exc}") from None
    if raw is None:
        return None
    try:
        return Claim.decode(raw)
    except InvalidRecord as exc:
        raise BindingConflict(
            f"{target.describe()} holds an unreadable claim {key} ({exc}); find out who wrote "
            "it, and delete it by hand only if no namespace owns this root"
        ) from None


RECHECK_FIRST_S = 2.0
RECHECK_MAX_S = 60.0
"""A peek re-reads claims last found wrong or unreadable after 2 s, then 4, 8, ... at
most every 60 s while they stay so (`BoundSource.peek_safe_epoch`)."""


@dataclass(eq=False)
class BoundSource:
    """M from one etcd revision, refused unless the namespace is bound to `target`."""

    store: WatermarkStore
    target: StorageTarget
    objects: BucketStore
    _: KW_ONLY
    shard: ShardAnnouncement | None = None
    follower: GcFollower | None = None
    """Reads M through an etcd watch when set (`l0gc.etcd.follow`), else in full."""
    clock: Callable[[], float] = time.monotonic
    _claims: tuple[bytes | None, dict[str, bytes]] | None = field(default=None, init=False)
    """The root's and the ancestors' claims as last read, while they were in order."""
    _wrong: tuple[bytes | None, dict[str, bytes]] | str | None = field(default=None, init=False)
    """The claims last read when they were not in order (or why they could not be
    read), judged again by peeks until `_recheck_at`."""
    _recheck_at: float = field(default=0.0, init=False)
    _recheck_s: float = field(default=0.0, init=False)

    def _found_wrong(self, wrong: tuple[bytes | None, dict[str, bytes]] | str) -> None:
        """Claims just read and found wrong (or unreadable): peeks judge them as read
        until the next recheck, which backs off while they stay so."""
        self._wrong = wrong
        self._recheck_s = min(RECHECK_MAX_S, max(RECHECK_FIRST_S, 2 * self._recheck_s))
        self._recheck_at = self.clock() + self._recheck_s

    def _unreadable(self, read: SafeEpoch, why: str) -> SafeEpoch:
        """`read` refused because the claims could not be read (backed off as wrong)."""
        self._found_wrong(why)
        return dataclasses.replace(read, refused_reason=why)

    async def set_paused(self, reason: str) -> None:
        """Pause GC in the namespace (`gcd pause`), e.g. on a reference conflict."""
        await self.store.set_paused(reason)

    async def get_paused(self) -> str | None:
        """The pause reason (None: not paused), for the sweeper's brake (`gcd.sweep.brake`)."""
        return await self.store.get_paused()

    async def read_safe_epoch(self) -> SafeEpoch:
        """`WatermarkStore.read_safe_epoch`, with `refused_reason` set on any mismatch;
        the root's claim and its ancestors' claims are read now (a GET and one LIST
        each). Every round that may delete is admitted through this."""
        return await self._read(fresh_claims=True)

    async def peek_safe_epoch(self) -> SafeEpoch:
        """`read_safe_epoch` for a decision that deletes nothing (a daemon's looks between
        rounds, and its check whether a round would list at all): the claims the last
        read found in order are judged again against this read's binding, without a
        request to the store. Claims never read are read now; claims last found wrong or
        unreadable are read again after `RECHECK_FIRST_S`, doubling to `RECHECK_MAX_S`
        while they stay so (a daemon blocked by a claim, e.g. pointed at another endpoint
        than its binding names, sent a GET and a LIST per look, about one a second, for
        as long as it stayed blocked: issue 55), and judged as last read in between; a
        repair is seen within a minute.

        Why this is safe: a claim only matters to a delete, and every round that lists
        (the only rounds that delete) is admitted by `read_safe_epoch`, which reads the
        claims first, as before; a claim below the root is found by the round's own
        listing (`gcd.sweep.nesting`). So a new claim above or at the root is honoured
        before any delete it protects, exactly as when every look read it; only gauges
        and the decision to wake may lag a claim change until the next round.
        """
        return await self._read(fresh_claims=False)

    async def _read(self, *, fresh_claims: bool) -> SafeEpoch:
        if self.follower is not None:
            view, read = await self.follower.read()
        else:
            view, read = await read_once(self.store)
        claim_raw: bytes | None = None
        above: dict[str, bytes] = {}
        read_now = False
        if view.binding_raw is not None:
            if not fresh_claims and self._claims is not None:
                claim_raw, above = self._claims
            elif not fresh_claims and self._wrong is not None and (self.clock() < self._recheck_at):
                if isinstance(self._wrong, str):
                    return dataclasses.replace(read, refused_reason=self._wrong)
                claim_raw, above = self._wrong
            else:
                self._claims, read_now = None, True
                try:
                    claim_raw = await read_claim_object(self.objects, claim_key(self.target.root))
                    above = await read_ancestor_claims(self.objects, self.target.root)
                except ClaimTooLarge as exc:
                    return self._unreadable(read, f"{self.target.describe()}: {exc}")
                except StorageError as exc:
                    return self._unreadable(
                        read, f"cannot read the claims of {self.target.describe()}: {exc}"
                    )
        reason = check_binding(
            self.store.namespace, view.binding_raw, view.cluster_id, self.target, claim_raw
        )
        if reason is None:
            reason = check_ancestor_claims(
                self.store.namespace, view.cluster_id, self.target, above
            )
        if view.binding_raw is not None:
            self._claims = (claim_raw, above) if reason is None else None
            if reason is None:
                self._wrong, self._recheck_s = None, 0.0
            elif read_now:
                self._found_wrong((claim_raw, above))
        if reason is None and self.shard is not None:
            reason = check_shards(self.shard, view.sweepers)
        if reason is None and fresh_claims:
            reason = await self._spark_job()
        return read if reason is None else dataclasses.replace(read, refused_reason=reason)

    async def _spark_job(self) -> str | None:
        """Why a round may not delete while a Spark job sweeps the namespace (None: no
        job): the namespace's deletes come from one kind of sweeper at a time, so the
        job's rate is the namespace's (`gcd.spark.budget`). An unreadable record refuses
        too (fail closed), naming the key to delete."""
        key = spark_job_key(self.store.namespace)
        found = await self.store.kv.get(key)
        if found is None:
            return None
        try:
            job = SparkJob.decode(found.value)
        except ValueError as exc:
            return (
                f"the Spark job record {key} cannot be read ({exc}); if no Spark job runs, "
                f"delete it: etcdctl del {key}"
            )
        return (
            f"a Spark job is sweeping this namespace: {job.describe()}; this sweeper deletes "
            "again once it ends (one sweeper kind at a time shares the namespace's rate)"
        )
