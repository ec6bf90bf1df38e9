"""How many listers a round runs (`gcd.rules.listgrowth`): grown only while it pays."""

from __future__ import annotations

import pytest

from gcd.rules.listgrowth import MIN_SHARE, SETTLE_PAGES, ListerGrowth


def pages(growth: ListerGrowth, start_s: float, every_s: float) -> float:
    """A whole window of pages, one every `every_s` from `start_s`; the last one's time."""
    now = start_s
    for _ in range(SETTLE_PAGES * growth.allowed):
        growth.page(now)
        now += every_s
    return now - every_s


def test_one_lister_first_and_a_second_once_it_settled_and_the_deleters_wait() -> None:
    growth = ListerGrowth(4)
    assert growth.allowed == 1
    for n in range(SETTLE_PAGES - 1):
        growth.page(float(n))
    assert not growth.grow(starved=True)  # not settled: one page short
    growth.page(float(SETTLE_PAGES - 1))
    assert not growth.grow(starved=False)  # settled, but the deleters are busy
    assert growth.grow(starved=True)
    assert growth.allowed == 2
    assert not growth.latest
    assert growth.rates == [1.0]  # one page a second


def test_the_rate_is_the_latest_windows_not_the_rounds() -> None:
    """Fast probe pages at the start do not count once a window of later pages passed."""
    growth = ListerGrowth(4)
    for n in range(10):
        growth.page(n * 0.001)  # probes
    for n in range(SETTLE_PAGES):
        growth.page(1.0 + n)  # one a second since
    assert growth.rate() == pytest.approx(1.0)


def test_a_latency_bound_store_grows_to_the_limit() -> None:
    """k listers examine k times the pages per second: every step pays, up to `most`."""
    growth = ListerGrowth(4)
    now = 0.0
    while growth.allowed < 4:
        now = pages(growth, now + 1, 1 / growth.allowed)
        assert growth.grow(starved=True)
    pages(growth, now + 1, 0.25)
    assert not growth.grow(starved=True)  # the limit
    assert growth.allowed == 4
    assert not growth.pinned
    assert growth.rates == pytest.approx([1.0, 2.0, 3.0])


@pytest.mark.parametrize("listers", [2, 3])
def test_a_step_that_brings_less_than_half_the_ideal_gain_pins_the_count(listers: int) -> None:
    growth = ListerGrowth(8)
    now = 0.0
    while growth.allowed < listers:
        now = pages(growth, now + 1, 1 / growth.allowed)
        assert growth.grow(starved=True)
    # the ideal gain from k - 1 to k is k / (k - 1); a hair under half of it pins
    needed = growth.rates[-1] * (1 + MIN_SHARE / (listers - 1))
    now = pages(growth, now + 1, 1 / (needed * 0.99))
    assert not growth.grow(starved=True)
    assert growth.pinned
    assert growth.allowed == listers
    pages(growth, now + 1, 0.000001)
    assert not growth.grow(starved=True)  # pinned for the round, however fast it gets


def test_just_enough_gain_grows() -> None:
    growth = ListerGrowth(4)
    now = pages(growth, 0.0, 1.0)
    assert growth.grow(starved=True)
    pages(growth, now + 1, 1 / (1 + MIN_SHARE) * 0.999)
    assert growth.grow(starved=True)
    assert growth.allowed == 3


def test_one_lister_at_most_never_grows() -> None:
    growth = ListerGrowth(1)
    pages(growth, 0.0, 1.0)
    assert not growth.grow(starved=True)
    with pytest.raises(ValueError, match="at most 0 listers"):
        ListerGrowth(0)
