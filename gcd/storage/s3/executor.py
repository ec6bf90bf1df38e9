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

import functools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gcd.rules.backoff import Backoff
from gcd.rules.cursor import Cursor
from gcd.rules.versions import split_target
from gcd.rules.xmlkeys import xml_unsafe_reason
from gcd.storage.executor import Listed, Page, SkipAhead, walk_pages
from gcd.storage.objectstore import DeleteResult, KeyFailure
from gcd.storage.sync_retry import delete_triaged, retry
from l0gc.errors import ConfigError, StorageError

if TYPE_CHECKING:
    pass

__all__ = ["S3Calls", "S3Executor", "S3Target", "call_with_retries", "make_client"]

T = TypeVar("T")
_PAGE = 1000
_MARKER_SEPARATOR = "\x00"  # KeyMarker and VersionIdMarker in one continuation token


class S3Calls(Protocol):
    """The boto3 S3 client calls executors make (botocore ships no types; answers are
    botocore's parsed documents)."""

    def list_objects_v2(self, **params: Any) -> dict[str, Any]: ...

    def list_object_versions(self, **params: Any) -> dict[str, Any]: ...

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]: ...  # noqa: N803

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> dict[str, Any]: ...  # noqa: N803


@dataclass(frozen=True, slots=True)
class S3Target:
    """The bucket and how to reach it, as plain values for executors: an
    `gcd.storage.executor.ExecutorStore` (`versions`: list and delete every version)."""

    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.2, cap_s=10.0))
    versions: bool = False

    def __post_init__(self) -> None:
        if not self.bucket or "/" in self.bucket or self.bucket != self.bucket.strip():
            raise ConfigError(f"bucket {self.bucket!r} is not a bucket name; give --bucket NAME")

    def connect(self, *, pool: int = 1) -> S3Executor:
        """An `S3Executor` over a boto3 client of `pool` connections."""
        return S3Executor(self, make_client(self, pool=pool))


def make_client(target: S3Target, *, pool: int = 10) -> S3Calls:
    """A boto3 S3 client for `target` with botocore retries off (thread-safe)."""
    import boto3  # noqa: PLC0415 - executor-side dependency
    from botocore.config import Config  # noqa: PLC0415

    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max(1, pool),
        connect_timeout=10,
        read_timeout=60,
    )
    client: S3Calls = boto3.session.Session().client(
        "s3", endpoint_url=target.endpoint_url, region_name=target.region, config=config
    )
    return client


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


