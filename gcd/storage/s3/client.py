"""`ObjectStore` on S3 (or any S3-compatible endpoint) through aiobotocore.

Design notes: docs/internals/storage.md, `gcd.storage.s3.client`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import aiohttp
import structlog
from aiobotocore.config import AioConfig
from aiobotocore.parsers import AioResponseParserFactory, AioRestXMLParser
from aiobotocore.session import get_session
from botocore import exceptions as botocore_errors
from botocore import handlers as botocore_handlers
from botocore.loaders import create_loader
from botocore.parsers import ResponseParserError

from gcd.rules.backoff import Backoff
from gcd.rules.versions import SEPARATOR, split_target
from gcd.storage.objectstore import (
    DeleteResult,
    KeyFailure,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoreFeatures,
    small_object,
)
from gcd.storage.s3.errors import preflight_failure, translate_error
from gcd.storage.s3.leanpath import LeanPath
from gcd.storage.s3.settings import S3Settings
from gcd.storage.s3.wire import (
    delete_body,
    error_document,
    parse_s3_timestamp,
    read_delete_result,
    read_listing,
    refuse_doctype,
)
from l0gc.errors import StorageError

__all__ = [
    "FEATURES_TTL_S",
    "SINGLE_DELETES_IN_FLIGHT",
    "S3ObjectStore",
    "content_md5",
    "directory_bucket",
    "error_in_200",
    "preflight",
]

FEATURES_TTL_S = 300.0
"""How long `detect`'s answer is used before versioning and Object Lock are read again."""
SINGLE_DELETES_IN_FLIGHT = 16
"""DeleteObject requests in flight per batch once DeleteObjects is known unsupported."""
_MARKER_SEPARATOR = "\x00"  # joins KeyMarker and VersionIdMarker in one continuation token

log = structlog.get_logger("gcd.s3store")

_LOADER = create_loader()
"""botocore's model loader, shared by every client of the process: it caches the parsed
S3 model, which each new session would otherwise read and parse again (~0.1 s of CPU)."""


def directory_bucket(bucket: str) -> bool:
    """True for an S3 Express One Zone directory bucket (its name ends ``--x-s3``)."""
    return bucket.endswith("--x-s3")


def content_md5(params: dict[str, Any], **_: Any) -> None:
    """`before-call.s3.DeleteObjects` handler: send Content-MD5, not botocore's CRC32.

    botocore >= 1.36 answers DeleteObjects' "checksum required" with a CRC32 header;
    servers of the MinIO era, Ceph RGW versions and others refuse a DeleteObjects
    without Content-MD5 (`MissingContentMD5`, boto3 #4392). AWS S3 accepts either.
    Not registered for directory buckets (S3 Express), which refuse MD5 and keep the
    CRC32."""
    checksum = params.get("context", {}).get("checksum", {})
    checksum.pop("request_algorithm", None)  # no CRC32 header then
    checksum.pop("request_algorithm_header", None)
    body = params.get("body")
    if isinstance(body, bytes):
        digest = hashlib.md5(body, usedforsecurity=False).digest()
        params["headers"]["Content-MD5"] = base64.b64encode(digest).decode()


def error_in_200(response_dict: dict[str, Any], **_: Any) -> None:
    """`before-parse` handler: a 200 answer whose XML root element is ``<Error>`` is an S3
    error (S3 may send one after the 200 status, e.g. for DeleteObjects): make it a 500.

    Looks only at the body's start (the XML declaration, then the root tag), where
    botocore's handler parses the whole body; streamed bodies are not looked at."""
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes):
        return
    if error_document(body):
        response_dict["status_code"] = 500
        log.debug("s3.error_in_200", body=body[:300])


def lean_delete_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """`before-parameter-build.s3.DeleteObjects` handler: a body built by
    `gcd.storage.s3.wire.delete_body`, passed as ``L0gcBody``, is kept for `lean_delete_body`
    (botocore then serialises an empty ``Delete``, not 1,000 objects)."""
    body = params.pop("L0gcBody", None)
    if body is not None:
        context["l0gc_body"] = body
        params["Delete"] = {}


