"""`gcd.rules.references`: which referenced keys M has passed."""

from __future__ import annotations

from gcd.rules.layout import KeyLayout
from gcd.rules.references import conflicts, pause_reason
from l0gc.contract.references import Reference

LAYOUT = KeyLayout.default("l0")


def refs(*keys: str) -> dict[str, Reference]:
    return {key: Reference("orders/3", 40 + i, key) for i, key in enumerate(keys)}


def test_only_keys_at_or_below_m_conflict_in_key_order() -> None:
    at, below, above = (
        LAYOUT.format(7, 12, "a"),
        LAYOUT.format(3, 9, "b"),
        LAYOUT.format(1, 13, "c"),
    )
    found = conflicts(refs(at, above, below, "l0/not-a-layout-key"), LAYOUT, 12)
    assert [(c.reference.key, c.epoch) for c in found] == sorted([(at, 12), (below, 9)])


def test_no_references_no_conflicts() -> None:
    assert conflicts({}, LAYOUT, 10**9) == []


def test_the_reason_names_the_partition_the_entry_the_key_and_the_runbook() -> None:
    key = LAYOUT.format(7, 12, "a")
    (first,) = conflicts(refs(key), LAYOUT, 12)
    reason = pause_reason(first, 3, 12)
    assert "'orders/3'" in reason
    assert "offset 40" in reason
    assert repr(key) in reason
    assert "2 more keys" in reason
    assert "M = 12" in reason
    assert "docs/references.md#a-reference-conflict" in reason
