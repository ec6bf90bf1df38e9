"""What a DeleteObjects answer means for each key sent, and which error codes say what.

Design notes: docs/internals/rules.md, `gcd.rules.triage`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

__all__ = [
    "KEY_FAULT_CODES",
    "RETRYABLE_CODES",
    "SPLIT_CODES",
    "THROTTLE_CODES",
    "Failure",
    "RequestFailure",
    "Triage",
    "request_failure",
    "retryable_code",
    "triage",
]

RETRYABLE_CODES: Final = frozenset(
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
"""S3 error codes that mean "try again later" (request level or per key)."""

THROTTLE_CODES: Final = frozenset(
    {
        "SlowDown",
        "503",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
    }
)
"""Retryable codes that ask for fewer requests: the deleter's AIMD limit halves."""

SPLIT_CODES: Final = frozenset(
    {"MalformedXML", "InvalidArgument", "InvalidRequest", "KeyTooLongError", "InvalidURI"}
)
"""Whole-request failures that may come from one key: the request is bisected.

InvalidRequest is also what `gcd.storage.s3.client` makes of the client refusing to write a request
(botocore's parameter validation, e.g. an empty key)."""


KEY_FAULT_CODES: Final = frozenset({"500", "InternalError", "502"})
"""Retryable whole-request failures that may come from one key: bisected once retries are
spent. Not throttling (503, SlowDown: the store's load), not a connection failure or a
timeout (the path's: halves would each wait their own deadline)."""


def retryable_code(code: str) -> bool:
    """True when a request or key that failed with `code` may succeed if sent again."""
    return code in RETRYABLE_CODES


class Failure(Protocol):
    """A key the answer says was not deleted (`gcd.storage.objectstore.KeyFailure`)."""

    @property
    def key(self) -> str:
        """The key, as the answer names it."""
        ...

    @property
    def code(self) -> str:
        """The service's error code."""
        ...


F = TypeVar("F", bound=Failure)


@dataclass(frozen=True, slots=True)
class Triage(Generic[F]):
    """Every key of one request, sorted: `deleted`, `retry` (send again), `failed` (final).

    `retry` lists the keys that failed with a retryable code, in the answer's order,
    then the keys the answer did not mention, in the order they were sent;
    `retry_failures` are the failures behind the first part.
    """

    deleted: tuple[str, ...]
    retry: tuple[str, ...]
    retry_failures: tuple[F, ...]
    failed: tuple[F, ...]


def triage(sent: Sequence[str], deleted: Iterable[str], failures: Sequence[F]) -> Triage[F]:
    """Sort the keys of a request by what its answer says (see the module docstring).

    `sent` are the keys of the request, `deleted` and `failures` the answer's two lists;
    keys the answer names that were not sent are ignored.
    """
    listed = tuple(deleted)
    if not failures and listed == tuple(sent):  # the usual answer: every key, in order
        return Triage(tuple(dict.fromkeys(listed)), (), (), ())
    asked = set(sent)
    failed_keys = {failure.key for failure in failures}
    gone = tuple(dict.fromkeys(key for key in listed if key in asked and key not in failed_keys))
    retry_failures = tuple(f for f in failures if f.key in asked and retryable_code(f.code))
    final = tuple(f for f in failures if f.key in asked and not retryable_code(f.code))
    answered = set(gone) | failed_keys
    unmentioned = [key for key in sent if key not in answered]
    retry = tuple(dict.fromkeys([*(f.key for f in retry_failures), *unmentioned]))
    return Triage(gone, retry, retry_failures, final)


class RequestFailure(enum.Enum):
    """What the deleter does with keys whose whole DeleteObjects request failed."""

    RETRY = "retry"
    """Send the same keys again after a backoff (a retryable failure)."""
    SPLIT = "split"
    """Send each half alone: one key may be what the store refused."""
    SUSPECT = "suspect"
    """A lone key refused as a poison key would be: decided once the batch is done."""
    FAIL = "fail"
    """Final: count the keys as errors."""


def request_failure(
    code: str, retryable: bool, keys: int, *, retries_left: bool = True
) -> RequestFailure:
    """What to do after a request of `keys` keys failed as a whole with `code`;
    `retries_left`: the retry budget of these keys is not spent yet."""
    if retryable and retries_left:
        return RequestFailure.RETRY
    if code in SPLIT_CODES or (retryable and code in KEY_FAULT_CODES):
        return RequestFailure.SPLIT if keys > 1 else RequestFailure.SUSPECT
    return RequestFailure.FAIL
