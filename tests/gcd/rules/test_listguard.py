"""Issue 36, item 1: a listing that goes back where it was, or never ends, is caught."""

from __future__ import annotations

from gcd.rules.listguard import ListingGuard


def test_a_repeated_token_is_broken_at_its_first_repeat() -> None:
    guard = ListingGuard()
    assert guard.advance(None, "t1") is None
    assert guard.advance(None, "t2") is None
    reason = guard.advance(None, "t1")
    assert reason is not None
    assert "'t1'" in reason


def test_the_same_token_forever_is_caught_on_the_second_page() -> None:
    guard = ListingGuard()
    assert guard.advance(None, "same") is None
    assert guard.advance(None, "same") is not None


def test_a_start_key_given_twice_is_broken_but_a_token_after_it_is_not() -> None:
    guard = ListingGuard()
    assert guard.advance("a/1", None) is None
    assert guard.advance("a/1", "t") is None  # the same start, then a token: progress
    assert guard.advance("a/2", None) is None
    reason = guard.advance("a/1", None)
    assert reason is not None
    assert "'a/1'" in reason


def test_pages_are_bounded_even_with_new_tokens() -> None:
    guard = ListingGuard(max_pages=3)
    assert guard.advance(None, "t1") is None
    assert guard.advance(None, "t2") is None
    reason = guard.advance(None, "t3")
    assert reason is not None
    assert "more than 3 pages" in reason
