"""The executors' one retry loop (`gcd.storage.sync_retry.retry`): what it retries, what it
translates, and what it raises as it is."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gcd.rules.backoff import Backoff
from gcd.storage.objectstore import KeyFailure
from gcd.storage.sync_retry import delete_triaged, retry
from l0gc.errors import StorageError


class _SdkError(Exception):
    pass


def _failing(*failures: Exception) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def operation() -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "done"

    return calls, operation


def test_a_retryable_failure_is_retried_until_it_succeeds() -> None:
    slept: list[float] = []
    calls, operation = _failing(StorageError("slow down", code="SlowDown", retryable=True))
    assert (
        retry(operation, backoff=Backoff(max_attempts=3), rng=random.Random(1), sleep=slept.append)
        == "done"
    )
    assert len(calls) == 2
    assert len(slept) == 1


def test_an_sdk_error_is_translated_retried_and_raised_chained_when_retries_run_out() -> None:
    calls, operation = _failing(_SdkError("busy"), _SdkError("busy"))

    def translate(exc: Exception) -> StorageError | None:
        if isinstance(exc, _SdkError):
            return StorageError(f"translated {exc}", code="ServerBusy", retryable=True)
        return None

    with pytest.raises(StorageError, match="translated busy") as raised:
        retry(operation, backoff=Backoff(max_attempts=2), translate=translate, sleep=lambda _: None)
    assert isinstance(raised.value.__cause__, _SdkError)
    assert len(calls) == 2


def test_what_is_not_a_storage_failure_is_raised_at_once() -> None:
    calls, operation = _failing(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        retry(
            operation,
            backoff=Backoff(max_attempts=5),
            translate=lambda _: None,
            sleep=lambda _: None,
        )
    assert len(calls) == 1


def test_deletes_are_triaged_per_key_and_only_answered_keys_count_as_deleted() -> None:
    """`delete_triaged`: a retryable per-key failure is sent again, a final one is kept,
    a key no answer names never counts as deleted, and a request that fails for good
    fails its whole batch with `failed`'s text."""
    sent: list[list[str]] = []

    def send(batch: list[str]) -> tuple[list[str], list[KeyFailure]]:
        sent.append(batch)
        if len(sent) == 1:
            return ["a"], [
                KeyFailure("b", "SlowDown", "again"),
                KeyFailure("c", "AccessDenied", "no"),
            ]
        return [], []  # "b" and "d" unanswered: retried, then given up

    outcome = delete_triaged(
        ["a", "b", "c", "d"],
        send,
        backoff=Backoff(max_attempts=2),
        rng=random.Random(1),
        sleep=lambda _: None,
        unanswered="not answered",
    )
    assert outcome["a"] is None
    assert outcome["c"] == "AccessDenied: no"
    assert outcome["b"] == "not answered (gave up after 2 attempts)"
    assert outcome["d"] == "not answered (gave up after 2 attempts)"
    assert sent == [["a", "b", "c", "d"], ["b", "d"]]

    def down(batch: list[str]) -> tuple[list[str], list[KeyFailure]]:
        raise StorageError("gone", code="NoSuchBucket", retryable=False)

    failed = delete_triaged(
        ["x", "y"],
        down,
        backoff=Backoff(),
        rng=random.Random(1),
        sleep=lambda _: None,
        unanswered="-",
        failed=lambda exc: f"{exc.code}: {exc}",
    )
    assert set(failed) == {"x", "y"}
    assert all(str(text).startswith("NoSuchBucket: gone") for text in failed.values())
