"""`watermark serve --probe-port`: the probes on a listener of their own.

Design notes: docs/internals/publisher.md, `watermark.api.probes`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from watermark.api.http_server import HTTP_LIMITS
from watermark.api.limits import HttpLimits
from watermark.service.publisher import Publisher

__all__ = ["PROBE_LIMITS", "create_probe_app"]

PROBE_LIMITS = HttpLimits(
    max_connections=64,
    max_connections_per_peer=16,
    head_timeout_s=2.0,
    read_timeout_s=5.0,
    probe_reserve=0,
    max_body_bytes=1024,
)
"""A probe sends one small GET at once: a few connections per address suffice (the
kubelet probes from its node's address, Prometheus from its pod's)."""


def create_probe_app(publisher: Publisher, ready: Callable[[], bool]) -> web.Application:
    """GET /healthz, /readyz and /metrics of `publisher`; `ready` is the readiness check."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not_ready"}, status=503)

    async def metrics(request: web.Request) -> web.Response:
        body = publisher.metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=PROBE_LIMITS.max_body_bytes)
    app[HTTP_LIMITS] = PROBE_LIMITS
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
