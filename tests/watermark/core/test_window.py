"""The fencing window: transitions, classification, recovery, and its errors."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from l0gc.errors import IllegalTransition, L0gcError, StaleEpoch
from watermark.core.window import Admission, EpochWindow

BELOW, INSIDE, ABOVE = Admission.BELOW, Admission.INSIDE, Admission.ABOVE


def window_of(*epochs: int, floor: int | None = None) -> EpochWindow:
    """Build a window by advancing through `epochs` in order."""
    window = EpochWindow(floor=floor)
    for epoch in epochs:
        window.advance(epoch)
    return window


def state(window: EpochWindow) -> tuple[tuple[int | None, int | None], int | None]:
    """Everything observable about a window."""
    return (window.bounds, window.floor)


# -- transitions ---------------------------------------------------------------------


def test_empty_window_has_no_bounds_and_admits_everything_above() -> None:
    """An empty window has bounds (None, None) and classifies every epoch as ABOVE."""
    window = EpochWindow()
    assert window.bounds == (None, None)
    assert window.is_empty
    assert window.oldest_accepted is None
    assert window.latest_seen is None
    assert [window.classify(epoch) for epoch in (0, 1, 10**12)] == [ABOVE] * 3


def test_first_epoch_gives_single_epoch_window() -> None:
    """[] + N gives [N], whose bounds are (N, N)."""
    window = window_of(7)
    assert window.bounds == (7, 7)
    assert not window.is_empty
    assert [window.classify(e) for e in (6, 7, 8)] == [BELOW, INSIDE, ABOVE]


def test_second_epoch_gives_two_epoch_window() -> None:
    """[N] + N+1 gives [N, N+1]: both admitted."""
    window = window_of(7, 8)
    assert window.bounds == (7, 8)
    assert [window.classify(e) for e in (6, 7, 8, 9)] == [BELOW, INSIDE, INSIDE, ABOVE]


def test_third_epoch_pushes_the_oldest_out() -> None:
    """[N, N+1] + N+2 gives [N+1, N+2]: N becomes BELOW."""
    window = window_of(7, 8, 9)
    assert window.bounds == (8, 9)
    assert window.oldest_accepted == 8
    assert window.latest_seen == 9
    assert window.classify(7) is BELOW


def test_non_contiguous_epochs_admit_the_gap() -> None:
    """[5, 6] + 10 gives [6, 10], so 7, 8 and 9 are INSIDE."""
    window = window_of(5, 6, 10)
    assert window.bounds == (6, 10)
    assert [window.classify(e) for e in range(5, 12)] == [BELOW] + [INSIDE] * 5 + [ABOVE]


def test_out_of_order_epoch_is_below_after_a_higher_one() -> None:
    """After N+1 is seen first, N is BELOW; N+2 then gives [N+1, N+2]."""
    window = window_of(11)
    assert window.classify(10) is BELOW
    with pytest.raises(StaleEpoch):
        window.check(10)
    window.advance(12)
    assert window.bounds == (11, 12)


@pytest.mark.parametrize("epoch", [4, 5, 6, 7, 8])
def test_advance_of_an_epoch_not_above_raises_and_changes_nothing(epoch: int) -> None:
    """Advancing to a BELOW or INSIDE epoch raises IllegalTransition; the window is unchanged."""
    window = window_of(5, 8)
    before = state(window)
    with pytest.raises(IllegalTransition, match=f"epoch {epoch}"):
        window.advance(epoch)
    assert state(window) == before


def test_check_returns_inside_and_above() -> None:
    """check() returns the admission for an epoch that is not BELOW."""
    window = window_of(5, 6)
    assert window.check(5) is INSIDE
    assert window.check(6) is INSIDE
    assert window.check(9) is ABOVE


def test_check_below_raises_stale_epoch_with_the_window() -> None:
    """check() of a BELOW epoch raises StaleEpoch carrying the epoch and the window."""
    window = window_of(5, 6)
    with pytest.raises(StaleEpoch) as caught:
        window.check(4)
    assert caught.value.epoch == 4
    assert caught.value.window == (5, 6)
    message = str(caught.value)
    assert "epoch 4 is below the fencing window [5, 6]" in message
    assert "re-read the cluster epoch" in message
    assert "re-upload" in message
    assert window.bounds == (5, 6)


# -- floor and recovery --------------------------------------------------------------


def test_floor_refuses_epochs_at_or_below_it_while_empty() -> None:
    """EpochWindow(floor=M) is empty, refuses epochs <= M and admits epochs above M."""
    window = EpochWindow(floor=10)
    assert window.bounds == (None, None)
    assert [window.classify(e) for e in (0, 9, 10, 11)] == [BELOW, BELOW, BELOW, ABOVE]
    with pytest.raises(IllegalTransition):
        window.advance(10)
    assert state(window) == ((None, None), 10)
    window.advance(11)
    assert window.bounds == (11, 11)


def test_floor_stale_epoch_message_names_the_watermark() -> None:
    """A StaleEpoch from an empty window with a floor names the published watermark."""
    with pytest.raises(StaleEpoch) as caught:
        EpochWindow(floor=10).check(10)
    assert caught.value.window == (None, None)
    assert caught.value.floor == 10
    assert "at or below the published watermark 10" in str(caught.value)


def test_recovered_collapses_to_last_applied_epoch() -> None:
    """recovered(last_applied, M) with last_applied > M is [last_applied], floor M."""
    window = EpochWindow.recovered(last_applied_epoch=12, published_watermark=10)
    assert state(window) == ((12, 12), 10)
    assert [window.classify(e) for e in (10, 11, 12, 13)] == [BELOW, BELOW, INSIDE, ABOVE]


@pytest.mark.parametrize("last_applied", [None, 3, 10])
def test_recovered_at_or_below_watermark_is_empty_with_floor(last_applied: int | None) -> None:
    """recovered() with nothing applied above M is empty and never admits an epoch <= M."""
    window = EpochWindow.recovered(last_applied_epoch=last_applied, published_watermark=10)
    assert state(window) == ((None, None), 10)
    assert window.classify(10) is BELOW
    assert window.classify(11) is ABOVE


def test_repr_shows_the_window() -> None:
    """repr() shows the window's epochs and the floor."""
    assert repr(EpochWindow()) == "<EpochWindow []>"
    assert repr(EpochWindow(floor=3)) == "<EpochWindow [] floor=3>"
    assert repr(window_of(5)) == "<EpochWindow [5]>"
    assert repr(window_of(5, 6, 9, floor=2)) == "<EpochWindow [6, 9] floor=2>"


