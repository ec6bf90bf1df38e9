"""The publisher's JSON API over HTTP, for writers that are not in Python (aiohttp).

Routes (every body and answer is JSON; errors are ``{"error": CODE, "message": ...}``):

    POST /v1/partitions/{partition}/fence       {"epoch": N, "timeout_s": 5}
         200 {"token", "partition", "epoch", "window": [a, b], "slid",
              "deadline" (unix seconds), "expires_in_s"}
         409 stale_epoch {"window": [a, b], "floor"}   404 not_hosted
         503 fence_timeout | guard_closed
    POST /v1/fences/{token}/commit              {"offset": N}   -> 200 partition state
         404 unknown_fence   410 fence_expired   409 illegal_offset | fencing_violation
    POST /v1/fences/{token}/abort                               -> 200 {"aborted": bool}
    POST /v1/partitions/{partition}/reconciled  {"offset": N}   -> 200 partition state
    POST /v1/partitions/{partition}/adopt       {"log_end_offset": N | -1 | null}
                                                                -> 200 partition state
         404 not_registered   409 illegal_offset   503 etcd_unavailable
    GET  /v1/partitions/{partition}                             -> 200 partition state
    GET  /v1/partitions                   -> 200 {"version", "owner", "partitions": [...]}
    GET  /metrics (Prometheus text)   GET /healthz   GET /readyz (503 until ready)

Partition names may contain '/' (``orders/0``). Routes take the name either raw
(``/v1/partitions/orders/0/fence``) or percent-encoded (``/v1/partitions/orders%2F0/
fence``); the route's fixed suffix (``/fence``, ``/reconciled``, ``/adopt``) is
matched last, so a name that itself ends in ``/fence`` still works. Clients should
percent-encode: it is unambiguous for every name.

Protocol for a write: upload the object stamped with epoch E, ``fence`` E, append the
entry to the partition log, ``commit`` the token with the entry's offset (or
``abort``). A token is a bearer credential for one fence. Its ``deadline`` is when a
waiting window slide may reclaim it; a reclaimed token's commit answers 410 (or 404
once the service has forgotten it) and the entry must not be committed. On 409
stale_epoch re-read the cluster epoch and re-upload. A partition leader that takes
over a partition calls ``adopt`` with the offset of its log's last entry (-1 when the
log is empty): entries the previous owner applied but never published then hold the
watermark until the reconciler has passed them. Without it (null, or the partitions
`watermark serve --partitions` adopts at start) the partition gets no idle advance
until its first commit. One place, `_ERRORS`, maps
exceptions to statuses.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from watermark.errors import (
    ConfigError,
    EtcdUnavailable,
    FenceExpired,
    FenceTimeout,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    L0gcError,
    PartitionNotHosted,
    PartitionNotRegistered,
    StaleEpoch,
)
from watermark.guard import FenceToken
from watermark.metrics import CONTENT_TYPE_LATEST
from watermark.publisher import Publisher
from watermark.record import RECORD_VERSION

__all__ = ["ApiServer", "create_app"]

MAX_FENCE_TIMEOUT_S = 300.0
_PUBLISHER: web.AppKey[Publisher] = web.AppKey("publisher", Publisher)
_FENCES: web.AppKey[FenceTable] = web.AppKey("fences")
_READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
_log = structlog.get_logger("watermark.http")

# Most specific first: PartitionNotRegistered is a ConfigError.
_ERRORS: tuple[tuple[type[L0gcError], int, str], ...] = (
    (StaleEpoch, 409, "stale_epoch"),
    (PartitionNotHosted, 404, "not_hosted"),
    (PartitionNotRegistered, 404, "not_registered"),
    (FenceTimeout, 503, "fence_timeout"),
    (GuardClosed, 503, "guard_closed"),
    (FenceExpired, 410, "fence_expired"),
    (FencingViolation, 409, "fencing_violation"),
    (IllegalTransition, 409, "illegal_offset"),
    (EtcdUnavailable, 503, "etcd_unavailable"),
    (ConfigError, 400, "bad_request"),
    (L0gcError, 500, "error"),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadRequest(Exception):
    """The request body is not what the route takes; answered with 400."""


class UnknownFence(Exception):
    """No live fence has this token; answered with 404."""


def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": code, "message": message, **extra}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return _error(400, "bad_request", str(exc))
    except UnknownFence:
        return _error(
            404,
            "unknown_fence",
            "no such fence: it was committed, aborted or reclaimed, or never granted; "
            "fence again (and do not commit the entry under the old token)",
        )
    except L0gcError as exc:
        status, code = next((s, c) for kind, s, c in _ERRORS if isinstance(exc, kind))
        extra: dict[str, Any] = {}
        if isinstance(exc, StaleEpoch | FenceTimeout):
            extra["window"] = list(exc.window)
        if isinstance(exc, StaleEpoch):
            extra["floor"] = exc.floor
        if status >= 500:
            _log.warning("watermark.http_error", path=request.path, code=code, error=str(exc))
        return _error(status, code, str(exc), **extra)


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        doc = await request.json()
    except ValueError as exc:
        raise BadRequest(f"request body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object")
    return doc


def _int_field(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name)
    if type(value) is not int or value < 0:
        raise BadRequest(f"field {name!r} must be an integer >= 0, got {value!r}")
    return value


def _timeout_field(doc: dict[str, Any], default: float) -> float:
    value = doc.get("timeout_s", default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"field 'timeout_s' must be a number of seconds, got {value!r}")
    if not 0 < value <= MAX_FENCE_TIMEOUT_S:
        raise BadRequest(f"field 'timeout_s' must be in (0, {MAX_FENCE_TIMEOUT_S:g}], got {value}")
    return float(value)


def _publisher(request: web.Request) -> Publisher:
    return request.app[_PUBLISHER]


class FenceTable:
    """Fences granted over HTTP, by token id, until committed or aborted.

    Tokens that can no longer be committed (reclaimed, revoked, partition dropped) are
    forgotten whenever the table has doubled since the last sweep, so clients that
    never come back cannot grow it without bound.
    """

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._tokens: dict[str, FenceToken] = {}
        self._swept_at = 64

    def add(self, token: FenceToken) -> None:
        """Remember a granted fence."""
        if len(self._tokens) >= 2 * self._swept_at:
            for token_id, held in list(self._tokens.items()):
                if not self._publisher.is_held(held):
                    del self._tokens[token_id]
            self._swept_at = max(64, len(self._tokens))
        self._tokens[token.token] = token

    def get(self, token_id: str) -> FenceToken:
        """The fence with this token id; UnknownFence if there is none."""
        token = self._tokens.get(token_id)
        if token is None:
            raise UnknownFence
        return token

    def forget(self, token: FenceToken) -> None:
        """Drop a committed, aborted or expired fence."""
        self._tokens.pop(token.token, None)


async def fence(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/fence."""
    publisher = _publisher(request)
    doc = await _body(request)
    epoch = _int_field(doc, "epoch")
    timeout_s = _timeout_field(doc, publisher.fence_timeout_s)
    token = await publisher.acquire(request.match_info["partition"], epoch, timeout_s)
    request.app[_FENCES].add(token)
    expires_in = None if token.deadline is None else max(0.0, token.deadline - publisher.clock())
    return web.json_response(
        {
            "token": token.token,
            "partition": token.partition,
            "epoch": token.epoch,
            "window": list(token.window),
            "slid": token.slid,
            "deadline": None if expires_in is None else round(time.time() + expires_in, 3),
            "expires_in_s": expires_in,
        }
    )


