"""The object-store interface the sweeper needs.

Two calls, both shaped after S3: `list_page` (one ListObjectsV2 request, keys in
ascending UTF-8 byte order, which for Python strings is code point order) and
`delete_batch` (one DeleteObjects request with Quiet=false, so the answer says which
keys went and which failed, each failure with its S3 error code). A failure of the
whole request raises `StorageError(message, code, retryable)`; the sweeper owns
retries and backoff, implementations never retry.

The in-memory fake (`gcd.testing.memory.MemoryObjectStore`) lives with the other test
and simulation support.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gcd.errors import StorageError

__all__ = [
    "RETRYABLE_CODES",
    "DeleteResult",
    "KeyFailure",
    "ListPage",
    "ObjectInfo",
    "ObjectStore",
    "status_fault",
]

# S3 error codes that mean "try again later" (request level or per key).
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "503",
        "500",
        "502",
        "504",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ConnectionError",
        "Timeout",
    }
)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object: key, size in bytes, LastModified as epoch seconds (UTC)."""

    key: str
    size: int
    last_modified_s: float


@dataclass(frozen=True, slots=True)
class ListPage:
    """One ListObjectsV2 answer; `next_token` is None on the last page."""

    objects: tuple[ObjectInfo, ...]
    next_token: str | None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class KeyFailure:
    """A key DeleteObjects did not delete, with the service's code and message."""

    key: str
    code: str
    message: str

    @property
    def retryable(self) -> bool:
        """True when deleting this key again later may succeed."""
        return self.code in RETRYABLE_CODES


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One DeleteObjects answer: what went, and what did not."""

    deleted: tuple[str, ...]
    errors: tuple[KeyFailure, ...] = ()


class ObjectStore(Protocol):
    """One bucket of an S3-compatible store, reduced to what the sweeper does."""

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One page of keys starting with `prefix`, ascending, after `start_after`."""
        ...

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """Delete up to 1000 keys in one request; deleting a missing key succeeds."""
        ...


def status_fault(code: str) -> StorageError:
    """The StorageError an S3 answer with this code becomes (retryable per RETRYABLE_CODES)."""
    return StorageError(f"injected {code}", code=code, retryable=code in RETRYABLE_CODES)
