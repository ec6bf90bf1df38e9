"""The publisher API's listening socket: TLS, a cap on open connections, read timeouts.

Design notes: docs/internals/publisher.md, `watermark.api.http_server`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from l0gc.errors import ConfigError
from watermark.api.limits import HttpLimits
from watermark.service.metrics import HttpRefusal, WatermarkMetrics

__all__ = [
    "HTTP_LIMITS",
    "ApiServer",
    "server_ssl_context",
]

_REFUSAL_LOG_INTERVAL_S = 10.0
_OVERLOADED_BODY = (
    b'{"error": "too_many_connections", "message": "the service has its maximum of open '
    b'connections; retry shortly"}'
)
_FROM_PEER_BODY = (
    b'{"error": "too_many_connections", "message": "this client address has the maximum of '
    b'open connections (--max-connections-per-peer); reuse them or retry shortly"}'
)


def _answer_503(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


_OVERLOADED = _answer_503(_OVERLOADED_BODY)
_OVERLOADED_FROM_PEER = _answer_503(_FROM_PEER_BODY)
_ADMISSION_REFUSALS = frozenset(
    {HttpRefusal.TOO_MANY_CONNECTIONS, HttpRefusal.TOO_MANY_FROM_PEER, HttpRefusal.HEAD_TIMEOUT}
)
_log = structlog.get_logger("watermark.http")


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


_PROBES = (b"/healthz", b"/readyz", b"/metrics")
_HEAD_END = (b"\r\n\r\n", b"\n\n")
_MAX_HELD_HEAD = 64 * 1024  # beyond this aiohttp's own limits (8190 a line) answer 400
_BAD_REQUEST = (
    "the request cannot be parsed ({reason}): send one HTTP/1.1 request with a request line "
    "and each header under 8190 bytes"
)


_RESERVE_PER_PEER = 2
_RESERVE_HEAD_TIMEOUT_S = 1.0


class _Gate:
    """Who holds the API's connections: the open ones in all, per peer address, and
    the probes' reserve (see `ApiServer`'s docstring)."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.open = 0
        self.per_peer: dict[str, int] = {}
        self.reserve_open = 0
        self.reserve_per_peer: dict[str, int] = {}

    def take(self, peer: str) -> HttpRefusal | _Slot:
        """Admit a connection from `peer` (its `_Slot`), or say why not."""
        limits = self.limits
        if self.per_peer.get(peer, 0) >= limits.max_connections_per_peer:
            return HttpRefusal.TOO_MANY_FROM_PEER
        reserve = self.open >= limits.max_connections
        if reserve:  # probes only: a few places, at most _RESERVE_PER_PEER per address
            if (
                self.reserve_open >= limits.probe_reserve
                or self.reserve_per_peer.get(peer, 0) >= _RESERVE_PER_PEER
            ):
                return HttpRefusal.TOO_MANY_CONNECTIONS
            self.reserve_open += 1
            _add(self.reserve_per_peer, peer, 1)
        self.open += 1
        _add(self.per_peer, peer, 1)
        return _Slot(self, peer, reserve)

    def give_back(self, peer: str, reserve: bool) -> None:
        self.open -= 1
        _add(self.per_peer, peer, -1)
        if reserve:
            self.reserve_open -= 1
            _add(self.reserve_per_peer, peer, -1)


def _add(counts: dict[str, int], key: str, step: int) -> None:
    value = counts.get(key, 0) + step
    if value:
        counts[key] = value
    else:
        counts.pop(key, None)


class _Slot:
    """One admitted connection's place in the `_Gate`, given back exactly once;
    `reserve`: a place of the probes' reserve."""

    __slots__ = ("_gate", "_peer", "reserve")

    def __init__(self, gate: _Gate, peer: str, reserve: bool) -> None:
        self._gate: _Gate | None = gate
        self._peer = peer
        self.reserve = reserve

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.give_back(self._peer, self.reserve)


