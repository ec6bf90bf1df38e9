"""The publisher API's listening socket: TLS, a cap on open connections, read timeouts.

aiohttp serves the application (`watermark.api.http_api`); this module decides who gets a
connection and how long a client may take to send its request, so that no client can
hold the service's sockets or memory (`HttpLimits`):

- Connections: one accepted while `max_connections` are open is answered 503 and
  closed at once, before aiohttp sees it (`_Admission`); refusals are logged at most
  every `_REFUSAL_LOG_INTERVAL_S`.
- Request head: aiohttp's keep-alive timer starts when a connection is made and again
  after each answer, and closes a connection that has no complete request head when it
  fires; `keepalive_timeout = read_timeout_s` therefore bounds a client that trickles
  its headers (slowloris) as well as an idle keep-alive connection.
- Request body: the routes read bodies under the same timeout (`http_api`), and
  answer 408; a body larger than `max_body_bytes` is 413. After an answer to a request
  whose body was not read, at most `read_timeout_s` more of it is read and discarded
  (aiohttp's `lingering_time`) before the connection closes.
- TLS: the handshake must finish within `read_timeout_s`; with a client CA every client
  must present a certificate it signed (`server_ssl_context`). Only the given CA is
  trusted, never the system's.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web

from watermark.errors import ConfigError
from watermark.service.metrics import HttpRefusal, WatermarkMetrics

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_READ_TIMEOUT_S",
    "HTTP_LIMITS",
    "ApiServer",
    "HttpLimits",
    "server_ssl_context",
]

DEFAULT_MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_BATCH_ENTRIES = 1000
DEFAULT_MAX_BATCH_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_READ_TIMEOUT_S = 10.0
_REFUSAL_LOG_INTERVAL_S = 10.0
_OVERLOADED_BODY = (
    b'{"error": "too_many_connections", "message": "the service has its maximum of open '
    b'connections; retry shortly"}'
)
_OVERLOADED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_OVERLOADED_BODY), _OVERLOADED_BODY)
)
_log = structlog.get_logger("watermark.http")


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What a client of the API may take: connections, time to send a request, body size."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_batch_entries: int = DEFAULT_MAX_BATCH_ENTRIES
    """Entries one batched fence or commit request may carry."""
    max_batch_body_bytes: int = DEFAULT_MAX_BATCH_BODY_BYTES
    """Body limit of the two batch routes (every other route: `max_body_bytes`)."""

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ConfigError(
                f"--max-connections must be >= 1, got {self.max_connections}; it caps the "
                "connections the API keeps open at once"
            )
        if not self.read_timeout_s > 0:
            raise ConfigError(
                f"--http-read-timeout must be > 0 seconds, got {self.read_timeout_s}; it bounds "
                "how long a client may take to send a request"
            )
        if self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        if self.max_batch_entries < 1 or self.max_batch_body_bytes < self.max_body_bytes:
            raise ConfigError(
                f"max_batch_entries ({self.max_batch_entries}) must be >= 1 and "
                f"max_batch_body_bytes ({self.max_batch_body_bytes}) >= max_body_bytes"
            )


HTTP_LIMITS: web.AppKey[HttpLimits] = web.AppKey("http_limits", HttpLimits)
"""Where `http_api.create_app` keeps the limits, for the routes and for `ApiServer`."""


def server_ssl_context(
    cert_file: str | None, key_file: str | None, client_ca_file: str | None
) -> ssl.SSLContext | None:
    """The server's TLS context (None without a certificate); ConfigError names the file.

    With `client_ca_file` every client must present a certificate signed by one of its
    CAs (mutual TLS); no other CA is trusted.
    """
    if not cert_file and not key_file:
        if client_ca_file:
            raise ConfigError(
                f"--tls-client-ca-file {client_ca_file} needs --tls-cert-file and "
                "--tls-key-file: client certificates are only checked over TLS"
            )
        return None
    if not cert_file or not key_file:
        given = "--tls-cert-file" if cert_file else "--tls-key-file"
        raise ConfigError(
            f"{given} was given alone: --tls-cert-file and --tls-key-file go together "
            "(the server's PEM certificate chain and its private key)"
        )
    files = [("--tls-cert-file", cert_file), ("--tls-key-file", key_file)]
    if client_ca_file:
        files.append(("--tls-client-ca-file", client_ca_file))
    for flag, path in files:
        if not Path(path).is_file():
            raise ConfigError(f"{flag} {path}: no such file; give the path of a PEM file")
    # PROTOCOL_TLS_SERVER, not create_default_context(): that one would also trust the
    # system's CAs for client certificates.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"--tls-cert-file {cert_file} / --tls-key-file {key_file}: cannot load the "
            f"certificate and key ({_reason(exc)}); give a PEM certificate chain and the "
            "private key that matches it"
        ) from exc
    if client_ca_file:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"--tls-client-ca-file {client_ca_file}: cannot load CA certificates "
                f"({_reason(exc)}); give the PEM certificate(s) of the CA that signs the "
                "clients' certificates"
            ) from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.__class__.__name__
    return exc.strerror or exc.__class__.__name__


class _Admission(asyncio.Protocol):
    """The first protocol of every accepted connection: hands it to aiohttp, or answers
    503 and closes it when `limit` connections are already open.

    A handed-over connection no longer passes through here (`transport.set_protocol`), so
    the cap costs nothing per request. aiohttp's own table of open connections is the
    count; with TLS a connection enters it once its handshake is done.
    """

    def __init__(self, handlers: web.Server, limit: int, refused: Callable[[], None]) -> None:
        self._handlers = handlers
        self._limit = limit
        self._refused = refused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self._handlers.connections) >= self._limit:
            assert isinstance(transport, asyncio.Transport)
            transport.write(_OVERLOADED)
            transport.close()
            self._refused()
            return
        handler = self._handlers()
        transport.set_protocol(handler)
        handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        """Bytes from a refused connection, still closing: ignored."""


class ApiServer:
    """Runs an app on host:port; `start` returns the bound port (0 picks a free one).

    The limits are the app's (`HTTP_LIMITS`, set by `http_api.create_app`); TLS if
    `ssl_context` is given; refused connections are counted in `metrics` if given.
    """

    def __init__(
        self,
        app: web.Application,
        *,
        shutdown_timeout_s: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
        metrics: WatermarkMetrics | None = None,
    ) -> None:
        self.limits = app.get(HTTP_LIMITS) or HttpLimits()
        self._runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=shutdown_timeout_s,
            keepalive_timeout=self.limits.read_timeout_s,
            lingering_time=self.limits.read_timeout_s,
        )
        self._ssl_context = ssl_context
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self._refused = 0
        self._refusal_logged_at = -_REFUSAL_LOG_INTERVAL_S
        self.port: int | None = None

    @property
    def open_connections(self) -> int:
        """Connections aiohttp is serving now."""
        handlers = self._runner.server
        return 0 if handlers is None else len(handlers.connections)

    async def start(self, host: str, port: int) -> int:
        """Listen on `host`:`port`; return the port actually bound."""
        await self._runner.setup()
        handlers = self._runner.server
        assert handlers is not None
        limit = self.limits.max_connections
        context = self._ssl_context
        tls = context is not None
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _Admission(handlers, limit, self._on_refused),
                host,
                port,
                ssl=context,
                ssl_handshake_timeout=self.limits.read_timeout_s if tls else None,
                backlog=min(limit, 1024),
            )
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc}; choose another --http-port or host"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        _log.info(
            "watermark.http_listening",
            host=host,
            port=self.port,
            tls=tls,
            client_certificates=context is not None and context.verify_mode == ssl.CERT_REQUIRED,
            max_connections=limit,
            read_timeout_s=self.limits.read_timeout_s,
        )
        return self.port

    def _on_refused(self) -> None:
        self._refused += 1
        if self._metrics is not None:
            self._metrics.http_refused(HttpRefusal.TOO_MANY_CONNECTIONS)
        now = time.monotonic()
        if now - self._refusal_logged_at >= _REFUSAL_LOG_INTERVAL_S:
            self._refusal_logged_at = now
            _log.warning(
                "watermark.http_connections_refused",
                max_connections=self.limits.max_connections,
                refused_total=self._refused,
            )

    async def stop(self) -> None:
        """Stop accepting, let running requests finish (bounded), close."""
        if self._server is not None:
            self._server.close()
        await self._runner.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
