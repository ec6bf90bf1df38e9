"""The deletion rule: exactly which objects may go."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gcd.rules.decision import Verdict, decide, deletable_epochs
from gcd.rules.layout import KeyLayout

LAYOUT = KeyLayout.default("level_zero/data")
NOW = 1_000_000.0
GRACE = 600.0
OLD = NOW - 3600


def key(prefix: int, epoch: int, name: str = "obj") -> str:
    return LAYOUT.format(prefix, epoch, name)


def test_old_key_at_or_below_safe_epoch_is_deleted() -> None:
    """Epochs <= M older than the grace period are deleted, with the parsed key."""
    for epoch in (0, 41, 42):
        verdict, parsed = decide(key(7, epoch), OLD, LAYOUT, 42, NOW, GRACE)
        assert verdict is Verdict.DELETE
        assert parsed is not None
        assert parsed.epoch == epoch


def test_epoch_above_safe_epoch_is_not_eligible() -> None:
    """An epoch above M is never deleted, however old."""
    verdict, parsed = decide(key(7, 43), 0.0, LAYOUT, 42, NOW, GRACE)
    assert verdict is Verdict.NOT_ELIGIBLE
    assert parsed is not None


def test_young_object_is_kept() -> None:
    """An object not older than the grace period is kept, including exactly at the edge."""
    assert decide(key(1, 1), NOW - 10, LAYOUT, 42, NOW, GRACE)[0] is Verdict.TOO_YOUNG
    assert decide(key(1, 1), NOW - GRACE, LAYOUT, 42, NOW, GRACE)[0] is Verdict.TOO_YOUNG
    assert decide(key(1, 1), NOW - GRACE - 0.001, LAYOUT, 42, NOW, GRACE)[0] is Verdict.DELETE


def test_future_or_nan_last_modified_is_too_young() -> None:
    """A LastModified in the future (clock skew) or NaN never makes an object deletable."""
    assert decide(key(1, 1), NOW + 5, LAYOUT, 42, NOW, 0.0)[0] is Verdict.TOO_YOUNG
    assert decide(key(1, 1), math.nan, LAYOUT, 42, NOW, 0.0)[0] is Verdict.TOO_YOUNG


def test_unparsable_and_outside_root_are_never_deleted() -> None:
    """Keys the layout could not have written, or outside the root, are reported, not deleted."""
    for bad in (
        "level_zero/data/7/000000000000000001/x",
        "level_zero/data/007/1/x",
        "level_zero/data/007/000000000000000001/",
        "level_zero/data/readme",
    ):
        assert decide(bad, OLD, LAYOUT, 10**9, NOW, 0.0) == (Verdict.UNPARSABLE, None)
    for outside in ("other/007/000000000000000001/x", "level_zero/database/007/x"):
        assert decide(outside, OLD, LAYOUT, 10**9, NOW, 0.0) == (Verdict.OUTSIDE_ROOT, None)


def test_negative_safe_epoch_deletes_nothing() -> None:
    """M = -1 (cluster epoch 0) makes even epoch 0 ineligible."""
    assert decide(key(0, 0), OLD, LAYOUT, -1, NOW, 0.0)[0] is Verdict.NOT_ELIGIBLE


@given(
    epoch=st.integers(0, 10**18 - 1),
    safe=st.integers(-1, 10**18),
    age=st.floats(-1e6, 1e6, allow_nan=False),
    grace=st.floats(0, 1e5, allow_nan=False),
)
def test_delete_iff_every_condition_holds(epoch: int, safe: int, age: float, grace: float) -> None:
    """DELETE exactly when epoch <= M and age > grace, for any parsable key."""
    verdict, _ = decide(key(123, epoch), NOW - age, LAYOUT, safe, NOW, grace)
    assert (verdict is Verdict.DELETE) == (epoch <= safe and NOW - (NOW - age) > grace)


def test_a_referenced_key_at_or_below_m_is_never_deleted() -> None:
    """The writer's second opinion: referenced wins over M; above M, M keeps it anyway."""
    live, other = key(7, 40), key(8, 40)
    assert decide(live, OLD, LAYOUT, 42, NOW, GRACE, referenced={live})[0] is Verdict.REFERENCED
    assert decide(other, OLD, LAYOUT, 42, NOW, GRACE, referenced={live})[0] is Verdict.DELETE
    young = key(7, 43)
    assert decide(young, OLD, LAYOUT, 42, NOW, GRACE, referenced={young})[0] is Verdict.NOT_ELIGIBLE
    verdict, parsed = decide(live, NOW, LAYOUT, 42, NOW, GRACE, referenced={live})
    assert verdict is Verdict.REFERENCED  # before the grace period: a conflict, not "young"
    assert parsed is not None
    assert parsed.epoch == 40


