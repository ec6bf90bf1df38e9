"""The deletion rule: may the sweeper delete this object? (pure, no I/O)

This one function is THE rule. The async sweeper, the Spark pipeline and the
simulation all call it, so it takes plain values (the key, its LastModified as epoch
seconds, the layout, the safe epoch M, "now" and the grace period) and returns a
verdict. It reads no clock and does no I/O.

An object is deleted only when all of these hold, checked in this order:

1. the key is under the layout's root (``OUTSIDE_ROOT`` otherwise);
2. the key parses with the layout (``UNPARSABLE`` otherwise: never deleted, reported);
3. its epoch is at or below M (``NOT_ELIGIBLE`` otherwise);
4. no partition's unreleased entry references it (``REFERENCED`` otherwise: a key at or
   below M that a writer still references means M is wrong; the sweeper keeps it and
   pauses GC, docs/references.md);
5. it is older than the grace period: ``now - last_modified > grace`` (``TOO_YOUNG``
   otherwise; a LastModified in the future is too young, whatever the grace).

`deletable_epochs` applies the same rule to a listed page at once (the sweeper's hot
path): for each key, its epoch when `decide` says DELETE, else -1, so that only the keys
kept are asked of `decide` one by one, for their reason.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Sequence

from gcd.rules.layout import KeyLayout, ParsedKey

__all__ = ["Verdict", "decide", "deletable_epochs"]


class Verdict(enum.Enum):
    """What the sweeper does with one listed object."""

    DELETE = "delete"
    NOT_ELIGIBLE = "not_eligible"
    TOO_YOUNG = "too_young"
    UNPARSABLE = "unparsable"
    OUTSIDE_ROOT = "outside_root"
    REFERENCED = "referenced"


def decide(  # noqa: PLR0917 - the shared rule's signature, called positionally everywhere
    key: str,
    last_modified_s: float,
    layout: KeyLayout,
    safe_epoch: int,
    now_s: float,
    grace_s: float,
    *,
    referenced: Container[str] = frozenset(),
) -> tuple[Verdict, ParsedKey | None]:
    """The verdict for one object, and its parsed key when it parsed; `referenced`: the
    keys partitions still reference (`l0gc.contract.references`)."""
    if not key.startswith(layout.listing_root):
        return Verdict.OUTSIDE_ROOT, None
    parsed = layout.parse(key)
    if parsed is None:
        return Verdict.UNPARSABLE, None
    if parsed.epoch > safe_epoch:
        return Verdict.NOT_ELIGIBLE, parsed
    if key in referenced:
        return Verdict.REFERENCED, parsed
    if not now_s - last_modified_s > grace_s:
        return Verdict.TOO_YOUNG, parsed
    return Verdict.DELETE, parsed


def deletable_epochs(  # noqa: PLR0917 - `decide`'s signature, a page at a time
    keys: Sequence[str],
    last_modified_s: Sequence[float],
    layout: KeyLayout,
    safe_epoch: int,
    now_s: float,
    grace_s: float,
    *,
    referenced: Container[str] = frozenset(),
) -> list[int]:
    """For each key (with its LastModified), its epoch when `decide` says DELETE, else -1.

    The same five conditions, the same comparisons (tests/gcd/rules/test_decision.py
    holds it equal to `decide` key by key); the layout reads the keys at once
    (`KeyLayout.parse_epochs`), and no verdict or parsed key is made per key."""
    epochs = layout.parse_epochs(keys)
    if not referenced:
        return [
            epoch if 0 <= epoch <= safe_epoch and now_s - modified > grace_s else -1
            for epoch, modified in zip(epochs, last_modified_s, strict=True)
        ]
    return [
        epoch
        if 0 <= epoch <= safe_epoch and key not in referenced and now_s - modified > grace_s
        else -1
        for key, epoch, modified in zip(keys, epochs, last_modified_s, strict=True)
    ]