def _token(request: web.Request) -> FenceToken:
    return request.app[_FENCES].get(request.match_info["token"])


async def commit(request: web.Request) -> web.Response:
    """POST /v1/fences/{token}/commit."""
    publisher = _publisher(request)
    token = _token(request)
    offset = _int_field(await _body(request), "offset")
    try:
        publisher.commit(token, offset)
    except FenceExpired:
        request.app[_FENCES].forget(token)
        raise
    request.app[_FENCES].forget(token)
    return web.json_response(publisher.state(token.partition))


async def abort(request: web.Request) -> web.Response:
    """POST /v1/fences/{token}/abort."""
    token = _token(request)
    request.app[_FENCES].forget(token)
    return web.json_response({"aborted": _publisher(request).abort(token)})


async def reconciled(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/reconciled."""
    publisher = _publisher(request)
    partition = request.match_info["partition"]
    publisher.reconciled(partition, _int_field(await _body(request), "offset"))
    return web.json_response(publisher.state(partition))


async def adopt(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/adopt."""
    doc = await _body(request)
    log_end = doc.get("log_end_offset")
    if log_end is not None and (type(log_end) is not int or log_end < -1):
        raise BadRequest(
            f"field 'log_end_offset' must be the offset of the log's last entry (>= 0), -1 "
            f"for an empty log, or null if unknown; got {log_end!r}"
        )
    state = await _publisher(request).adopt(request.match_info["partition"], log_end_offset=log_end)
    return web.json_response(state)


async def show(request: web.Request) -> web.Response:
    """GET /v1/partitions/{partition}."""
    return web.json_response(_publisher(request).state(request.match_info["partition"]))


async def listing(request: web.Request) -> web.Response:
    """GET /v1/partitions."""
    publisher = _publisher(request)
    return web.json_response(
        {
            "version": RECORD_VERSION,
            "owner": publisher.owner_id,
            "partitions": [publisher.state(name) for name in publisher.partitions],
        }
    )


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics."""
    body = _publisher(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: the process and its event loop answer."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """GET /readyz: 200 once the first publish round is done and until shutdown starts."""
    if request.app[_READY]():
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "not_ready"}, status=503)


def create_app(publisher: Publisher, *, ready: Callable[[], bool] | None = None) -> web.Application:
    """The aiohttp application for `publisher`; `ready` overrides the readiness check."""
    app = web.Application(middlewares=[_errors])
    app[_PUBLISHER] = publisher
    app[_FENCES] = FenceTable(publisher)
    app[_READY] = ready if ready is not None else (lambda: publisher.published_once)
    partition = "/v1/partitions/{partition:.+}"
    app.router.add_post(f"{partition}/fence", fence)
    app.router.add_post(f"{partition}/reconciled", reconciled)
    app.router.add_post(f"{partition}/adopt", adopt)
    app.router.add_get(partition, show)
    app.router.add_get("/v1/partitions", listing)
    app.router.add_post("/v1/fences/{token}/commit", commit)
    app.router.add_post("/v1/fences/{token}/abort", abort)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class ApiServer:
    """Runs an app on host:port; `start` returns the bound port (0 picks a free one)."""

    def __init__(self, app: web.Application, *, shutdown_timeout_s: float = 5.0) -> None:
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout_s)
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on `host`:`port`; return the port actually bound."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc}; choose another --http-port or host"
            ) from exc
        self.port = int(self._runner.addresses[0][1])
        _log.info("watermark.http_listening", host=host, port=self.port)
        return self.port

    async def stop(self) -> None:
        """Stop accepting, let running requests finish (bounded), close."""
        await self._runner.cleanup()
