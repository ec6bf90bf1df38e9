"""The sweeper side's own errors; every other error is `watermark.errors`'.

`StorageError` is the object store's: a failed request, with the service's error code
and whether retrying may help. It is an `Unavailable` (a dependency failed), so code
that stops deleting on any unavailable dependency catches it with etcd's.
"""

from __future__ import annotations

from watermark.errors import Unavailable

__all__ = ["StorageError"]


class StorageError(Unavailable):
    """An object-store call failed; `code` is the service's error code.

    `retryable` says whether the same call may succeed later (throttling, timeouts,
    5xx) or will keep failing (access denied, no such bucket).
    """

    def __init__(self, message: str, code: str, retryable: bool) -> None:
        super().__init__(message, code, retryable)
        self.message = message
        self.code = code
        self.retryable = retryable

    def __str__(self) -> str:
        advice = (
            "retryable: retry with backoff"
            if self.retryable
            else "not retryable: check credentials, bucket and permissions"
        )
        return f"{self.message} (code {self.code}; {advice})"
