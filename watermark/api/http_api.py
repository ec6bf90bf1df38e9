"""The publisher's JSON API over HTTP (aiohttp), for writers that are not in Python.

Design notes: docs/internals/publisher.md, `watermark.api.http_api`.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog
from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST

from l0gc.auth import Access, TokenSet, allows, bearer_token, roles_allowed
from l0gc.errors import L0gcError, NoOwner, PartitionNotHosted
from watermark.api import http_body, http_fences, http_partitions
from watermark.api.http_errors import (
    UNKNOWN_FENCE,
    Moved,
    UnknownFence,
    error,
    problem,
    short,
)
from watermark.api.http_registry import (
    REGISTRY,
    ROLE,
    ForceForbidden,
    Registry,
    deregister,
    register,
)
from watermark.api.http_routing import PUBLISHER, ROUTER, Router, publisher_of, unhosted
from watermark.api.http_server import HTTP_LIMITS
from watermark.api.limits import HttpLimits
from watermark.api.openapi import ROUTES, served
from watermark.service.metrics import HttpRefusal
from watermark.service.publisher import Publisher

__all__ = ["HANDLERS", "create_app"]

_READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
_TOKENS: web.AppKey[Callable[[], TokenSet | None]] = web.AppKey("tokens")
_log = structlog.get_logger("watermark.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes a JSON answer; nothing but the log sees a traceback."""
    try:
        return await handler(request)
    except http_body.HttpProblem as exc:
        publisher_of(request).metrics.http_refused(exc.reason)
        response = error(exc.status, exc.code, str(exc))
        if exc.close:
            response.force_close()
        return response
    except Moved as exc:
        publisher_of(request).metrics.redirects.inc()
        response = error(
            307,
            "moved",
            f"partition {short.repr(exc.partition)} is owned by replica {short.repr(exc.owner)} "
            f"at {exc.address}: send this request there (and keep sending this partition's "
            "requests there until it answers otherwise)",
            owner=exc.owner,
            address=exc.address,
        )
        response.headers[hdrs.LOCATION] = exc.address + request.raw_path
        return response
    except UnknownFence:
        return error(
            404,
            "unknown_fence",
            UNKNOWN_FENCE,
        )
    except ForceForbidden:
        publisher_of(request).metrics.http_refused(HttpRefusal.FORBIDDEN)
        return error(
            403,
            "forbidden",
            "only an admin token may deregister with force (it revokes a live owner)",
        )
    except L0gcError as exc:
        if isinstance(exc, PartitionNotHosted):
            exc = await unhosted(request, exc)
        status, code, extra = problem(exc)
        if status >= 500:
            _log.warning("watermark.http_error", route=_route(request), code=code, error=str(exc))
        response = error(status, code, str(exc), **extra)
        if isinstance(exc, NoOwner):
            response.headers[hdrs.RETRY_AFTER] = "1"
        return response
    except web.HTTPException as exc:  # the router's 404 and 405
        if exc.status < 400:
            raise
        response = error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
        if hdrs.ALLOW in exc.headers:
            response.headers[hdrs.ALLOW] = exc.headers[hdrs.ALLOW]
        return response
    except ConnectionError:
        raise  # the client went away: aiohttp drops the connection quietly
    except Exception as exc:  # noqa: BLE001 - the one place a handler's bug becomes a 500
        _log.error(
            "watermark.http_internal_error",
            route=_route(request),
            method=request.method,
            error=type(exc).__name__,
            traceback=traceback.format_exc(),
        )
        return error(
            500,
            "internal_error",
            "the service failed to handle this request (its log has the details); retry, "
            "and report it if it persists",
        )


def _route(request: web.Request) -> str:
    """The matched route's pattern: never the raw path, which may hold a fence token."""
    resource = request.match_info.route.resource
    return "-" if resource is None else resource.canonical