_NAMES = st.sampled_from(["x", "0b8e-uuid", " x", ".", "a/b", "-dash"])


@given(
    st.lists(
        st.tuples(
            st.integers(0, 999),
            st.integers(0, 60),
            _NAMES,
            st.floats(-120.0, 1200.0) | st.just(math.nan),
            st.booleans(),
        ),
        max_size=15,
    ),
    st.integers(-1, 60),
    st.floats(0, 600, allow_nan=False),
)
def test_a_page_decided_at_once_is_decided_as_key_by_key(
    rows: list[tuple[int, int, str, float, bool]], safe: int, grace: float
) -> None:
    """`deletable_epochs` gives a key's epoch exactly when `decide` says DELETE (every
    verdict among the rows: above M, young, NaN or future times, unparsable, referenced,
    outside the root), -1 otherwise."""
    keys = [
        f"level_zero/data/{prefix:03d}/{epoch:018d}/{name}" if name != "-dash" else f"x/{epoch}"
        for prefix, epoch, name, _, _ in rows
    ]
    times = [NOW - age for _, _, _, age, _ in rows]
    referenced = {key for key, row in zip(keys, rows, strict=True) if row[4]}
    for refs in (referenced, frozenset()):
        expected = []
        for key, modified in zip(keys, times, strict=True):
            verdict, parsed = decide(key, modified, LAYOUT, safe, NOW, grace, referenced=refs)
            expected.append(parsed.epoch if verdict is Verdict.DELETE and parsed else -1)
        got = deletable_epochs(keys, times, LAYOUT, safe, NOW, grace, referenced=refs)
        assert got == expected


def test_a_page_at_once_at_every_boundary() -> None:
    """`deletable_epochs` at the edges `decide` draws: epoch 0, epoch = M, M + 1, age =
    grace (kept), just older, NaN and future times, a referenced key, junk; with and
    without references."""
    epochs = (0, 40, 41, 40, 40, 40, 40)
    keys = [key(1, epoch, f"o{n}") for n, epoch in enumerate(epochs)] + ["junk", key(2, 0)]
    times = [OLD, OLD, OLD, NOW - GRACE, NOW - GRACE - 1, math.nan, NOW + 5, OLD, OLD]
    expected = [0, 40, -1, -1, 40, -1, -1, -1, 0]
    assert deletable_epochs(keys, times, LAYOUT, 40, NOW, GRACE) == expected
    referenced = {keys[1]}
    with_refs = [0, -1, -1, -1, 40, -1, -1, -1, 0]
    assert deletable_epochs(keys, times, LAYOUT, 40, NOW, GRACE, referenced=referenced) == (
        with_refs
    )
    assert deletable_epochs(keys, times, LAYOUT, -1, NOW, GRACE, referenced=referenced) == (
        [-1] * len(keys)
    )
    assert deletable_epochs(keys, times, LAYOUT, 0, NOW, GRACE, referenced=referenced) == (
        [0, -1, -1, -1, -1, -1, -1, -1, 0]
    )


def test_a_page_with_fewer_times_than_keys_is_refused() -> None:
    """A caller's slip (a time missing) raises; it never decides a key against another's
    time or drops one silently."""
    for refs in (frozenset(), {key(1, 1)}):
        with pytest.raises(ValueError, match="zip"):
            deletable_epochs([key(1, 1), key(1, 2)], [OLD], LAYOUT, 40, NOW, GRACE, referenced=refs)