class _Handler(RequestHandler):
    """aiohttp's connection handler, plus: its `_Slot` is released when the connection
    ends, and the errors aiohttp answers itself (an unparsable or oversized request head,
    an unhandled exception) are the API's JSON error document too."""

    def __init__(self, manager: web.Server, slot: _Slot, refused: Callable[[HttpRefusal], None]):
        super().__init__(manager, loop=asyncio.get_running_loop(), **manager._kwargs)
        self._slot = slot
        self._refused_hook = refused

    def connection_lost(self, exc: BaseException | None) -> None:
        self._slot.release()
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: too late for an answer
            raise ConnectionError("response already started; cannot send the error")
        if status == 400:
            self._refused_hook(HttpRefusal.BAD_REQUEST)
            reason = getattr(exc, "message", None) or message or "malformed request"
            code, text = "bad_request", _BAD_REQUEST.format(reason=str(reason)[:200])
        elif status == 504:
            code, text = "timeout", "the request took too long to handle; retry it"
        else:
            self.log_exception("watermark.http_unhandled", exc_info=exc)
            code, text = "internal_error", "the service failed to handle the request; see its log"
        body = json.dumps({"error": code, "message": text})
        response = web.Response(status=status, text=body, content_type="application/json")
        response.force_close()
        return response


def _is_probe(head: bytes | bytearray) -> bool:
    """True if the request head is a GET of /healthz, /readyz or /metrics."""
    method, _, rest = bytes(head.split(b"\n", 1)[0]).partition(b" ")
    target = rest.partition(b" ")[0].partition(b"?")[0]
    return method == b"GET" and target in _PROBES


