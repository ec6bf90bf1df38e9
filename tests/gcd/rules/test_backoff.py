"""The retry policy: the full-jitter schedule, its ceiling, and what is retried."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gcd.rules.backoff import Backoff
from l0gc.errors import ConfigError, StorageError

THROTTLED = StorageError("slow", code="SlowDown", retryable=True)
DENIED = StorageError("no", code="AccessDenied", retryable=False)


@given(
    base=st.floats(0.0, 5.0),
    extra=st.floats(0.0, 100.0),
    attempt=st.integers(0, 10_000),
    uniform=st.floats(0.0, 1.0, exclude_max=True),
)
def test_delay_stays_within_the_jitter_bounds(
    base: float, extra: float, attempt: int, uniform: float
) -> None:
    """Every wait is in [0, ceiling], and the ceiling never exceeds the cap."""
    backoff = Backoff(base_s=base, cap_s=base + extra)
    ceiling = backoff.ceiling(attempt)
    assert 0.0 <= ceiling <= backoff.cap_s
    assert 0.0 <= backoff.delay(attempt, uniform) <= ceiling


def test_ceiling_doubles_then_holds_at_the_cap() -> None:
    """The ceiling doubles per attempt from the base and stops at the cap."""
    backoff = Backoff(base_s=0.5, cap_s=3.0)
    assert [backoff.ceiling(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.ceiling(10**9) == 3.0
    assert backoff.delay(1, 0.5) == 0.5


def test_attempt_limit_counts_the_first_try() -> None:
    """max_attempts tries in all: attempt max_attempts - 1 is the last."""
    backoff = Backoff(max_attempts=3)
    assert [backoff.can_retry(n) for n in range(4)] == [True, True, False, False]
    assert Backoff(max_attempts=1).can_retry(0) is False


def test_only_retryable_errors_are_retried() -> None:
    """A permanent error is never retried; a retryable one until attempts run out."""
    backoff = Backoff(max_attempts=2)
    assert backoff.retries(THROTTLED, 0)
    assert not backoff.retries(THROTTLED, 1)
    assert not backoff.retries(DENIED, 0)


def test_bad_schedule_is_refused() -> None:
    """A negative base, a cap below the base or no attempts raise ConfigError."""
    for kwargs in ({"base_s": -1.0}, {"base_s": 2.0, "cap_s": 1.0}, {"max_attempts": 0}):
        with pytest.raises(ConfigError):
            Backoff(**kwargs)  # type: ignore[arg-type]
