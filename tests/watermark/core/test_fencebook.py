"""The fence book: live fences by id, ended ones for a bounded horizon (pure, no loop)."""

from __future__ import annotations

import pytest

from watermark.core.fencebook import FenceBook
from watermark.core.fencelock import FenceLock, Hold, Outcome
from watermark.core.window import EpochWindow


def holds(count: int) -> tuple[FenceLock[Hold], list[Hold]]:
    lock: FenceLock[Hold] = FenceLock(EpochWindow.recovered(5, 4), partition="p")
    granted = [lock.grant_at_once(5, 0.0, None) for _ in range(count)]
    assert all(h is not None for h in granted)
    return lock, [h for h in granted if h is not None]


def test_an_ended_fence_is_found_for_the_horizon_then_forgotten() -> None:
    """finish keeps the fence findable for horizon_s from when it ended, not longer."""
    lock, (hold,) = holds(1)
    book: FenceBook[Hold] = FenceBook(horizon_s=10.0)
    book.add("t", hold, 0.0)
    lock.release(hold, Outcome.COMMITTED, 3)
    book.finish("t", 100.0)
    assert (book.live, book.ended) == (0, 1)
    assert book.get("t", 110.0) is hold
    assert book.get("t", 110.5) is None
    assert len(book) == 0


def test_ended_fences_are_bounded_by_count_oldest_first() -> None:
    """At most max_ended ended fences are kept, whatever the horizon: the oldest go."""
    lock, granted = holds(5)
    book: FenceBook[Hold] = FenceBook(horizon_s=1e9, max_ended=3)
    for index, hold in enumerate(granted):
        book.add(f"t{index}", hold, 0.0)
        lock.release(hold)
        book.finish(f"t{index}", float(index))
    assert book.ended == 3
    found = [book.get(f"t{i}", 5.0) is not None for i in range(5)]
    assert found == [False, False, True, True, True]


def test_fences_that_end_unnoticed_are_swept_as_the_book_grows() -> None:
    """Holds reclaimed or revoked behind the book's back move to the ended ones when the
    live map has doubled (128 from the start); memory stays bounded."""
    lock, granted = holds(128)
    book: FenceBook[Hold] = FenceBook(horizon_s=5.0, max_ended=1000)
    for index, hold in enumerate(granted):
        book.add(f"a{index}", hold, 0.0)
    lock.revoke_all()  # every one of them ends, unnoticed
    assert book.live == 128
    book.add("late", Hold("p", 5, (5, 5), False, None, 0.0), 1.0)  # live is 2 x 64: sweep
    assert (book.live, book.ended) == (1, 128)
    assert book.get("a0", 6.0) is granted[0]  # within the horizon from the sweep
    assert book.get("a0", 6.5) is None
    assert book.ended == 0


def test_a_negative_horizon_is_refused() -> None:
    """A horizon or bound below zero is a mistake, named with its value."""
    with pytest.raises(ValueError, match="-1"):
        FenceBook(horizon_s=-1)
