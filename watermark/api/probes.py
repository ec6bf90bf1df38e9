"""`watermark serve --probe-port`: the probes on a listener of their own.

The API port's admission (`watermark.api.http_server`) keeps a small reserve of
connections for probes, but the reserve is shared by every client address: idle
sockets from a dozen addresses hold all of it, and the kubelet's liveness probe then
fails and a healthy publisher is restarted. A second listener that serves only
``GET /healthz``, ``/readyz`` and ``/metrics`` (no token, no TLS: the kubelet cannot
present a client certificate, and these answers are public on the API port too) is not
reachable through the API port at all, so no client of the API can starve it. Its own
admission is small and strict (`PROBE_LIMITS`): restrict who reaches it with a
NetworkPolicy (the kubelet and Prometheus).

The answers are the API port's: ``/healthz`` says the event loop runs, ``/readyz`` is
200 once the publisher is ready and until shutdown starts, ``/metrics`` the same
registry.
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
