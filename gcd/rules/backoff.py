"""The retry policy: when a failed request is tried again, and after how long (pure).

Design notes: docs/internals/rules.md, `gcd.rules.backoff`.
"""

from __future__ import annotations

from dataclasses import dataclass

from l0gc.errors import ConfigError, StorageError

__all__ = ["Backoff"]

_MAX_DOUBLINGS = 62  # 2.0**62 is finite; every cap is reached long before


@dataclass(frozen=True, slots=True)
class Backoff:
    """The schedule: `max_attempts` tries in all, waits doubling from `base_s` to `cap_s`."""

    base_s: float = 0.2
    cap_s: float = 20.0
    max_attempts: int = 10

    def __post_init__(self) -> None:
        if not self.base_s >= 0 or not self.cap_s >= self.base_s:
            msg = f"backoff base {self.base_s!r} s and cap {self.cap_s!r} s need 0 <= base <= cap"
            raise ConfigError(msg)
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts {self.max_attempts!r} must be >= 1")

    def ceiling(self, attempt: int) -> float:
        """The longest wait after failed attempt number `attempt` (0-based)."""
        return min(self.cap_s, self.base_s * 2.0 ** min(attempt, _MAX_DOUBLINGS))

    def delay(self, attempt: int, uniform: float) -> float:
        """The wait after attempt `attempt`, given a uniform random number in [0, 1)."""
        return self.ceiling(attempt) * uniform

    def can_retry(self, attempt: int) -> bool:
        """True when attempt number `attempt` (0-based) may be followed by another."""
        return attempt + 1 < self.max_attempts

    def retries(self, error: StorageError, attempt: int) -> bool:
        """True when `error`, raised by attempt `attempt`, is worth another attempt."""
        return error.retryable and self.can_retry(attempt)
