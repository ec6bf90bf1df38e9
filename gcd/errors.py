"""The sweeper side's own errors; every other error is `watermark.errors`'.

`StorageError` is the object store's: a failed request, with the service's error code
and whether retrying may help. It is an `Unavailable` (a dependency failed), so code
that stops deleting on any unavailable dependency catches it with etcd's.
"""

from __future__ import annotations

from typing import Final

from watermark.errors import Unavailable

__all__ = ["AUTH_CODES", "LISTING_BROKEN", "MISSING_CODES", "StorageError"]

AUTH_CODES: Final = frozenset(
    {
        "401",
        "403",
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "InvalidClientTokenId",
        "NoCredentials",
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "forbidden",
        "unauthorized",
    }
)
"""Codes (S3, Azure, GCS reasons, HTTP statuses) that mean the credentials or their
permissions are the problem: the only failures whose advice is "check credentials"."""
MISSING_CODES: Final = frozenset({"NoSuchBucket", "ContainerNotFound", "notFound", "404"})
LISTING_BROKEN: Final = "ListingBroken"
"""Our code, not the store's: every request was answered, but the pages do not make a
listing (one sent back to a cursor it had already given, or too many of them)."""


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
        if self.retryable:
            advice = "retryable: retry with backoff"
        elif self.code in AUTH_CODES:
            advice = "not retryable: check the credentials and their permissions"
        elif self.code in MISSING_CODES:
            advice = "not retryable: check the bucket (container) name and the endpoint"
        elif self.code == LISTING_BROKEN:
            advice = "not retryable: the store answered, but its pages do not make a listing"
        else:
            advice = f"not retryable: the store refused the request with {self.code}"
        return f"{self.message} (code {self.code}; {advice})"
