"""A loopback HTTP proxy in front of an S3 endpoint that injects faults and latency.

For tests and benchmarks only. Point a client's endpoint_url at `proxy.endpoint_url`;
each request is forwarded unchanged to `upstream` (path, query, headers, body), except
that a seeded random `share` of the requests (optionally only LIST or DELETE requests)
is answered by the proxy itself with an S3 error document: 503 SlowDown, 500
InternalError, 503 ServiceUnavailable, 403 AccessDenied (a permanent failure) or 301
PermanentRedirect (the bucket is elsewhere), and a `drop_share` has its connection reset
without any answer.
`delay_s` adds a fixed latency to every request, as a far-away S3 region would.
Requests are counted per operation ("list": ListObjectsV2 and ListObjectVersions,
"delete": DeleteObjects and DeleteObject, "other") and faults per code, so tests can
check request counts from the server's side.

It can also play a store that differs from the one behind it (docs/stores.md), as
those stores answer: `require_content_md5` refuses a DeleteObjects without Content-MD5
(400 MissingContentMD5, as MinIO-era servers do); `batch_delete=False` answers every
DeleteObjects 501 NotImplemented (as GCS's XML API does); `unordered_listing` shuffles
the keys of each ListObjectsV2 page and refuses StartAfter (400 InvalidArgument), as an
S3 Express directory bucket lists.

And a broken store (issue 36): `endless_prefixes` answers every ListObjectsV2 of such a
prefix with no keys, ``IsTruncated=true`` and the same continuation token forever;
`drip_prefixes` forwards such a listing but sends its answer one byte every
`drip_interval_s`; `fail_delete_keys` answers 500 InternalError to every DeleteObjects
(or DeleteObject) naming one of those keys, as a store crashing on one key does.

The proxy runs on the caller's event loop (`async with FaultProxy(...)`) or on a
thread of its own (`with ThreadedFaultProxy(...)`) for synchronous callers such as
`gcd.cli.main.main`, which runs its own event loop.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import random
import re
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

__all__ = ["FaultConfig", "FaultProxy", "ThreadedFaultProxy", "operation_of", "shuffle_contents"]

_STATUS: Final = {
    "SlowDown": 503,
    "ServiceUnavailable": 503,
    "InternalError": 500,
    "AccessDenied": 403,
    "PermanentRedirect": 301,
}
# The client's Host goes through unchanged: a server that checks SigV4 signatures
# (SeaweedFS) must see the host the client signed, the proxy's.
_HOP_BY_HOP: Final = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "upgrade",
    }
)


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Which requests fail and how slow every request is."""

    share: float = 0.0
    codes: tuple[str, ...] = ("SlowDown", "InternalError")
    delay_s: float = 0.0
    seed: int = 0
    operations: frozenset[str] | None = None
    """Only these operations ("list", "delete", "other") get faults; None: all."""
    drop_share: float = 0.0
    """Share of the eligible requests whose connection is reset without an answer (after
    the request was read, so the client cannot tell whether it was carried out)."""
    require_content_md5: bool = False
    """Refuse a DeleteObjects without a Content-MD5 header (MissingContentMD5), or with
    one that is not the body's digest (BadDigest)."""
    batch_delete: bool = True
    """False: answer every DeleteObjects NotImplemented (single DeleteObject works)."""
    unordered_listing: bool = False
    """Shuffle each ListObjectsV2 page's keys; refuse StartAfter (InvalidArgument)."""
    endless_prefixes: tuple[str, ...] = ()
    """Listings of a prefix starting with one of these never end (the same token again)."""
    drip_prefixes: tuple[str, ...] = ()
    """Listings of a prefix starting with one of these are answered one byte at a time."""
    drip_interval_s: float = 5.0
    fail_delete_keys: frozenset[str] = frozenset()
    """A delete request naming one of these keys is answered 500 InternalError."""
    error_in_200: frozenset[str] = frozenset()
    """These operations ("list", "delete") are answered 200 with an InternalError
    document, as S3 may answer after its 200 status line."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0 or not 0.0 <= self.drop_share <= 1.0:
            raise ValueError(f"fault shares {self.share!r}, {self.drop_share!r} must be within 0-1")
        unknown = set(self.codes) - set(_STATUS)
        if unknown or not self.codes:
            raise ValueError(f"fault codes {self.codes!r}: choose from {sorted(_STATUS)}")
        if self.delay_s < 0:
            raise ValueError(f"delay {self.delay_s!r} s must be >= 0")


def operation_of(method: str, query: str) -> str:
    """ "list" for ListObjectsV2 and ListObjectVersions, "delete" for DeleteObjects and
    DeleteObject, else "other"."""
    params = {part.split("=", 1)[0] for part in query.split("&") if part}
    if method == "GET" and ("list-type" in params or "versions" in params):
        return "list"
    if (method == "POST" and "delete" in params) or method == "DELETE":
        return "delete"
    return "other"


_REFUSALS: Final = {
    "MissingContentMD5": (400, "Missing required header for this request: Content-Md5."),
    "BadDigest": (400, "The Content-MD5 you specified did not match what we received."),
    "NotImplemented": (501, "A header you provided implies functionality not implemented"),
    "InvalidArgument": (400, "StartAfter is not supported by this bucket"),
}
_CONTENTS: Final = re.compile(rb"<Contents>.*?</Contents>", re.DOTALL)


def shuffle_contents(body: bytes, rng: random.Random) -> bytes:
    """A ListObjectsV2 answer with its <Contents> entries in a random order."""
    entries = _CONTENTS.findall(body)
    rng.shuffle(entries)
    shuffled = iter(entries)
    return _CONTENTS.sub(lambda _: next(shuffled), body)


def _content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()


def _error_body(code: str, request_id: str, message: str = "injected by l0gc fault proxy") -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()


async def _drip(
    request: web.Request, status: int, payload: bytes, headers: dict[str, str], interval_s: float
) -> web.StreamResponse:
    """Send `payload` one byte every `interval_s` (a read timeout restarts with each)."""
    answer = web.StreamResponse(status=status, headers=headers)
    answer.content_length = len(payload)
    await answer.prepare(request)
    try:
        for index in range(len(payload)):
            await answer.write(payload[index : index + 1])
            await asyncio.sleep(interval_s)  # the hostile behaviour itself, not a wait
    except (ConnectionResetError, RuntimeError):
        pass  # the client gave up
    return answer


class FaultProxy:
    """The proxy on the running event loop; use `async with`."""

    def __init__(
        self, upstream: str, config: FaultConfig | None = None, *, host: str = "127.0.0.1"
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.config = config if config is not None else FaultConfig()
        self.host = host
        self.port = 0
        self.requests: collections.Counter[str] = collections.Counter()
        self.faults: collections.Counter[str] = collections.Counter()
        self.faults_on: collections.Counter[tuple[str, str]] = collections.Counter()
        """Injected error answers by (code, operation): which requests a fault hit depends
        on the order they arrive in, so a test reads it instead of assuming it."""
        self.server_errors: collections.Counter[str] = collections.Counter()
        """Per operation, the 5xx answers the server itself gave (not injected): a client
        rightly retries each, so request counts allow one more per error."""
        self._rng = random.Random(self.config.seed)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def endpoint_url(self) -> str:
        """The URL clients should use instead of the upstream."""
        return f"http://{self.host}:{self.port}"

    def reconfigure(self, config: FaultConfig) -> None:
        """Change the faults from now on (counters are kept)."""
        self.config = config
        self._rng = random.Random(config.seed)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        operation = operation_of(request.method, request.query_string)
        self.requests[operation] += 1
        body = await request.read()
        config = self.config
        if config.delay_s:
            await asyncio.sleep(config.delay_s)
        eligible = config.operations is None or operation in config.operations
        if eligible and config.drop_share and self._rng.random() < config.drop_share:
            self.faults["dropped"] += 1
            if request.transport is not None:
                request.transport.abort()  # a reset: no status line, no body
            return web.Response(status=503)  # never reaches the client
        if eligible and config.share and self._rng.random() < config.share:
            code = self._rng.choice(config.codes)
            self.faults[code] += 1
            self.faults_on[code, operation] += 1
            request_id = f"fault-{sum(self.faults.values())}"
            return web.Response(
                status=_STATUS[code],
                body=_error_body(code, request_id),
                headers={"Content-Type": "application/xml", "x-amz-request-id": request_id},
            )
        if operation in config.error_in_200:
            self.faults["error_in_200"] += 1
            return web.Response(
                status=200,
                body=_error_body("InternalError", "in-200"),
                headers={"Content-Type": "application/xml", "x-amz-request-id": "in-200"},
            )
        hostile = await self._hostile(operation, request, body)
        if hostile is not None:
            return hostile
        refusal = self._refusal(operation, request, body)
        if refusal is not None:
            self.faults[refusal] += 1
            status, message = _REFUSALS[refusal]
            request_id = f"refused-{sum(self.faults.values())}"
            return web.Response(
                status=status,
                body=_error_body(refusal, request_id, message),
                headers={"Content-Type": "application/xml", "x-amz-request-id": request_id},
            )
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        url = URL(self.upstream + request.raw_path, encoded=True)
        async with self._session.request(
            request.method, url, headers=headers, data=body, allow_redirects=False
        ) as upstream:
            payload = await upstream.read()
            if config.unordered_listing and "list-type" in request.query and upstream.status == 200:
                payload = shuffle_contents(payload, self._rng)
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
        if upstream.status >= 500:  # the store's own failure (moto has some), not injected
            self.server_errors[operation] += 1
        prefix = request.query.get("prefix", "")
        if operation == "list" and prefix.startswith(config.drip_prefixes or ("\x00",)):
            self.faults["dripped"] += 1
            return await _drip(request, upstream.status, payload, out, config.drip_interval_s)
        return web.Response(status=upstream.status, body=payload, headers=out)

    async def _hostile(
        self, operation: str, request: web.Request, body: bytes
    ) -> web.Response | None:
        """The answer of a broken store (endless listing, poison key), or None."""
        config = self.config
        prefix = request.query.get("prefix", "")
        if operation == "list" and prefix.startswith(config.endless_prefixes or ("\x00",)):
            self.faults["endless"] += 1
            page = (
                '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.'
                f'amazonaws.com/doc/2006-03-01/"><Prefix>{prefix}</Prefix><KeyCount>0'
                "</KeyCount><IsTruncated>true</IsTruncated><NextContinuationToken>"
                "l0gc-endless</NextContinuationToken></ListBucketResult>"
            )
            return web.Response(body=page.encode(), content_type="application/xml")
        named = (
            request.path.split("/", 2)[-1]
            if request.method == "DELETE"
            else body.decode("utf-8", "replace")
        )
        if operation == "delete" and any(
            f"<Key>{key}</Key>" in named or named == key for key in config.fail_delete_keys
        ):
            self.faults["poison"] += 1
            return web.Response(
                status=500,
                body=_error_body("InternalError", "poison"),
                headers={"Content-Type": "application/xml"},
            )
        return None

    def _refusal(self, operation: str, request: web.Request, body: bytes) -> str | None:
        """The code a differing store answers this request with, or None to forward it."""
        config = self.config
        batch = request.method == "POST" and operation == "delete"
        if batch and not config.batch_delete:
            return "NotImplemented"
        if batch and config.require_content_md5 and "Content-MD5" not in request.headers:
            return "MissingContentMD5"
        if (
            batch
            and config.require_content_md5
            and request.headers["Content-MD5"] != _content_md5(body)
        ):
            return "BadDigest"  # the digest must cover the body sent
        if config.unordered_listing and "start-after" in request.query:
            return "InvalidArgument"
        return None

    async def start(self) -> FaultProxy:
        """Start listening on a free loopback port."""
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Stop listening and close the upstream connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class ThreadedFaultProxy:
    """A `FaultProxy` on its own thread and event loop, for synchronous callers."""

    def __init__(self, upstream: str, config: FaultConfig | None = None) -> None:
        self.proxy = FaultProxy(upstream, config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def endpoint_url(self) -> str:
        """The URL clients should use instead of the upstream."""
        return self.proxy.endpoint_url

    def start(self) -> ThreadedFaultProxy:
        """Start the thread and the proxy."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        """Stop the proxy and its thread."""
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def __enter__(self) -> ThreadedFaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
