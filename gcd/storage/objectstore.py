"""The object-store interface the sweeper needs.

Two calls, both shaped after S3: `list_page` (one ListObjectsV2 request, keys in
ascending UTF-8 byte order, which for Python strings is code point order) and
`delete_batch` (one DeleteObjects request with Quiet=false, so the answer says which
keys went and which failed, each failure with its S3 error code). A failure of the
whole request raises `StorageError(message, code, retryable)`, retryable per
`gcd.rules.triage.RETRYABLE_CODES`; the sweeper owns retries and backoff
(`gcd.storage.retry`), implementations never retry.

`ObjectStore` is the one statement of these calls: implementations (`gcd.storage.s3`,
`gcd.storage.azure`, `gcd.storage.gcs`, the fakes) conform to it, and their docs say only
what they add.

The in-memory fake (`gcd.testing.memory.MemoryObjectStore`) lives with the other test
and simulation support.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from gcd.errors import StorageError
from gcd.rules.triage import retryable_code

__all__ = [
    "DeleteResult",
    "KeyFailure",
    "ListOptions",
    "ListPage",
    "ObjectInfo",
    "ObjectStore",
    "status_fault",
]


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
        return retryable_code(self.code)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One DeleteObjects answer: what went, and what did not."""

    deleted: tuple[str, ...]
    errors: tuple[KeyFailure, ...] = ()

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> DeleteResult:
        """The result of an S3 DeleteObjects answer as boto3 and aiobotocore parse it.

        A failure without a code gets "Unknown", which is not retryable: a key is never
        taken for deleted unless the answer lists it as deleted.
        """
        deleted = tuple(item["Key"] for item in answer.get("Deleted", ()))
        errors = tuple(
            KeyFailure(
                key=item.get("Key", ""),
                code=str(item.get("Code", "Unknown")),
                message=str(item.get("Message", "")),
            )
            for item in answer.get("Errors", ())
        )
        return cls(deleted, errors)


class ListOptions(TypedDict, total=False):
    """`list_page`'s keyword arguments, for a store that wraps another and passes them on
    (``**options: Unpack[ListOptions]``) instead of restating the signature."""

    start_after: str | None
    continuation_token: str | None
    max_keys: int


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
        """One ListObjectsV2 page: up to `max_keys` keys starting with `prefix`, ascending.

        The page starts after `start_after`, or where `continuation_token` (the
        `ListPage.next_token` of the page before) says, which then wins; the listing
        goes on while `next_token` is not None.
        """
        ...

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """One DeleteObjects request (Quiet=false) for 1-1000 keys.

        Deleting a missing key succeeds. The answer says per key what happened
        (`gcd.rules.triage` sorts it); a failure of the whole request raises.
        """
        ...


def status_fault(code: str) -> StorageError:
    """The StorageError an S3 answer with this code becomes (`gcd.rules.triage` says
    whether it is retryable)."""
    return StorageError(f"injected {code}", code=code, retryable=retryable_code(code))