@web.middleware
async def _authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Require a bearer token whose role may use the route (see the module docstring)."""
    tokens = request.app[_TOKENS]()
    access = _ACCESS.get(request.match_info.handler, Access.READ)
    if tokens is None or access is None:
        return await handler(request)
    presented = bearer_token(request.headers.get(hdrs.AUTHORIZATION))
    role = None if presented is None else tokens.role_of(presented)
    metrics = publisher_of(request).metrics
    if role is None:
        metrics.http_refused(HttpRefusal.UNAUTHORIZED)
        challenge = 'Bearer realm="l0gc"'
        message = (
            "no bearer token: send the header 'Authorization: Bearer TOKEN' with a token "
            "from the service's token file"
        )
        if presented is not None:
            challenge += ', error="invalid_token"'
            message = (
                "unknown bearer token: check it against the service's token file (the "
                "service re-reads that file on SIGHUP)"
            )
        response = error(401, "unauthorized", message)
        response.headers[hdrs.WWW_AUTHENTICATE] = challenge
        return response
    request[ROLE] = role
    if not allows(role, access):
        metrics.http_refused(HttpRefusal.FORBIDDEN)
        needed = " or ".join(r.value for r in roles_allowed(access))
        response = error(
            403,
            "forbidden",
            f"a {role.value} token may not use {request.method} {_route(request)}: it needs "
            f"a {needed} token",
        )
        response.headers[hdrs.WWW_AUTHENTICATE] = 'Bearer realm="l0gc", error="insufficient_scope"'
        return response
    return await handler(request)


async def openapi(request: web.Request) -> web.Response:
    """GET /v1/openapi.json: the API's OpenAPI 3.1 document (docs/openapi.json), its
    ``servers`` entry the address the request was sent to."""
    body = served(f"{request.scheme}://{request.host}")
    return web.Response(body=body, content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics."""
    body = publisher_of(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: the process and its event loop answer."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """GET /readyz: 200 once the first publish round is done and until shutdown starts."""
    if request.app[_READY]():
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "not_ready"}, status=503)


HANDLERS: Final[dict[str, Handler]] = {
    "fence": http_fences.fence,
    "commit": http_fences.commit,
    "abort": http_fences.abort,
    "fences": http_fences.fences,
    "commits": http_fences.commits,
    "epoch": http_fences.epoch,
    "reconciled": http_partitions.reconciled,
    "adopt": http_partitions.adopt,
    "register": register,
    "deregister": deregister,
    "show": http_partitions.show,
    "owner": http_partitions.owner,
    "listing": http_partitions.listing,
    "metrics": metrics,
    "healthz": healthz,
    "readyz": readyz,
    "openapi": openapi,
}
"""The handler of each operationId of `watermark.api.openapi.ROUTES`."""
_ROLES: Final[dict[str | None, Access | None]] = {
    "writer": Access.WRITE,
    "reconciler": Access.RECONCILE,
    "registrar": Access.REGISTER,
    "admin": Access.ADMIN,
    "any": Access.READ,
    None: None,
}
# What each route needs (None: open to everyone), as the document says. A path no
# route matches needs READ, so a caller without a token learns nothing from 404s.
_ACCESS: Final[dict[Callable[..., Any], Access | None]] = {
    HANDLERS[name]: _ROLES[role] for _, _, name, role, *_ in ROUTES
}


def create_app(
    publisher: Publisher,
    *,
    ready: Callable[[], bool] | None = None,
    tokens: Callable[[], TokenSet | None] | None = None,
    limits: HttpLimits | None = None,
    router: Router | None = None,
) -> web.Application:
    """The aiohttp application for `publisher`: the routes of `watermark.api.openapi`.

    `ready` overrides the readiness check; `tokens` returns the tokens callers must
    present (called per request, so a reloaded token file takes effect at once; None:
    no token is asked); `limits` bound the requests (see `watermark.api.http_server`);
    `router` makes it one replica of several (see `watermark.api.http_routing`).
    """
    limits = limits if limits is not None else HttpLimits()
    app = web.Application(
        middlewares=[_errors, _authorize], client_max_size=limits.max_batch_body_bytes
    )
    app[PUBLISHER] = publisher
    app[http_fences.FENCES] = http_fences.FenceTable(publisher.clock)
    app[http_fences.EPOCH_READER] = http_fences.EpochReader(publisher)
    app[_READY] = ready if ready is not None else (lambda: publisher.published_once)
    app[_TOKENS] = tokens if tokens is not None else (lambda: None)
    app[HTTP_LIMITS] = limits
    app[ROUTER] = router
    app[REGISTRY] = Registry(
        publisher,
        replicated=router is not None,
        check_served=None if router is None else router.check_served,
    )
    for method, path, name, *_ in ROUTES:  # in the document's order: suffixes first
        add = app.router.add_get if method == "get" else app.router.add_post
        add(path.replace("{partition}", "{partition:.+}"), HANDLERS[name])  # names hold '/'

    return app
