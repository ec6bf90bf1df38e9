"""Jittered exponential backoff and the retry loop."""

from __future__ import annotations

import random

import pytest

from gcd.rules.backoff import Backoff
from gcd.storage.retry import Retrier
from l0gc.errors import ConfigError, StorageError


class FakeSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def test_ceiling_doubles_up_to_the_cap() -> None:
    """The longest wait doubles per attempt and stops at the cap."""
    backoff = Backoff(base_s=0.5, cap_s=3.0, max_attempts=5)
    assert [backoff.ceiling(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.ceiling(10_000) == 3.0


def test_delay_is_full_jitter() -> None:
    """A delay is the ceiling scaled by the uniform random number."""
    backoff = Backoff(base_s=1.0, cap_s=10.0)
    assert backoff.delay(2, 0.0) == 0.0
    assert backoff.delay(2, 0.5) == 2.0


def test_bad_schedule_is_refused() -> None:
    """A negative base, a cap below the base or no attempts raise ConfigError."""
    for kwargs in ({"base_s": -1.0}, {"base_s": 2.0, "cap_s": 1.0}, {"max_attempts": 0}):
        with pytest.raises(ConfigError):
            Backoff(**kwargs)  # type: ignore[arg-type]


async def test_call_retries_retryable_errors_then_succeeds() -> None:
    """Retryable StorageErrors are retried with backoff until the call succeeds."""
    sleep = FakeSleep()
    retrier = Retrier(Backoff(base_s=1.0, cap_s=8.0, max_attempts=5), sleep, random.Random(1))
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise StorageError("slow", code="SlowDown", retryable=True)
        return "done"

    seen: list[int] = []
    result = await retrier.call(flaky, on_retry=lambda _e, attempt, _d: seen.append(attempt))
    assert result == "done"
    assert calls == 4
    assert seen == [0, 1, 2]
    assert len(sleep.waits) == 3
    assert all(0 <= wait <= 2**i for i, wait in enumerate(sleep.waits))
    assert retrier.retries == 3


async def test_call_gives_up_after_max_attempts() -> None:
    """After max_attempts tries the last error is raised."""
    sleep = FakeSleep()
    retrier = Retrier(Backoff(max_attempts=3), sleep, random.Random(0))

    async def always() -> None:
        raise StorageError("boom", code="InternalError", retryable=True)

    with pytest.raises(StorageError, match="boom"):
        await retrier.call(always)
    assert len(sleep.waits) == 2


async def test_call_does_not_retry_permanent_errors() -> None:
    """A non-retryable error is raised at once, without sleeping."""
    sleep = FakeSleep()
    retrier = Retrier(Backoff(), sleep, random.Random(0))

    async def denied() -> None:
        raise StorageError("no", code="AccessDenied", retryable=False)

    with pytest.raises(StorageError):
        await retrier.call(denied)
    assert sleep.waits == []


@pytest.mark.parametrize(
    ("code", "retryable", "says", "never"),
    [
        ("AccessDenied", False, "check the credentials", None),
        ("InvalidAccessKeyId", False, "check the credentials", None),
        ("SignatureDoesNotMatch", False, "check the credentials", None),
        ("403", False, "check the credentials", None),
        ("401", False, "check the credentials", None),
        ("MalformedXML", False, "refused the request with MalformedXML", "credentials"),
        ("InvalidArgument", False, "with InvalidArgument", "credentials"),
        ("NoSuchBucket", False, "check the bucket", "credentials"),
        ("ListingBroken", False, "its pages do not make a listing", "refused"),
        ("500", True, "retryable", "credentials"),
    ],
)
def test_a_storage_error_names_its_code_and_blames_credentials_only_for_auth(
    code: str, retryable: bool, says: str, never: str | None
) -> None:
    """Issue 35, item 13: "check credentials" only for authentication and permission
    failures; every message names the code."""
    text = str(StorageError("DeleteObjects on s3://b failed: no", code=code, retryable=retryable))
    assert f"code {code};" in text
    assert says in text
    assert never is None or never not in text
