"""botocore exceptions -> `StorageError`: the one translation of S3 client failures.

Used by the async sweeper's store (`gcd.storage.s3`, aiobotocore) and by the Spark
executors' boto3 calls (`gcd.spark.s3client`). This module imports botocore only, so
Spark executors need boto3 but not aiobotocore, aiohttp or structlog; an aiohttp
error is recognised when aiohttp is loaded (only aiobotocore raises them).
"""

from __future__ import annotations

import sys
from typing import Final

from botocore import exceptions as botocore_errors
from botocore.parsers import ResponseParserError

from gcd.errors import StorageError
from gcd.rules.triage import RETRYABLE_CODES

__all__ = ["RETRYABLE_STATUS", "translate_error"]

RETRYABLE_STATUS: Final = frozenset({500, 502, 503, 504})


def _aiohttp_errors() -> tuple[type[BaseException], ...]:
    aiohttp = sys.modules.get("aiohttp")
    error = getattr(aiohttp, "ClientError", None)
    return (error,) if isinstance(error, type) else ()


def translate_error(exc: BaseException, operation: str) -> StorageError:
    """The StorageError for a botocore/aiohttp exception raised by `operation`."""
    if isinstance(exc, botocore_errors.ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode") or 0)
        code = str(error.get("Code") or status or "Unknown")
        message = str(error.get("Message") or code)
        retryable = code in RETRYABLE_CODES or status in RETRYABLE_STATUS
        return StorageError(f"{operation} failed: {message}", code=code, retryable=retryable)
    no_credentials = botocore_errors.NoCredentialsError | botocore_errors.PartialCredentialsError
    if isinstance(exc, no_credentials):
        return StorageError(
            f"{operation} failed: no AWS credentials found (set AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a web identity / instance role)",
            code="NoCredentials",
            retryable=False,
        )
    if isinstance(exc, botocore_errors.ConnectTimeoutError | botocore_errors.ReadTimeoutError):
        return StorageError(f"{operation} timed out: {exc}", code="Timeout", retryable=True)
    if isinstance(exc, TimeoutError):
        return StorageError(f"{operation} timed out", code="Timeout", retryable=True)
    unreachable = (
        botocore_errors.EndpointConnectionError,
        botocore_errors.ConnectionClosedError,
        botocore_errors.HTTPClientError,
        ConnectionError,
        *_aiohttp_errors(),
    )
    if isinstance(exc, unreachable):
        message = f"{operation} could not reach the endpoint: {exc}"
        return StorageError(message, code="ConnectionError", retryable=True)
    if isinstance(exc, ResponseParserError):
        message = f"{operation} got an answer that could not be parsed (cut short?): {exc}"
        return StorageError(message, code="InternalError", retryable=True)
    if isinstance(exc, botocore_errors.ParamValidationError):
        message = f"{operation} was refused: {exc}"
        return StorageError(message, code="InvalidRequest", retryable=False)
    return StorageError(f"{operation} failed: {exc!r}", code="Unknown", retryable=False)
