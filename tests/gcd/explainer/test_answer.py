"""`gcd.explainer.answer`'s reading of etcd's history for the estimate (issue 55)."""

from __future__ import annotations

from gcd.explainer.answer import _moved_at


def test_moved_at_is_when_the_value_last_rose() -> None:
    """From etcd's history, newest first: the oldest of the newest points holding the
    current value, once an older point is lower; None when the history never shows it."""
    points = [(100.0, 7), (90.0, 7), (80.0, 6), (70.0, 5)]
    assert _moved_at(points, 7) == 90.0
    assert _moved_at([(100.0, 7), (90.0, 7)], 7) is None
    assert _moved_at([(100.0, 7), (90.0, 6)], 7) == 100.0
