"""botocore exceptions -> our errors: the one translation of S3 client failures.

While sweeping, `translate_error` makes every failure a `StorageError` with the S3
error code (or the HTTP status, or "ConnectionError"/"Timeout") and whether a retry may
help. Used by the async sweeper's store (`gcd.storage.s3.client`, aiobotocore) and by the Spark
executors' boto3 calls (`gcd.storage.s3.executor`). At start, `preflight_failure` says what
the one preflight LIST's failure means (`gcd.storage.s3.client.preflight`): a `ConfigError`
naming what only the operator can fix (no credentials, endpoint unreachable, no such
bucket, access denied, rejected credentials, the wrong region), or a retryable
`StorageError` when S3 is throttling or failing.

This module imports botocore only, so Spark executors need boto3 but not aiobotocore,
aiohttp or structlog; an aiohttp error is recognised when aiohttp is loaded (only
aiobotocore raises them).
"""

from __future__ import annotations

import sys
from typing import Final

from botocore import exceptions as botocore_errors
from botocore.parsers import ResponseParserError

from gcd.rules.triage import RETRYABLE_CODES
from l0gc.errors import CREDENTIALS_REJECTED, ConfigError, L0gcError, StorageError

__all__ = ["RETRYABLE_STATUS", "answer_error", "preflight_failure", "translate_error"]

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
        return answer_error(operation, status, error.get("Code"), error.get("Message"))
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


def answer_error(
    operation: str, status: int, code: object | None, message: object | None
) -> StorageError:
    """The StorageError for an S3 error answer: its status, and the error Code and Message
    its body gave (None or "" when it gave none: the code is then the status)."""
    name = str(code or status or "Unknown")
    text = str(message or name)
    retryable = name in RETRYABLE_CODES or status in RETRYABLE_STATUS
    return StorageError(f"{operation} failed: {text}", code=name, retryable=retryable)


# -- at start: what only the operator can fix (`gcd.storage.s3.client.preflight`) ---------------

_WRONG_REGION = frozenset(
    {
        "PermanentRedirect",
        "AuthorizationHeaderMalformed",
        "IllegalLocationConstraintException",
        "301",
    }
)
_NO_CREDENTIALS = (botocore_errors.NoCredentialsError, botocore_errors.PartialCredentialsError)
_NOT_REACHED = (
    botocore_errors.EndpointConnectionError,
    botocore_errors.ConnectionClosedError,
    botocore_errors.ConnectTimeoutError,
    botocore_errors.ReadTimeoutError,
    botocore_errors.HTTPClientError,
    ConnectionError,
    TimeoutError,
)


def _tls_reason(exc: BaseException) -> str:
    """OpenSSL's words for a failed verification (botocore wraps aiohttp's error, which
    holds the `ssl.SSLCertVerificationError`), else the error's own."""
    cause = getattr(exc, "kwargs", {}).get("error") or exc
    verify = getattr(getattr(cause, "certificate_error", None), "verify_message", None)
    return str(verify or cause)[:200]


def preflight_failure(
    exc: BaseException, bucket: str, prefix: str, endpoint: str, region: str | None
) -> tuple[L0gcError, bool]:
    """What to report when the preflight LIST of s3://`bucket`/`prefix` raised `exc`, and
    whether another try may help. ConfigError (exit 2) for what only the operator can fix."""
    where = f"s3://{bucket}/{prefix} at {endpoint}"
    if isinstance(exc, _NO_CREDENTIALS):
        return ConfigError(
            f"no AWS credentials found to list {where}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or give the process a role (IRSA, Pod "
            "Identity, instance profile; see docs/kubernetes.md)"
        ), False
    if isinstance(exc, botocore_errors.SSLError):
        return ConfigError(
            f"the S3 endpoint {endpoint} failed TLS verification ({_tls_reason(exc)}): if a "
            "private CA signed its certificate, set AWS_CA_BUNDLE (or ca_bundle in the AWS "
            "profile) to that CA's PEM file; check that --endpoint-url names the host the "
            "certificate is for"
        ), False
    if isinstance(exc, (*_NOT_REACHED, *_aiohttp_errors())):
        cause = getattr(exc, "kwargs", {}).get("error") or exc  # botocore wraps the OS error
        reason = str(cause).strip() or type(cause).__name__
        return ConfigError(
            f"cannot reach the S3 endpoint {endpoint} ({reason[:160]}): check "
            "--endpoint-url / L0GC_ENDPOINT_URL and --region, DNS and the network"
        ), True
    if not isinstance(exc, botocore_errors.ClientError):
        return ConfigError(
            f"listing {where} failed at start: {exc!r}; check --bucket, --endpoint-url and --region"
        ), False
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    status = int(meta.get("HTTPStatusCode") or 0)
    code = str(error.get("Code") or status or "Unknown")
    message = str(error.get("Message") or code)
    if code == "NoSuchBucket":
        return ConfigError(
            f"bucket {bucket!r} does not exist at {endpoint}: check --bucket / L0GC_BUCKET "
            "(and --endpoint-url, --region)"
        ), False
    if code in {"AccessDenied", "AllAccessDisabled", "403"}:
        return ConfigError(
            f"access denied listing {where} ({code}: {message}): the credentials need "
            f"s3:ListBucket on arn:aws:s3:::{bucket} (docs/operations.md, least-privilege "
            "IAM policy), or --bucket names the wrong bucket"
        ), False
    if code in CREDENTIALS_REJECTED:
        return ConfigError(
            f"S3 rejected the credentials listing {where} ({code}: {message}): check "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE, and refresh an "
            "expired session token"
        ), False
    if code in _WRONG_REGION:
        headers = meta.get("HTTPHeaders", {})
        actual = error.get("Region") or headers.get("x-amz-bucket-region")
        if actual and actual != region:
            return ConfigError(
                f"bucket {bucket!r} is in region {actual}, not {region or 'the default'}: "
                f"pass --region {actual} (env L0GC_REGION)"
            ), False
        return ConfigError(
            f"listing {where} answered {code} ({message}): the bucket is in another region "
            f"than {region or 'the default'}; pass its region with --region (env L0GC_REGION)"
        ), False
    if code in RETRYABLE_CODES or status in RETRYABLE_STATUS:
        return StorageError(
            f"listing {where} failed at start: {message} ({code}); S3 is throttling or "
            "failing: try again later",
            code=code,
            retryable=True,
        ), True
    return ConfigError(
        f"listing {where} failed at start: {code}: {message}; check --bucket, "
        "--endpoint-url and --region"
    ), False