def lean_delete_body(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """`before-call.s3.DeleteObjects` handler: send the body `lean_delete_params` kept.
    Runs before the checksum (Content-MD5 or CRC32) is computed, so that covers it."""
    body = context.pop("l0gc_body", None)
    if body is not None:
        params["body"] = body


def _verify(endpoint_url: str | None) -> bool | None:
    """botocore's `verify` for `endpoint_url`: False for a plain http:// endpoint, else
    None (botocore's default: verify certificates, AWS_CA_BUNDLE honoured).

    With verification on, aiobotocore builds an SSL context and loads the CA bundle when
    it opens its connection pool (~0.1 s of CPU, bench/RESULTS.md §26) even when no
    connection will ever use TLS. For an http:// endpoint nothing is verified anyway:
    the only TLS such a client could meet is an https:// redirect named by an
    unauthenticated http answer, which verification would not make trustworthy."""
    if endpoint_url is not None and endpoint_url.lower().startswith("http://"):
        return False
    return None


class _LeanParserFactory(AioResponseParserFactory):  # type: ignore[misc]
    """aiobotocore's parsers, but a 2xx ListObjectsV2 or DeleteObjects answer is read by
    `gcd.storage.s3.wire` (errors, and every other operation, by botocore)."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "rest-xml":
            return _LeanRestXMLParser(**self._defaults)
        return super().create_parser(protocol_name)


class _LeanRestXMLParser(AioRestXMLParser):  # type: ignore[misc]
    def _do_parse(self, response: dict[str, Any], shape: Any) -> Any:
        name = getattr(shape, "name", None)
        parsed: dict[str, Any]
        if name == "ListObjectsV2Output":
            parsed = {"L0gcListing": read_listing(response["body"])}
        elif name == "DeleteObjectsOutput":
            parsed = read_delete_result(response["body"])
        else:
            return super()._do_parse(response, shape)
        parsed["ResponseMetadata"] = self._populate_response_metadata(response)
        return parsed

    def _parse_xml_string_to_dom(self, xml_string: bytes) -> Any:
        """botocore's parse of every other answer and every error body (always read as
        UTF-8, so the byte check sees any DOCTYPE): a DOCTYPE is refused, not expanded."""
        refuse_doctype(xml_string, "S3")
        return super()._parse_xml_string_to_dom(xml_string)


_TRANSLATED = (
    botocore_errors.BotoCoreError,
    ResponseParserError,
    botocore_errors.ClientError,
    aiohttp.ClientError,
    ConnectionError,
    asyncio.TimeoutError,
)


class S3ObjectStore(ObjectStore):
    """One bucket through an open aiobotocore S3 client."""

    def __init__(self, client: Any, bucket: str, *, lean: LeanPath | None = None) -> None:
        # Any: our event hooks add parameters (L0gcBody) and answers (L0gcListing) that
        # types_aiobotocore_s3 does not know.
        self._client = client
        self.bucket = bucket
        self._lean = lean  # `gcd.storage.s3.leanpath`; None: botocore sends every request
        self._ordered = not directory_bucket(bucket)  # else: `--listing unordered`
        self._features: StoreFeatures | None = None
        self._features_at = 0.0
        self._batch: bool | None = None  # DeleteObjects supported? None: not tried yet
        self._quiet = True  # quiet DeleteObjects answers readable (`_may_be_quiet`)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: S3Settings, *, lean: bool = True) -> AsyncIterator[S3ObjectStore]:
        """Open a client for `settings` (closed on exit); `lean=False`: botocore sends every
        request (the lean path is never armed)."""
        config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=settings.max_pool_connections,
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            parameter_validation=False,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = get_session()
        session.register_component("data_loader", _LOADER)
        lean = lean and not directory_bucket(settings.bucket)  # S3 Express: session auth
        # botocore's documented hooks (a session component, `ResponseParserFactory`
        # defaults); the session is this store's own, so no other client is affected.
        parsers = _LeanParserFactory()
        parsers.set_parser_defaults(timestamp_parser=parse_s3_timestamp)
        session.register_component("response_parser_factory", parsers)
        try:
            context = session.create_client(
                "s3",
                endpoint_url=settings.endpoint_url,
                region_name=settings.region,
                config=config,
                verify=_verify(settings.endpoint_url),
            )
            client = await context.__aenter__()
        except _TRANSLATED as exc:
            raise translate_error(exc, "opening the S3 client") from exc
        events = client.meta.events  # this client's own copy of the session's handlers
        events.unregister("before-parse.s3.*", botocore_handlers._handle_200_error)
        events.register_first("before-parse.s3.*", error_in_200)
        events.register("before-parameter-build.s3.DeleteObjects", lean_delete_params)
        events.register_first("before-call.s3.DeleteObjects", lean_delete_body)
        if not directory_bucket(settings.bucket):
            events.register("before-call.s3.DeleteObjects", content_md5)
        try:
            async with contextlib.AsyncExitStack() as stack:
                path = None
                if lean:
                    verify = _verify(settings.endpoint_url)
                    opening = LeanPath.open(settings, client, session, verify=verify)
                    path = await stack.enter_async_context(opening)
                yield cls(client, settings.bucket, lean=path)
        finally:
            await context.__aexit__(None, None, None)

    @property
    def lean_armed(self) -> bool:
        """Whether ListObjectsV2 and DeleteObjects are now sent on the lean path
        (`gcd.storage.s3.leanpath`)."""
        return self._lean is not None and self._lean.armed

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        operation = f"ListObjectsV2 s3://{self.bucket}/{prefix}"
        if self._lean is not None and self._lean.armed:
            page = await self._lean.list_page(
                operation,
                prefix,
                start_after=start_after,
                continuation_token=continuation_token,
                max_keys=max_keys,
            )
            if page is not None:
                return page
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if continuation_token is not None:
            params["ContinuationToken"] = continuation_token
        elif start_after is not None:
            params["StartAfter"] = start_after
        try:
            response = await self._client.list_objects_v2(**params)
        except _TRANSLATED as exc:
            raise translate_error(exc, operation) from exc
        listing = response["L0gcListing"]
        token = listing.next_token if listing.truncated else None
        request_id = response.get("ResponseMetadata", {}).get("RequestId")
        if self._lean is not None:
            self._lean.arm()
        return ListPage(listing.objects, token, request_id)

    async def list_versions_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One ListObjectVersions page: every version and delete marker, keys ascending.

        `start_after` is the KeyMarker (the listing starts after that key); the
        continuation token is the answer's NextKeyMarker and NextVersionIdMarker."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if continuation_token is not None:
            key_marker, _, version_marker = continuation_token.partition(_MARKER_SEPARATOR)
            params["KeyMarker"] = key_marker
            if version_marker:
                params["VersionIdMarker"] = version_marker
        elif start_after is not None:
            params["KeyMarker"] = start_after
        try:
            response = await self._client.list_object_versions(**params)
        except _TRANSLATED as exc:
            raise translate_error(exc, f"ListObjectVersions s3://{self.bucket}/{prefix}") from exc
        entries = [
            ObjectInfo(
                item["Key"],
                int(item.get("Size", 0)),
                item["LastModified"].timestamp(),
                str(item["VersionId"]),
                marker,
                bool(item.get("IsLatest")),
            )
            for marker, items in (
                (False, response.get("Versions", ())),
                (True, response.get("DeleteMarkers", ())),
            )
            for item in items
        ]
        entries.sort(key=lambda entry: entry.key)  # stable: S3's order within a key is kept
        token = None
        if response.get("IsTruncated"):
            token = str(response.get("NextKeyMarker") or (entries[-1].key if entries else ""))
            if response.get("NextVersionIdMarker"):
                token += _MARKER_SEPARATOR + str(response["NextVersionIdMarker"])
        request_id = response.get("ResponseMetadata", {}).get("RequestId")
        return ListPage(tuple(entries), token, request_id)

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """DeleteObjects for 1-1000 targets (`gcd.rules.versions`: a key, or a key and a
        version id); DeleteObject per target when the store has no batch delete."""
        if not 1 <= len(keys) <= 1000:
            raise StorageError(
                f"DeleteObjects takes 1-1000 keys, got {len(keys)}",
                code="InvalidRequest",
                retryable=False,
            )
        if self._batch is False:
            return await self._delete_singly(keys)
        quiet = self._may_be_quiet(keys)
        try:
            response = await self._delete_objects(delete_body(keys, quiet=quiet))
        except StorageError as error:
            if error.code != "NotImplemented" or self._batch:
                raise
            self._no_batch_delete(error)
            return await self._delete_singly(keys)
        self._batch = True
        if not quiet:
            return DeleteResult.from_answer(response, keys)
        result = DeleteResult.from_quiet_answer(response, keys)
        if result is not None:
            return result
        # An error named a key this request did not send: silence cannot be read.
        log.warning(
            "s3.quiet_delete_unreadable",
            bucket=self.bucket,
            keys=len(keys),
            fallback="verbose DeleteObjects answers from now on",
        )
        self._quiet = False
        return await self.delete_batch(keys)

    async def _delete_objects(self, body: bytes) -> dict[str, Any]:
        """One DeleteObjects of `body`: the answer as `read_delete_result` gives it; on the
        lean path when it is armed, else (or when this answer disarmed it) by botocore."""
        operation = f"DeleteObjects on s3://{self.bucket}"
        if self._lean is not None and self._lean.armed:
            answer = await self._lean.delete_objects(operation, body)
            if answer is not None:
                return answer
        try:
            response: dict[str, Any] = await self._client.delete_objects(
                Bucket=self.bucket, Delete={}, L0gcBody=body
            )
        except _TRANSLATED as exc:
            raise translate_error(exc, operation) from exc
        return response

    def _may_be_quiet(self, targets: Sequence[str]) -> bool:
        """Whether this request may ask for a quiet answer (failures only).

        Only where no delete of it can write a delete marker, whose version id only a
        verbose answer carries (the undo window's hidden keys): the bucket was detected
        unversioned (``versioning == "off"``), or every target names a version. Not
        before detection, not when versioning is "unknown", and never again once a quiet
        answer could not be read (`DeleteResult.from_quiet_answer`)."""
        if not self._quiet:
            return False
        if self._features is not None and self._features.versioning == "off":
            return True
        return all(SEPARATOR in target for target in targets)

    def _no_batch_delete(self, error: StorageError) -> None:
        """DeleteObjects is not implemented: logged once (requests in flight may learn it
        at the same time), single deletes from now on."""
        if self._batch is None:
            log.warning(
                "s3.batch_delete_unsupported",
                bucket=self.bucket,
                fallback="one DeleteObject per key",
                message=str(error),
            )
        self._batch = False

    async def _delete_singly(self, targets: Sequence[str]) -> DeleteResult:
        """One DeleteObject per target, `SINGLE_DELETES_IN_FLIGHT` at a time; a request that
        fails is that target's failure (the deleter retries or counts it)."""
        gate = asyncio.Semaphore(SINGLE_DELETES_IN_FLIGHT)

        async def one(target: str) -> KeyFailure | tuple[str, str] | None:
            key, version_id = split_target(target)
            params = {"Bucket": self.bucket, "Key": key}
            if version_id is not None:
                params["VersionId"] = version_id
            async with gate:
                try:
                    answer = await self._client.delete_object(**params)
                except _TRANSLATED as exc:
                    error = translate_error(exc, f"DeleteObject s3://{self.bucket}/{key}")
                    return KeyFailure(target, error.code, str(error))
            if version_id is None and answer.get("DeleteMarker") and answer.get("VersionId"):
                return key, str(answer["VersionId"])  # the delete marker it wrote
            return None

        outcomes = await asyncio.gather(*(one(target) for target in targets))
        failures = tuple(bad for bad in outcomes if isinstance(bad, KeyFailure))
        deleted = tuple(
            t for t, bad in zip(targets, outcomes, strict=True) if not isinstance(bad, KeyFailure)
        )
        markers = tuple(bad for bad in outcomes if isinstance(bad, tuple))
        return DeleteResult(deleted, failures, markers)

    @property
    def detected(self) -> StoreFeatures:
        """What is known now: the last detection, and batch support learnt so far."""
        known = self._features or StoreFeatures(versioning="unknown", object_lock=None)
        return replace(known, ordered_listing=self._ordered, batch_delete=self._batch)

    async def detect(self) -> StoreFeatures:
        """Versioning and Object Lock, read at most every `FEATURES_TTL_S` seconds.

        A read that fails (no s3:GetBucketVersioning, a store without the call) says
        "unknown" and is logged once: the round then deletes as on an unversioned bucket.
        """
        now = time.monotonic()
        if self._features is None or now - self._features_at > FEATURES_TTL_S:
            versioning, lock = await self._versioning(), await self._object_lock()
            if versioning == "unknown" and (
                self._features is None or self._features.versioning != "unknown"
            ):
                log.warning(
                    "s3.versioning_unknown",
                    bucket=self.bucket,
                    fix="allow s3:GetBucketVersioning (docs/operations.md)",
                )
            self._features = StoreFeatures(versioning, lock)
            self._features_at = now
        return self.detected

    async def _versioning(self) -> str:
        if directory_bucket(self.bucket):
            return "off"  # directory buckets have no versioning
        try:
            answer = await self._client.get_bucket_versioning(Bucket=self.bucket)
        except _TRANSLATED as exc:
            log.debug("s3.get_bucket_versioning_failed", error=repr(exc))
            return "unknown"
        return str(answer.get("Status") or "off")

    async def _object_lock(self) -> bool | None:
        if directory_bucket(self.bucket):
            return False
        try:
            answer = await self._client.get_object_lock_configuration(Bucket=self.bucket)
        except botocore_errors.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in {
                "ObjectLockConfigurationNotFoundError",
                "NotImplemented",
                "NoSuchObjectLockConfiguration",
            }:
                return False
            log.debug("s3.get_object_lock_failed", code=code)
            return None
        except _TRANSLATED as exc:
            log.debug("s3.get_object_lock_failed", error=repr(exc))
            return None
        config = answer.get("ObjectLockConfiguration", {})
        return bool(config.get("ObjectLockEnabled") == "Enabled")

    async def lifecycle_rules(self) -> list[object] | None:
        """The bucket's lifecycle rules ([] when it has none); None when they cannot be
        read (no s3:GetLifecycleConfiguration, a store without the call)."""
        if directory_bucket(self.bucket):
            return []
        try:
            answer = await self._client.get_bucket_lifecycle_configuration(Bucket=self.bucket)
        except botocore_errors.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "NoSuchLifecycleConfiguration":
                return []
            log.debug("s3.get_lifecycle_failed", code=code)
            return None
        except _TRANSLATED as exc:
            log.debug("s3.get_lifecycle_failed", error=repr(exc))
            return None
        return list(answer.get("Rules") or [])

    async def lock_state(self, key: str, version_id: str) -> tuple[str, float | None]:
        """Why a version is locked and until when (one HeadObject); "unknown" when the HEAD
        fails (no s3:GetObjectVersion), "no lock found..." when it shows no lock."""
        try:
            head = await self._client.head_object(Bucket=self.bucket, Key=key, VersionId=version_id)
        except _TRANSLATED:
            return "unknown", None
        until = head.get("ObjectLockRetainUntilDate")
        until_s = until.timestamp() if isinstance(until, datetime) else None
        if head.get("ObjectLockLegalHoldStatus") == "ON":
            return "legal hold", until_s
        mode = head.get("ObjectLockMode")
        if mode:
            return f"retention {mode}", until_s
        # Refused, yet no lock on it: a permission, not Object Lock, refused the delete.
        return "no lock found: check s3:DeleteObjectVersion", until_s

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """A small object's body (at most `max_bytes`), or None when there is no such key."""
        try:
            response = await self._client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes=0-{max_bytes}"
            )
            async with response["Body"] as body:
                data: bytes = await body.read()
        except botocore_errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise translate_error(exc, f"GetObject s3://{self.bucket}/{key}") from exc
        except _TRANSLATED as exc:
            raise translate_error(exc, f"GetObject s3://{self.bucket}/{key}") from exc
        return small_object(data, max_bytes, f"s3://{self.bucket}/{key}")

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write a small object; with `if_absent`, only if no such key exists (else False)."""
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "Body": body,
            "ContentType": "application/json",
        }
        if if_absent:
            params["IfNoneMatch"] = "*"
        try:
            await self._client.put_object(**params)
        except botocore_errors.ClientError as exc:
            if if_absent and exc.response.get("Error", {}).get("Code") in {
                "PreconditionFailed",
                "ConditionalRequestConflict",
                "412",
            }:
                return False
            raise translate_error(exc, f"PutObject s3://{self.bucket}/{key}") from exc
        except _TRANSLATED as exc:
            raise translate_error(exc, f"PutObject s3://{self.bucket}/{key}") from exc
        return True


# -- preflight: is the bucket there and listable, before any round? ---------------------

PREFLIGHT_ATTEMPTS = 3
PREFLIGHT_CONNECT_TIMEOUT_S = 3.0
PREFLIGHT_READ_TIMEOUT_S = 10.0
_PREFLIGHT_BACKOFF = Backoff(base_s=0.5, cap_s=2.0, max_attempts=PREFLIGHT_ATTEMPTS)


async def preflight(
    settings: S3Settings,
    prefix: str,
    *,
    backoff: Backoff = _PREFLIGHT_BACKOFF,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> StoreFeatures:
    """Check that the bucket can be listed, before any round: ONE ListObjectsV2
    (MaxKeys=1) on `prefix`, tried `backoff.max_attempts` times (3) with a short
    connect timeout (3 s), so a misconfiguration fails in seconds with one message.

    Raises ConfigError naming the problem and the fix (no credentials, endpoint
    unreachable, no such bucket, access denied, credentials rejected, wrong region),
    or StorageError when S3 keeps throttling or failing (a retry later may help).
    Then reads what the bucket is (`S3ObjectStore.detect`), logs it once
    (`s3.detected`) and returns it.
    """
    probe = replace(
        settings,
        max_pool_connections=1,
        connect_timeout_s=min(settings.connect_timeout_s, PREFLIGHT_CONNECT_TIMEOUT_S),
        read_timeout_s=min(settings.read_timeout_s, PREFLIGHT_READ_TIMEOUT_S),
    )
    async with S3ObjectStore.open(probe, lean=False) as store:  # one LIST: not worth arming
        client = store._client  # the raw error names the bucket's region
        endpoint = settings.endpoint_url or f"AWS S3 ({client.meta.region_name})"
        for attempt in range(backoff.max_attempts):
            try:
                await client.list_objects_v2(Bucket=settings.bucket, Prefix=prefix, MaxKeys=1)
            except _TRANSLATED as exc:
                problem, retry = preflight_failure(
                    exc, settings.bucket, prefix, endpoint, settings.region
                )
                if not retry or attempt + 1 >= backoff.max_attempts:
                    raise problem from exc
                log.debug("s3.preflight_retry", attempt=attempt + 1, error=str(problem))
                await sleep(backoff.delay(attempt, random.random()))
            else:
                features = await store.detect()
                log.info("s3.detected", bucket=settings.bucket, **features.to_dict())
                return features
        raise AssertionError("unreachable: the last attempt returns or raises")
