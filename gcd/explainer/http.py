"""``GET /v1/explain?key=K[&key=K2...]`` on the daemon's HTTP port: `gcd explain` for programs.

Read-only, the same answer as ``gcd explain --json`` (`gcd.explainer.answer`), for the
daemon's own store, layout, grace period, etcd namespace and journal. Checked like the
publisher's read routes (`l0gc.auth`): with ``--auth-token-file`` every caller
shows a bearer token of any role (401 otherwise); without one the route answers only
when the daemon listens on loopback (403 beyond it: an object key list is not for
everyone on the network), while /metrics, /healthz and /readyz stay open as before.

At most `MAX_KEYS` keys per request (400 beyond, and for none or an empty key); a store
or etcd that cannot be read answers 503 with the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from gcd.explainer.answer import explain_keys, read_gc_facts
from gcd.journal.search import SegmentSource
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import BucketStore
from gcd.sweep.binding import BoundSource
from l0gc import strictjson
from l0gc.auth import TokenFile, bearer_token, is_loopback
from l0gc.errors import L0gcError, StorageError

__all__ = ["MAX_KEYS", "ExplainRoute"]

MAX_KEYS: Final = 1000
_MAX_KEY_BYTES: Final = 4096


def _json(status: int, doc: dict[str, Any]) -> web.Response:
    body = strictjson.dumps(doc, what="explain answer", nonfinite_as_null=True)
    return web.Response(status=status, text=body + "\n", content_type="application/json")


@dataclass(frozen=True, slots=True)
class ExplainRoute:
    """What the route explains with: the daemon's store, etcd and journal."""

    objects: BucketStore
    source: BoundSource | None
    """The daemon's `BoundSource` (None without etcd)."""
    layout: KeyLayout
    grace_s: float
    override: int | None
    journal: SegmentSource | None
    journal_prefix: str | None
    host: str
    tokens: TokenFile | None = None

    def refusal(self, request: web.Request) -> web.Response | None:
        """401/403 when the caller may not read, None when it may."""
        if self.tokens is None:
            if is_loopback(self.host):
                return None
            return _json(
                403,
                {
                    "version": 1,
                    "error": "forbidden",
                    "message": "GET /v1/explain answers beyond loopback only with "
                    "--auth-token-file (any role)",
                },
            )
        token = bearer_token(request.headers.get("Authorization"))
        if token is None or self.tokens.tokens.role_of(token) is None:
            return _json(
                401,
                {
                    "version": 1,
                    "error": "unauthorized",
                    "message": "send Authorization: Bearer TOKEN (any role)",
                },
            )
        return None

    async def handle(self, request: web.Request) -> web.Response:
        """GET /v1/explain."""
        refused = self.refusal(request)
        if refused is not None:
            return refused
        keys = request.query.getall("key", [])
        bad = next(
            (
                k
                for k in keys
                if not k or len(k.encode("utf-8", "surrogateescape")) > _MAX_KEY_BYTES
            ),
            None,
        )
        if not keys or len(keys) > MAX_KEYS or bad is not None:
            return _json(
                400,
                {
                    "version": 1,
                    "error": "bad_request",
                    "message": f"give 1 to {MAX_KEYS} non-empty ?key= parameters of at most "
                    f"{_MAX_KEY_BYTES} bytes (got {len(keys)})",
                },
            )
        store = None if self.source is None else getattr(self.source, "store", None)
        try:
            facts = await read_gc_facts(
                store,
                self.source,
                grace_s=self.grace_s,
                override=self.override,
                journal_prefix=self.journal_prefix,
            )
            report = await explain_keys(
                keys, self.layout, facts, objects=self.objects, journal=self.journal, store=store
            )
        except (StorageError, L0gcError, OSError) as exc:
            return _json(503, {"version": 1, "error": "unavailable", "message": str(exc)})
        return _json(200, report.to_dict())

    def routes(self) -> list[tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]]:
        """(path, handler) of the GET routes to add to the daemon's app."""
        return [("/v1/explain", self.handle)]