@dataclass(slots=True)
class S3Executor:
    """One task's connection to the bucket (an `gcd.storage.executor.ExecutorClient`)."""

    target: S3Target
    client: S3Calls
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep

    def _call(self, operation: Callable[[], T], what: str) -> T:
        return call_with_retries(
            operation, what=what, backoff=self.target.backoff, rng=self.rng, sleep=self.sleep
        )

    def list_prefix(
        self,
        prefix: str,
        *,
        skip: SkipAhead | None = None,
        on_request: Callable[[], None] = lambda: None,
    ) -> Iterator[Listed]:
        """Every object (every version, with `target.versions`) under `prefix`."""
        lister, operation = (
            (self._versions_page, "ListObjectVersions")
            if self.target.versions
            else (self._objects_page, "ListObjectsV2")
        )
        what = f"{operation} s3://{self.target.bucket}/{prefix}"

        def page(cursor: Cursor) -> Page:
            params: dict[str, Any] = {
                "Bucket": self.target.bucket,
                "Prefix": prefix,
                "MaxKeys": _PAGE,
            }
            on_request()
            return self._call(functools.partial(lister, params, cursor), what)

        return walk_pages(page, prefix, skip)

    def _objects_page(self, params: dict[str, Any], cursor: Cursor) -> Page:
        if cursor.token is not None:
            params["ContinuationToken"] = cursor.token
        elif cursor.start_after is not None:
            params["StartAfter"] = cursor.start_after
        page = self.client.list_objects_v2(**params)
        rows: list[Listed] = [
            (
                str(item["Key"]),
                int(item.get("Size", 0)),
                float(item["LastModified"].timestamp()),
                None,
                True,
                False,
            )
            for item in page.get("Contents", ())
        ]
        return rows, page.get("NextContinuationToken") if page.get("IsTruncated") else None

    def _versions_page(self, params: dict[str, Any], cursor: Cursor) -> Page:
        """One ListObjectVersions page as rows, keys ascending (S3's order within a key)."""
        if cursor.token is not None:
            key_marker, _, version_marker = cursor.token.partition(_MARKER_SEPARATOR)
            params["KeyMarker"] = key_marker
            if version_marker:
                params["VersionIdMarker"] = version_marker
        elif cursor.start_after is not None:
            params["KeyMarker"] = cursor.start_after
        page = self.client.list_object_versions(**params)
        rows: list[Listed] = [
            (
                item["Key"],
                int(item.get("Size", 0)),
                float(item["LastModified"].timestamp()),
                str(item["VersionId"]),
                bool(item.get("IsLatest", False)),
                marker,
            )
            for marker, items in (
                (False, page.get("Versions", ())),
                (True, page.get("DeleteMarkers", ())),
            )
            for item in items
        ]
        rows.sort(key=lambda row: row[0])  # stable: versions and markers of a key stay together
        token = None
        if page.get("IsTruncated"):
            token = str(page.get("NextKeyMarker") or (rows[-1][0] if rows else ""))
            if page.get("NextVersionIdMarker"):
                token += _MARKER_SEPARATOR + str(page["NextVersionIdMarker"])
        return rows, token

    def delete_keys(
        self,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None] = lambda _count: None,
        on_request: Callable[[], None] = lambda: None,
        on_markers: Callable[[Sequence[tuple[str, str]]], None] = lambda _markers: None,
    ) -> dict[str, str | None]:
        """Delete up to 1000 keys, or versions (`gcd.rules.versions` targets: a key, or a
        key and a version id); target -> None when deleted, else the final error text
        (``"Code: message"``). A key XML 1.0 cannot carry is never sent."""
        bucket = self.target.bucket
        outcome: dict[str, str | None] = {}
        remaining = []
        for key in keys:
            unsafe = xml_unsafe_reason(split_target(key)[0])
            if unsafe is None:
                remaining.append(key)
            else:
                outcome[key] = f"UnsafeKey: kept, never sent: {unsafe}"

        def send(batch: list[str]) -> tuple[Sequence[str], Sequence[KeyFailure]]:
            def request() -> dict[str, Any]:
                pace(len(batch))
                on_request()
                body = {"Objects": [_object(each) for each in batch], "Quiet": False}
                return self.client.delete_objects(Bucket=bucket, Delete=body)

            answer = self._call(request, f"DeleteObjects on s3://{bucket}")
            result = DeleteResult.from_answer(answer, batch)
            if result.markers:
                on_markers(result.markers)
            return result.deleted, result.errors

        outcome.update(
            delete_triaged(
                remaining,
                send,
                backoff=self.target.backoff,
                rng=self.rng,
                sleep=self.sleep,
                unanswered="not reported by DeleteObjects",
            )
        )
        return outcome

    def exists(self, key: str) -> bool:
        """True when object `key` exists (one ListObjectsV2 of it, retried)."""
        bucket = self.target.bucket
        page = self._call(
            lambda: self.client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1),
            f"ListObjectsV2 s3://{bucket}/{key}",
        )
        return any(item["Key"] == key for item in page.get("Contents", ()))

    def put_object(self, key: str, body: bytes) -> None:
        """PutObject `key` (a journal segment), retried."""
        bucket = self.target.bucket
        self._call(
            lambda: self.client.put_object(Bucket=bucket, Key=key, Body=body),
            f"PutObject s3://{bucket}/{key}",
        )


def _object(target: str) -> dict[str, str]:
    """One entry of a DeleteObjects request: the key, and the version id if any."""
    key, version_id = split_target(target)
    return {"Key": key} if version_id is None else {"Key": key, "VersionId": version_id}