# -- properties ----------------------------------------------------------------------

epochs_strategy = st.lists(st.integers(min_value=0, max_value=40), max_size=30)


@given(offered=epochs_strategy, floor=st.none() | st.integers(min_value=-1, max_value=20))
def test_window_only_moves_up_and_holds_at_most_two_seen_epochs(
    offered: list[int], floor: int | None
) -> None:
    """Advancing on every ABOVE epoch keeps bounds increasing, seen and above the floor."""
    window = EpochWindow(floor=floor)
    seen: list[int] = []
    for epoch in offered:
        before = state(window)
        admission = window.classify(epoch)
        if admission is ABOVE:
            window.advance(epoch)
            seen.append(epoch)
        else:
            with pytest.raises(IllegalTransition):
                window.advance(epoch)
            assert state(window) == before
        low, high = window.bounds
        if seen:
            assert high == seen[-1]
            assert low == (seen[-2] if len(seen) > 1 else seen[-1])
            assert low is not None
            assert floor is None or low > floor
            # Refused once, refused forever: nothing below the window comes back.
            assert all(window.classify(e) is BELOW for e in range(low))
        else:
            assert (low, high) == (None, None)


@given(last_applied=st.none() | st.integers(0, 50), watermark=st.integers(-1, 50))
def test_recovered_window_never_admits_an_epoch_at_or_below_the_watermark(
    last_applied: int | None, watermark: int
) -> None:
    """A recovered window classifies every epoch <= M(p) as BELOW."""
    window = EpochWindow.recovered(last_applied, watermark)
    assert all(window.classify(e) is BELOW for e in range(-1, watermark + 1))
    if last_applied is not None and last_applied > watermark:
        assert window.bounds == (last_applied, last_applied)


# -- errors ----------------------------------------------------------------------------


def test_stale_epoch_is_an_l0gc_error_and_survives_pickling() -> None:
    """StaleEpoch is an L0gcError and pickles with its fields and message intact."""
    error = StaleEpoch(4, (5, 6))
    assert isinstance(error, L0gcError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.epoch, copy.window, copy.floor, str(copy)) == (4, (5, 6), None, str(error))


def test_raise_floor_trims_a_straddling_window_and_empties_one_below() -> None:
    """raise_floor(m): epochs <= m are BELOW from then on; [a, b] with a <= m < b keeps
    (m, b]; a window entirely at or below m empties; a lower m changes nothing."""
    window = EpochWindow.recovered(None, 3)
    window.advance(9)
    window.advance(10)
    assert window.raise_floor(9) is True
    assert (window.bounds, window.floor) == ((10, 10), 9)
    assert window.classify(9) is Admission.BELOW
    assert window.classify(10) is Admission.INSIDE
    assert window.raise_floor(8) is False
    assert window.raise_floor(9) is False  # the same floor: nothing rises
    assert window.raise_floor(10) is True  # exactly the latest epoch: the window empties
    assert (window.bounds, window.floor) == ((None, None), 10)
    assert window.raise_floor(12) is True
    assert (window.bounds, window.floor) == ((None, None), 12)
    assert window.classify(12) is Admission.BELOW
    assert window.classify(13) is Admission.ABOVE
