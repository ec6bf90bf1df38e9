"""boto3 on Spark executors: one client per task, our retries, our error type.

Executors cannot share the driver's clients (they are not picklable, and an
executor is another process, often another machine), so each task builds its own
from an `S3Target` (plain strings, shipped in the closure). Credentials come from
botocore's standard chain on the executor (environment, profile, IRSA / web
identity, instance role); nothing here reads or forwards them.

As in the async sweeper (`gcd.storage.s3.client`), botocore's own retries are off: every
retry is made here, by `call_with_retries`: the synchronous twin of the async loop
(`gcd.storage.retry.Retrier.call`), driven by the same policy (`gcd.rules.backoff`:
which errors, how many attempts, the full-jitter wait), and exceptions
are translated once, by `gcd.storage.s3.errors.translate_error` (the sweeper's own translation;
it needs botocore only, so executors need boto3 but not aiobotocore), into `StorageError`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gcd.rules.backoff import Backoff
from gcd.storage.sync_retry import retry
from l0gc.errors import ConfigError, StorageError

__all__ = ["S3Target", "call_with_retries", "make_client"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class S3Target:
    """The bucket and how to reach it, as plain values for executors."""

    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.2, cap_s=10.0))

    def __post_init__(self) -> None:
        if not self.bucket or "/" in self.bucket or self.bucket != self.bucket.strip():
            raise ConfigError(f"bucket {self.bucket!r} is not a bucket name; give --bucket NAME")


def make_client(target: S3Target, *, pool: int = 10) -> Any:
    """A boto3 S3 client for `target` with botocore retries off (thread-safe)."""
    import boto3  # noqa: PLC0415 - executor-side dependency
    from botocore.config import Config  # noqa: PLC0415

    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max(1, pool),
        connect_timeout=10,
        read_timeout=60,
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=target.endpoint_url, region_name=target.region, config=config
    )


def _translated() -> tuple[type[BaseException], ...]:
    from botocore import exceptions as botocore_errors  # noqa: PLC0415

    return (
        botocore_errors.BotoCoreError,
        botocore_errors.ClientError,
        ConnectionError,
        TimeoutError,
    )


def call_with_retries(
    operation: Callable[[], T],
    *,
    what: str,
    backoff: Backoff,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`operation()`, retried while the policy retries (`gcd.storage.sync_retry.retry`);
    botocore's failures translated as the async sweeper's (`translate_error`)."""
    from gcd.storage.s3.errors import translate_error  # noqa: PLC0415 - imports botocore

    translated = _translated()

    def translate(exc: Exception) -> StorageError | None:
        return translate_error(exc, what) if isinstance(exc, translated) else None

    return retry(operation, backoff=backoff, translate=translate, rng=rng, sleep=sleep)