class _Admission(asyncio.Protocol):
    """The first protocol of every accepted connection: admits it (`_Gate`) or answers
    503 and closes it; holds it until its request head has arrived (closing it after
    `head_timeout_s`), then hands it and the bytes read to aiohttp (`_Handler`).

    A handed-over connection no longer passes through here (`transport.set_protocol`).
    A connection admitted from the probes' reserve is handed over only for one GET of
    /healthz, /readyz or /metrics, and closed after the answer.
    """

    def __init__(self, server: ApiServer, handlers: web.Server) -> None:
        self._server = server
        self._handlers = handlers
        self._transport: asyncio.Transport | None = None
        self._slot: _Slot | None = None
        self._probes_only = False
        self._head = bytearray()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
        server = self._server
        slot = server.gate.take(peer)
        if isinstance(slot, HttpRefusal):
            server.refuse(transport, slot)
            return
        self._transport = transport
        self._slot = slot
        self._probes_only = slot.reserve
        limits = server.limits
        timeout = min(limits.head_timeout_s, limits.read_timeout_s)
        if slot.reserve:  # a probe sends its request at once
            timeout = min(timeout, _RESERVE_HEAD_TIMEOUT_S)
        self._timer = asyncio.get_running_loop().call_later(timeout, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return  # a refused connection, still closing: ignored
        self._head += data
        head = self._head
        if len(head) < _MAX_HELD_HEAD and not any(end in head for end in _HEAD_END):
            return
        transport, slot = self._transport, self._slot
        assert slot is not None
        self._stop_timer()
        self._transport = None
        if self._probes_only and not _is_probe(head):
            slot.release()
            self._server.refuse(transport, HttpRefusal.TOO_MANY_CONNECTIONS)
            return
        handler = _Handler(self._handlers, slot, self._server.count_refusal)
        transport.set_protocol(handler)
        handler.connection_made(transport)
        handler.data_received(bytes(head))
        if self._probes_only:
            handler.close()  # one answer, then the reserve slot is free again

    def eof_received(self) -> bool:
        return False  # no complete head before the end: close

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_timer()
        if self._slot is not None and self._transport is not None:
            self._slot.release()
        self._transport = None

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is not None:
            self._server.count_refusal(HttpRefusal.HEAD_TIMEOUT)
            transport.abort()


class ApiServer:
    """Runs an app on host:port; `start` returns the bound port (0 picks a free one).

    The limits are the app's (`HTTP_LIMITS`, set by `http_api.create_app`); TLS if
    `ssl_context` is given; refused connections are counted in `metrics` if given.

    Admission (`_Gate`, before anything is parsed or authenticated): a connection from
    an address that has `max_connections_per_peer` open is answered 503 and closed at
    once; so is one while `max_connections` + `probe_reserve` are open. Beyond
    `max_connections` the last `probe_reserve` places take only probes (one GET of
    /healthz, /readyz or /metrics each, then closed): a liveness probe is answered while
    clients hold every other connection. A new connection must send its request head
    within `head_timeout_s` or is closed. Each refusal is counted by its reason
    (`HttpRefusal`) and logged at most every `_REFUSAL_LOG_INTERVAL_S`.
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
        self.gate = _Gate(self.limits)
        self._ssl_context = ssl_context
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self._refused: dict[HttpRefusal, int] = {}
        self._refusal_logged_at = -_REFUSAL_LOG_INTERVAL_S
        self.port: int | None = None

    @property
    def open_connections(self) -> int:
        """Connections open now: waiting for their first request head, or served."""
        return self.gate.open

    async def start(
        self, host: str, port: int, *, serving: bool = True, flag: str = "--http-port"
    ) -> int:
        """Listen on `host`:`port`; return the port actually bound. With `serving=False`
        the socket is bound (a port in use fails here, ConfigError naming `flag`) but
        connections wait in the backlog until `start_serving`."""
        await self._runner.setup()
        handlers = self._runner.server
        assert handlers is not None
        limits = self.limits
        context = self._ssl_context
        tls = context is not None
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _Admission(self, handlers),
                host,
                port,
                ssl=context,
                ssl_handshake_timeout=limits.read_timeout_s if tls else None,
                backlog=min(limits.max_connections, 1024),
                start_serving=serving,
            )
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc}; choose another {flag} or host"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        _log.info(
            "watermark.http_listening",
            host=host,
            port=self.port,
            tls=tls,
            client_certificates=context is not None and context.verify_mode == ssl.CERT_REQUIRED,
            max_connections=limits.max_connections,
            max_connections_per_peer=limits.max_connections_per_peer,
            head_timeout_s=limits.head_timeout_s,
            read_timeout_s=limits.read_timeout_s,
            serving=serving,
        )
        return self.port

    async def start_serving(self) -> None:
        """Accept the connections of a socket bound by `start(serving=False)`."""
        assert self._server is not None, "start() first"
        await self._server.start_serving()

    def refuse(self, transport: asyncio.Transport, reason: HttpRefusal) -> None:
        """Answer 503 on a connection that is not admitted, close it, count it."""
        transport.write(
            _OVERLOADED_FROM_PEER if reason is HttpRefusal.TOO_MANY_FROM_PEER else _OVERLOADED
        )
        transport.close()
        self.count_refusal(reason)

    def count_refusal(self, reason: HttpRefusal) -> None:
        """Count a refused connection or request (metrics; a log line now and then)."""
        self._refused[reason] = self._refused.get(reason, 0) + 1
        if self._metrics is not None:
            self._metrics.http_refused(reason)
        if reason not in _ADMISSION_REFUSALS:
            return
        now = time.monotonic()
        if now - self._refusal_logged_at >= _REFUSAL_LOG_INTERVAL_S:
            self._refusal_logged_at = now
            _log.warning(
                "watermark.http_connections_refused",
                max_connections=self.limits.max_connections,
                max_connections_per_peer=self.limits.max_connections_per_peer,
                open=self.gate.open,
                refused_total={r.value: n for r, n in self._refused.items()},
            )

    async def stop(self) -> None:
        """Stop accepting, let running requests finish (bounded), close."""
        if self._server is not None:
            self._server.close()
        await self._runner.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
