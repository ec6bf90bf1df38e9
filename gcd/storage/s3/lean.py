"""A signed S3 request over aiohttp: the sweep's two hot calls (ListObjectsV2 and
DeleteObjects) without botocore's per-call pipeline.

The signer is pure (`SigV4Signer`, `canonical_query`); where to send and for which
region is learnt from botocore's own prepared ListObjectsV2 (`learn_endpoint`); `LeanClient`
sends over one aiohttp session. What an answer means is decided by the store
(`gcd.storage.s3.client`). Design notes: docs/internals/storage.md, `gcd.storage.s3.lean`.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

__all__ = [
    "EMPTY_SHA256",
    "Credentials",
    "Endpoint",
    "LeanAnswer",
    "LeanClient",
    "SigV4Signer",
    "canonical_query",
    "learn_endpoint",
    "open_http",
]

EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()
ALGORITHM: Final = "AWS4-HMAC-SHA256"
LEARNABLE_HEADERS: Final = frozenset(
    {"host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"}
)
"""The headers botocore's ListObjectsV2 may sign for the lean path to take its place: a
request signing any other (a checksum mode, a bucket owner, a session header) was built
by something this module does not repeat, and the lean path is not armed."""
_UNRESERVED: Final = "-_.~"  # RFC 3986: the characters a query key or value keeps as they are


@dataclass(frozen=True, slots=True)
class Credentials:
    """One request's AWS credentials (a snapshot: refreshable ones are read per request)."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


def canonical_query(params: Iterable[tuple[str, str | None]]) -> tuple[str, str]:
    """(the canonical query string, the query string to send) of `params`.

    Keys and values RFC 3986-encoded (only ``A-Za-z0-9-_.~`` as they are), pairs sorted
    by encoded key then value; a value None is sent as the bare key (``?delete``) and
    signed as ``delete=``, as botocore signs it. The query sent is the canonical one
    otherwise, so what is signed is exactly what the server reads."""
    pairs = sorted(
        (quote(key, safe=_UNRESERVED), None if value is None else quote(value, safe=_UNRESERVED))
        for key, value in params
    )
    canonical = "&".join(f"{key}={value or ''}" for key, value in pairs)
    sent = "&".join(key if value is None else f"{key}={value}" for key, value in pairs)
    return canonical, sent


class SigV4Signer:
    """Signature Version 4 for one region and service, as S3 checks it.

    The signing key (four chained HMACs of the secret, the day, the region and the
    service) is kept for the last (secret, day): a request then costs one SHA-256 of the
    canonical request and one HMAC of the string to sign."""

    __slots__ = ("_key", "_key_for", "region", "service")

    def __init__(self, region: str, service: str) -> None:
        self.region = region
        self.service = service
        self._key_for: tuple[str, str] | None = None
        self._key = b""

    def signing_key(self, secret_key: str, date: str) -> bytes:
        """The key for `date` (YYYYMMDD), derived once per secret and day."""
        if self._key_for != (secret_key, date):
            key = ("AWS4" + secret_key).encode()
            for part in (date, self.region, self.service, "aws4_request"):
                key = hmac.digest(key, part.encode(), "sha256")
            self._key, self._key_for = key, (secret_key, date)
        return self._key

    def headers(
        self,
        method: str,
        host: str,
        path: str,
        query: str,
        *,
        payload_sha256: str,
        credentials: Credentials,
        amz_date: str,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The headers to send, Authorization included, lowercased.

        `path` is the request's path as sent (S3 signs it as it is, never normalised or
        encoded twice), `query` the canonical query (`canonical_query`), `amz_date`
        YYYYMMDDTHHMMSSZ; `extra` are further headers to sign (content-md5,
        content-type)."""
        headers = {"host": host, "x-amz-content-sha256": payload_sha256, "x-amz-date": amz_date}
        if credentials.token:
            headers["x-amz-security-token"] = credentials.token
        if extra:
            headers.update((name.lower(), value) for name, value in extra.items())
        names = sorted(headers)
        signed = ";".join(names)
        lines = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in names)
        canonical = f"{method}\n{path}\n{query}\n{lines}\n{signed}\n{payload_sha256}"
        date = amz_date[:8]
        scope = f"{date}/{self.region}/{self.service}/aws4_request"
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"
        key = self.signing_key(credentials.secret_key, date)
        signature = hmac.new(key, to_sign.encode(), "sha256").hexdigest()
        headers["authorization"] = (
            f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return headers


def host_of(url: str) -> str:
    """The Host header botocore signs for `url`: lowercased, without a default port."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where botocore sent a bucket-level request, and the scope it signed it for."""

    base: str
    """The URL without its query: scheme, host, port and the bucket's path."""
    host: str
    path: str
    region: str
    service: str
    user_agent: str | None = None


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def learn_endpoint(url: str, headers: Mapping[str, str | bytes]) -> Endpoint | None:
    """The `Endpoint` of botocore's prepared ListObjectsV2 (`url`, `headers` as about
    to be sent), or None when the lean path must not take its place: not signed, not
    SigV4 (SigV4a, S3 Express sessions), signing a header the lean path does not send, a
    URL with no path or carrying credentials."""
    lowered = {name.lower(): _text(value) for name, value in headers.items()}
    authorization = lowered.get("authorization", "")
    if not authorization.startswith(ALGORITHM + " "):
        return None
    fields = dict(
        part.strip().partition("=")[::2] for part in authorization[len(ALGORITHM) :].split(",")
    )
    scope = fields.get("Credential", "").split("/")
    signed = set(fields.get("SignedHeaders", "").split(";"))
    if len(scope) != 5 or scope[4] != "aws4_request" or not signed <= LEARNABLE_HEADERS:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.path.startswith("/"):
        return None
    if parts.username is not None or parts.password is not None or parts.fragment:
        return None
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    return Endpoint(
        base, host_of(url), parts.path, scope[2], scope[3], lowered.get("user-agent") or None
    )


