"""Repairing a namespace's claims in its bucket: the namespace admin's tool.

Design notes: docs/internals/sweep.md, `gcd.sweep.claims`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from gcd.storage.objectstore import BucketStore
from gcd.sweep.binding import BindingConflict, ClaimTooLarge, read_claim_object
from l0gc.contract.binding import Binding, Claim, StorageTarget, claim_key, nested_root
from l0gc.errors import InvalidRecord
from l0gc.etcd.store import WatermarkStore

__all__ = ["ClaimRepair", "bound_target", "repair_claims"]

_log = structlog.get_logger("gcd.claims")
_SHOWN = 200  # bytes of a replaced claim shown in logs and output


@dataclass(frozen=True, slots=True)
class ClaimRepair:
    """What `repair_claims` did."""

    root_claim: str
    """The root's claim key."""
    rewritten: bool
    """True when the root's claim was rewritten from the binding."""
    previous: str | None = None
    """What the root's claim held before (the first bytes), None when it was absent."""
    removed: list[str] = field(default_factory=list)


async def bound_target(store: WatermarkStore) -> Binding:
    """The namespace's binding in etcd; BindingConflict when there is none or it does not
    decode (then `watermark namespace bind` is the repair, not this)."""
    raw, _ = await store.get_binding()
    if raw is None:
        raise BindingConflict(
            f"namespace {store.namespace} is not bound: bind it first "
            "(`watermark namespace bind --bucket B --root R`)"
        )
    try:
        return Binding.decode(raw)
    except InvalidRecord as exc:
        raise BindingConflict(
            f"namespace {store.namespace} has an unreadable binding ({exc}): bind again with "
            "--replace"
        ) from None


async def repair_claims(
    binding: Binding, objects: BucketStore, *, remove: Sequence[str] = (), force: bool = False
) -> ClaimRepair:
    """Rewrite the root's claim from `binding` if it differs; remove the nested claims in
    `remove` (see the module docstring). Every key in `remove` is checked before anything
    is written."""
    target: StorageTarget = binding.target
    for key in remove:
        await _check_removable(binding, objects, key, force=force)
    key = claim_key(target.root)
    wanted = binding.claim().encode()
    try:
        current = await read_claim_object(objects, key)
    except ClaimTooLarge:
        current = b"(larger than a claim)"
    rewritten = current != wanted
    if rewritten:
        await objects.put_object(key, wanted, if_absent=False)
        _log.warning(
            "gc.claim_repaired", claim=key, namespace=binding.namespace, previous=_shown(current)
        )
    for nested in remove:
        await objects.delete_batch([nested])
        _log.warning("gc.claim_removed", claim=nested, namespace=binding.namespace)
    return ClaimRepair(key, rewritten, _shown(current) if rewritten else None, list(remove))


async def _check_removable(
    binding: Binding, objects: BucketStore, key: str, *, force: bool
) -> None:
    root = binding.target.root
    if nested_root(key, root) is None:
        raise BindingConflict(
            f"--remove-claim {key!r}: not a claim object below {binding.target.describe()} "
            f"(it must end in /.l0gc-claim.json, strictly inside {root}/)"
        )
    try:
        raw = await read_claim_object(objects, key)
    except ClaimTooLarge:
        return
    if raw is None:
        raise BindingConflict(f"--remove-claim {key!r}: there is no such object")
    try:
        claim = Claim.decode(raw)
    except InvalidRecord:
        return  # not a claim l0gc wrote: junk, removable
    if not force:
        raise BindingConflict(
            f"--remove-claim {key!r} is a valid claim of {claim.describe()}: that namespace's "
            f"keys under {nested_root(key, root)}/ would become {binding.namespace}'s garbage; "
            "pass --force only if that namespace no longer exists"
        )


def _shown(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    text = raw[:_SHOWN].decode("utf-8", "replace")
    return text + ("..." if len(raw) > _SHOWN else "")
