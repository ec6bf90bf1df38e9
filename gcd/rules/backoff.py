"""The retry policy: when a failed request is tried again, and after how long (pure).

Theory of operation
-------------------
Every retry of the sweeper side follows this one policy, whichever loop runs it: the
async loop of the sweeper, its lister and its deleter (`gcd.storage.retry.Retrier`)
and the synchronous loop of the Spark executors (`gcd.spark.retrying.retry`,
`gcd.spark.delete.delete_keys`). botocore's own retries are switched off, so these
loops are the only places that retry: retries are counted, logged and bounded.

* Which errors: a `StorageError` whose `retryable` is true (throttling, timeouts, 5xx,
  connection failures: the store's error translation decides it, from
  `gcd.rules.triage.RETRYABLE_CODES` and the HTTP status). Anything else fails at once.
* How many: `max_attempts` tries in all, the first included; attempt numbers are
  0-based, so attempt ``n`` may be followed by another while ``n + 1 < max_attempts``.
* How long: "full jitter", as AWS recommends. After failed attempt ``n`` the wait is
  ``uniform * min(cap_s, base_s * 2**n)`` for a uniform draw in [0, 1). Random waits
  spread the retries of many concurrent requests (and of many sweepers) so they do not
  hit the store again in lockstep.

The draw is passed in, never made here: the loops own their random source, so tests
and the simulation (whose runs are reproducible per seed) choose it, and every retry
costs exactly one draw, made only once the policy said "retry".
"""

from __future__ import annotations

from dataclasses import dataclass

from gcd.errors import StorageError
from watermark.errors import ConfigError

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
