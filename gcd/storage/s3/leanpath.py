"""When the S3 store's ListObjectsV2 and DeleteObjects take the lean path
(`gcd.storage.s3.lean`), and what its answers mean: armed from botocore's first listing
that succeeded, disarmed for good by an answer refusing a lean request.

Design notes: docs/internals/storage.md, `gcd.storage.s3.lean`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http.client
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final

import aiohttp
import structlog
from botocore.httpsession import ProxyConfiguration, get_cert_path
from botocore.parsers import ResponseParserError
from botocore.utils import get_environ_proxies

from gcd.storage.objectstore import ListPage
from gcd.storage.s3.errors import answer_error, translate_error
from gcd.storage.s3.lean import Credentials, Endpoint, LeanAnswer, LeanClient, learn_endpoint
from gcd.storage.s3.lean import open_http as open_http_session
from gcd.storage.s3.settings import S3Settings
from gcd.storage.s3.wire import error_document, read_delete_result, read_error, read_listing

__all__ = ["WRONG_REQUEST_STATUS", "LeanPath"]

log = structlog.get_logger("gcd.s3store")

WRONG_REQUEST_STATUS: Final = frozenset({400, 401, 403})
"""Beside any 3xx: answers that say a lean request was not acceptable (a signature, an
endpoint, a header, the credentials it presented). Unless its code is retryable, such an
answer disarms the lean path and the call is made again through botocore."""
_NETWORK = (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError)


def tls_context(verify: bool | None, ca_bundle: str | None) -> ssl.SSLContext | bool:
    """The lean path's TLS for botocore's `verify`: False (a plain http:// endpoint) is
    no TLS check; else certificates are verified against the CA bundle botocore would load
    (`ca_bundle`: AWS_CA_BUNDLE or the profile's, else botocore's own)."""
    if verify is False:
        return False
    return ssl.create_default_context(cafile=ca_bundle or get_cert_path(True))


async def session_credentials(session: Any) -> Credentials | None:
    """This request's credentials from the aiobotocore session the client was made from
    (the same provider chain; refreshable ones are refreshed when due), or None."""
    found = await session.get_credentials()
    if found is None:
        return None
    frozen = await found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        return None
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


class LeanPath:
    """One store's lean path: learning, armed, or off for good."""

    def __init__(
        self,
        bucket: str,
        http: aiohttp.ClientSession,
        credentials: Callable[[], Awaitable[Credentials | None]],
        proxies: ProxyConfiguration,
    ) -> None:
        self.bucket = bucket
        self._http = http
        self._credentials = credentials
        self._proxies = proxies
        self._seen: Endpoint | None = None  # botocore's last ListObjectsV2, before arming
        self._client: LeanClient | None = None
        self._off = False
        self._trusted = False  # a lean answer was read: connection errors are the network's

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, settings: S3Settings, client: Any, session: Any, *, verify: bool | None
    ) -> AsyncIterator[LeanPath]:
        """The lean path of `client` (an aiobotocore S3 client made from `session`): its
        aiohttp session sized and timed as `settings` say (closed on exit), learning from
        the client's ListObjectsV2 requests."""
        tls = tls_context(verify, session.get_config_variable("ca_bundle"))
        http = open_http_session(
            max_connections=settings.max_pool_connections,
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            tls=tls,
        )
        try:
            path = cls(
                settings.bucket,
                http,
                lambda: session_credentials(session),
                # botocore's proxies: the environment's for the client's endpoint, at start
                ProxyConfiguration(get_environ_proxies(client.meta.endpoint_url)),
            )
            client.meta.events.register("before-send.s3.ListObjectsV2", path.note)
            yield path
        finally:
            await http.close()

    @property
    def armed(self) -> bool:
        """Whether ListObjectsV2 and DeleteObjects are now sent on the lean path."""
        return self._client is not None

    def note(self, request: Any, **_: Any) -> None:
        """`before-send.s3.ListObjectsV2` handler: note where botocore sends the listing and
        for which region (returns None: botocore sends it)."""
        if self._client is None and not self._off:
            self._seen = learn_endpoint(request.url, request.headers)

    def arm(self) -> None:
        """After a ListObjectsV2 through botocore succeeded: the lean path from now on,
        if botocore's request could be repeated (`learn_endpoint`)."""
        seen = self._seen
        if self._client is None and not self._off and seen is not None:
            proxy = self._proxies.proxy_url_for(seen.base)
            self._client = LeanClient(self._http, seen, self._credentials, proxy=proxy)
            log.debug("s3.lean_armed", bucket=self.bucket, endpoint=seen.base, region=seen.region)

    def disarm(self, code: str, status: int | None) -> None:
        """botocore for every request from now on; logged once (requests in flight may
        learn it at the same time)."""
        if self._client is not None:
            log.warning(
                "s3.lean_disarmed",
                bucket=self.bucket,
                code=code,
                status=status,
                fallback="botocore signs and sends every request from now on",
            )
        self._client = None
        self._off = True

    async def list_page(
        self,
        operation: str,
        prefix: str,
        *,
        start_after: str | None,
        continuation_token: str | None,
        max_keys: int,
    ) -> ListPage | None:
        """One ListObjectsV2 page, or None when this answer disarmed the lean path."""
        query: list[tuple[str, str | None]] = [
            ("list-type", "2"),
            ("prefix", prefix),
            ("max-keys", str(max_keys)),
            ("encoding-type", "url"),
        ]
        if continuation_token is not None:
            query.append(("continuation-token", continuation_token))
        elif start_after is not None:
            query.append(("start-after", start_after))
        answer = await self._send(operation, "GET", query)
        if answer is None:
            return None
        try:
            listing = read_listing(answer.body)
        except ResponseParserError as exc:
            raise translate_error(exc, operation) from exc
        token = listing.next_token if listing.truncated else None
        return ListPage(listing.objects, token, answer.request_id)

    async def delete_objects(self, operation: str, body: bytes) -> dict[str, Any] | None:
        """One DeleteObjects of `body` (with its Content-MD5): the answer as
        `read_delete_result` gives it, or None when this answer disarmed the lean path."""
        md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
        answer = await self._send(operation, "POST", (("delete", None),), body, md5)
        if answer is None:
            return None
        try:
            return read_delete_result(answer.body)
        except ResponseParserError as exc:
            raise translate_error(exc, operation) from exc

    async def _send(
        self,
        operation: str,
        method: str,
        params: Sequence[tuple[str, str | None]],
        body: bytes = b"",
        content_md5: str | None = None,
    ) -> LeanAnswer | None:
        """One lean request: its 2xx answer; None when this answer disarmed the lean path
        (the caller then asks botocore). Raises `StorageError` for any other answer, as
        botocore's path would."""
        client = self._client
        if client is None:
            return None  # disarmed by a request in flight
        try:
            answer = await client.send(method, params, body, content_md5=content_md5)
        except _NETWORK as exc:
            if self._trusted:
                raise translate_error(exc, operation) from exc
            # Never answered yet: perhaps a proxy or TLS setting only botocore honours.
            self.disarm(translate_error(exc, operation).code, None)
            return None
        except Exception as exc:  # noqa: BLE001 - a lean path bug: botocore does the call
            self.disarm(type(exc).__name__, None)
            return None
        if answer is None:
            self.disarm("NoCredentials", None)
            return None
        status = answer.status
        if status == 200 and error_document(answer.body):
            status = 500  # as `gcd.storage.s3.client.error_in_200` makes it for botocore
            log.debug("s3.error_in_200", body=answer.body[:300])
        if 200 <= status < 300:
            self._trusted = True
            return answer
        found = read_error(answer.body)
        code, message = found or ("", http.client.responses.get(status, ""))
        error = answer_error(operation, status, code, message)
        if not error.retryable and (300 <= status < 400 or status in WRONG_REQUEST_STATUS):
            self.disarm(error.code, status)
            return None
        raise error