@dataclass(frozen=True, slots=True)
class LeanAnswer:
    """An answer as received: its status, body and S3 request id."""

    status: int
    body: bytes
    request_id: str | None


def open_http(
    *,
    max_connections: int,
    connect_timeout_s: float,
    read_timeout_s: float,
    tls: ssl.SSLContext | bool,
) -> aiohttp.ClientSession:
    """One aiohttp session for a store: a pool of `max_connections`, botocore's connect
    and read timeouts, and `tls` (a context that verifies, or False for a plain http://
    endpoint). A proxy is given per request (botocore's, `LeanClient`); like
    aiobotocore's, the session reads nothing from the environment (no ~/.netrc) and
    leaves bodies as sent (``Accept-Encoding: identity``)."""
    connector = aiohttp.TCPConnector(limit=max_connections, ssl=tls)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        trust_env=False,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Content-Type"),  # botocore sends neither here
    )


class LeanClient:
    """Signed requests to one `Endpoint` over an open aiohttp session."""

    __slots__ = ("_clock", "_credentials", "_http", "_proxy", "_signer", "endpoint")

    def __init__(
        self,
        http: aiohttp.ClientSession,
        endpoint: Endpoint,
        credentials: Callable[[], Awaitable[Credentials | None]],
        *,
        proxy: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._http = http
        self.endpoint = endpoint
        self._credentials = credentials
        self._signer = SigV4Signer(endpoint.region, endpoint.service)
        self._clock = clock
        self._proxy = proxy

    async def send(
        self,
        method: str,
        params: Sequence[tuple[str, str | None]],
        body: bytes = b"",
        *,
        content_md5: str | None = None,
    ) -> LeanAnswer | None:
        """Send one signed request and read its whole answer; None when there are no
        credentials to sign it with. Raises what aiohttp raises (connection errors and
        timeouts); never follows a redirect."""
        credentials = await self._credentials()
        if credentials is None:
            return None
        endpoint = self.endpoint
        canonical, sent = canonical_query(params)
        payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock()))
        extra = {"content-md5": content_md5} if content_md5 is not None else None
        headers = self._signer.headers(
            method,
            endpoint.host,
            endpoint.path,
            canonical,
            payload_sha256=payload,
            credentials=credentials,
            amz_date=amz_date,
            extra=extra,
        )
        if endpoint.user_agent is not None:
            headers["user-agent"] = endpoint.user_agent
        headers["accept-encoding"] = "identity"  # as aiobotocore asks
        url = URL(f"{endpoint.base}?{sent}" if sent else endpoint.base, encoded=True)
        async with self._http.request(
            method,
            url,
            headers=headers,
            data=body or None,
            allow_redirects=False,
            proxy=self._proxy,
        ) as response:
            answer = await response.read()
            got = response.headers  # the request id where botocore reads it
            request_id = got.get("x-amzn-requestid") or got.get("x-amz-request-id")
            return LeanAnswer(response.status, answer, request_id)
