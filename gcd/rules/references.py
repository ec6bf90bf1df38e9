"""Reference conflicts: keys at or below M that a partition still references (pure).

Design notes: docs/internals/rules.md, `gcd.rules.references`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gcd.rules.layout import KeyLayout
from l0gc.contract.references import Reference

__all__ = ["MAX_CONFLICTS_SHOWN", "Conflict", "conflicts", "pause_reason"]

MAX_CONFLICTS_SHOWN = 10
"""Conflicting keys a round's summary names; the rest are counted."""


@dataclass(frozen=True, slots=True)
class Conflict:
    """`reference`'s key has `epoch`, at or below the M a round was about to use."""

    reference: Reference
    epoch: int

    def fields(self, safe_epoch: int) -> dict[str, object]:
        """The conflict as log fields (`sweep.reference_conflict`, `spark.reference_conflict`)."""
        ref = self.reference
        return {
            "partition": ref.partition,
            "offset": ref.offset,
            "key": ref.key,
            "epoch": self.epoch,
            "safe_epoch": safe_epoch,
        }


def conflicts(
    references: Mapping[str, Reference], layout: KeyLayout, safe_epoch: int
) -> list[Conflict]:
    """Every referenced key the layout parses with an epoch at or below `safe_epoch`, in
    key order. Any one means M is wrong: a writer still needs an object M calls garbage.
    (A referenced key the layout does not parse is never deleted; `gcd scrub` reports it.)"""
    found = []
    for key in sorted(references):
        parsed = layout.parse(key)
        if parsed is not None and parsed.epoch <= safe_epoch:
            found.append(Conflict(references[key], parsed.epoch))
    return found


def pause_reason(first: Conflict, count: int, safe_epoch: int) -> str:
    """The pause reason the fleet brake stores: the partition, the entry, the key."""
    ref = first.reference
    more = f" (and {count - 1} more keys)" if count > 1 else ""
    return (
        f"reference conflict: partition {ref.partition!r}'s entry at offset {ref.offset} still "
        f"references {ref.key!r} (epoch {first.epoch}){more}, at or below M = {safe_epoch}: "
        "M is wrong (a reconciler that reported past an entry it had not lifted?); nothing "
        "was deleted. Fix the writer, then `gcd resume` (docs/references.md#a-reference-conflict)"
    )
