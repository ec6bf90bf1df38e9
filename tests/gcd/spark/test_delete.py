"""Executor-side deletes: throttled requests and transient per-key errors are retried
with backoff, permanent per-key errors are final, batches never exceed 1000 keys, and
the token bucket paces the keys."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gcd.rules.backoff import Backoff
from gcd.spark.delete import DeleteSettings
from gcd.storage.s3.executor import S3Executor, S3Target
from l0gc.errors import ConfigError

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TARGET = S3Target("bucket", backoff=Backoff(base_s=0.0, cap_s=0.0, max_attempts=3))


class FakeS3:
    """Answers DeleteObjects from a script: a ClientError code, or per-key error codes."""

    def __init__(self, script: Sequence[str | dict[str, str]]) -> None:
        self.script = list(script)
        self.calls: list[list[str]] = []

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        """One scripted DeleteObjects answer."""
        keys = [item["Key"] for item in Delete["Objects"]]
        assert Bucket == "bucket"
        assert Delete["Quiet"] is False
        assert len(keys) <= 1000
        self.calls.append(keys)
        step = self.script.pop(0) if self.script else {}
        if isinstance(step, str):
            error = {
                "Error": {"Code": step, "Message": "scripted"},
                "ResponseMetadata": {"HTTPStatusCode": 503 if step == "SlowDown" else 403},
            }
            raise ClientError(error, "DeleteObjects")  # type: ignore[arg-type]
        return {
            "Deleted": [{"Key": k} for k in keys if k not in step],
            "Errors": [{"Key": k, "Code": c, "Message": "m"} for k, c in step.items() if k in keys],
        }


def run(fake: FakeS3, keys: list[str], paced: list[int] | None = None) -> dict[str, str | None]:
    """`S3Executor.delete_keys` with no real sleeping."""
    executor = S3Executor(TARGET, fake, random.Random(1), lambda _s: None)
    return executor.delete_keys(keys, pace=(paced.append if paced is not None else lambda _n: None))


def test_slowdown_on_the_whole_request_is_retried() -> None:
    """A SlowDown answer is retried; the keys are then deleted."""
    fake = FakeS3(["SlowDown", {}])
    assert run(fake, ["a", "b"]) == {"a": None, "b": None}
    assert fake.calls == [["a", "b"], ["a", "b"]]


def test_transient_key_errors_are_retried_and_permanent_ones_are_final() -> None:
    """InternalError on one key is retried alone; AccessDenied on another is reported."""
    fake = FakeS3([{"b": "InternalError", "c": "AccessDenied"}, {}])
    paced: list[int] = []
    outcome = run(fake, ["a", "b", "c"], paced)
    assert outcome["a"] is None
    assert outcome["b"] is None
    assert outcome["c"] is not None
    assert outcome["c"].startswith("AccessDenied")
    assert fake.calls == [["a", "b", "c"], ["b"]]
    assert paced == [3, 1]


def test_retries_end_after_max_attempts_with_the_last_error() -> None:
    """A key that keeps failing with SlowDown is failed after 3 attempts, saying so."""
    fake = FakeS3([{"a": "SlowDown"}] * 5)
    outcome = run(fake, ["a"])
    assert outcome["a"] is not None
    assert "SlowDown" in outcome["a"]
    assert "gave up after 3 attempts" in outcome["a"]
    assert len(fake.calls) == 3


def test_a_permanent_request_error_fails_every_key_of_the_batch() -> None:
    """AccessDenied on the request is not retried: every key carries the error."""
    fake = FakeS3(["AccessDenied"])
    outcome = run(fake, ["a", "b"])
    assert all(error is not None and "AccessDenied" in error for error in outcome.values())
    assert len(fake.calls) == 1


def test_keys_xml_cannot_carry_are_never_sent() -> None:
    """A key with a control character or CR fails alone, unsent; its batch is deleted."""
    fake = FakeS3([{}])
    outcome = run(fake, ["a", "bad\x01", "cr\rx", "b"])
    assert fake.calls == [["a", "b"]]
    assert outcome["a"] is None
    assert outcome["b"] is None
    assert outcome["bad\x01"] is not None
    assert "U+0001" in outcome["bad\x01"]
    assert outcome["cr\rx"] is not None
    assert "carriage return" in outcome["cr\rx"]


def test_delete_settings_are_checked() -> None:
    """Batch sizes over 1000, zero threads and non-positive rates are refused."""
    with pytest.raises(ConfigError, match="1-1000"):
        DeleteSettings(TARGET, batch_size=1001)
    with pytest.raises(ConfigError, match="concurrency"):
        DeleteSettings(TARGET, threads=0)
    with pytest.raises(ConfigError, match="per second"):
        DeleteSettings(TARGET, deletes_per_second=0)
