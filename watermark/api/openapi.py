"""The OpenAPI 3.1 document of the publisher's HTTP API, described once, in Python.

`document()` builds it from the description below, the error table
(`watermark.api.openapi_errors`) and the limits the server enforces
(`watermark.api.http_server`, `watermark.api.http_body`); `watermark serve` answers it
at ``GET /v1/openapi.json`` (open, like ``/healthz``: it holds no data, and a client
generator needs it before it has a token), and docs/openapi.json is the same document
checked into the repository. Tests keep them from drifting: the checked-in file equals
`document()`, every route `create_app` registers is described with its role and every
described one is registered, and schemathesis checks a live server's answers against it
(tests/watermark/api/test_openapi_conformance.py).

Regenerate the checked-in copy after a change: ``python -m watermark.api.openapi >
docs/openapi.json``.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from typing import Final

from l0gc.contract.record import RECORD_VERSION
from watermark.api.http_body import MAX_BODY_DEPTH
from watermark.api.limits import (
    DEFAULT_MAX_BATCH_BODY_BYTES,
    DEFAULT_MAX_BATCH_ENTRIES,
    DEFAULT_MAX_BODY_BYTES,
)
from watermark.api.openapi_errors import ERROR_CODES
from watermark.api.openapi_schemas import SCHEMAS, STATE_FIELDS, Json, ref

__all__ = ["OPENAPI_JSON", "ROUTES", "document", "route_table", "served"]

# (method, path, handler name, role or None for open, summary, request schema, answers)
# Answers: status -> schema name (or "text" for Prometheus text); error codes are added
# from the table per status listed in the route's `errors`.
Route = tuple[str, str, str, str | None, str, str | None, dict[int, str], tuple[str, ...]]
_P = "/v1/partitions/{partition}"
_BODY = ("bad_request", "body_too_large", "request_timeout")
_AUTH = ("unauthorized", "forbidden")
_MOVE = ("moved", "no_owner", "not_hosted", "not_registered")
ROUTES: Final[tuple[Route, ...]] = (
    (
        "post",
        f"{_P}/fence",
        "fence",
        "writer",
        ("Fence an epoch on a partition (after the upload, before the log append)"),
        "FenceRequest",
        {200: "FenceGranted"},
        (
            *_AUTH,
            *_BODY,
            *_MOVE,
            "stale_epoch",
            "epoch_ahead",
            "fence_timeout",
            "guard_closed",
            "etcd_unavailable",
        ),
    ),
    (
        "post",
        "/v1/fences/{token}/commit",
        "commit",
        "writer",
        (
            "Commit a fence at the log "
            "offset of its entry (idempotent: a repeat with the same offset answers repeat: true)"
        ),
        "OffsetRequest",
        {200: "CommitAnswer"},
        (
            *_AUTH,
            *_BODY,
            "unknown_fence",
            "fence_expired",
            "already_committed",
            "illegal_offset",
            "fencing_violation",
            "references_full",
            "not_hosted",
            "not_registered",
        ),
    ),
    (
        "post",
        "/v1/fences/{token}/abort",
        "abort",
        "writer",
        ("Release a fence without committing (an entry you will not commit)"),
        None,
        {200: "AbortAnswer"},
        (*_AUTH, *_BODY, "unknown_fence"),
    ),
    (
        "post",
        "/v1/fences",
        "fences",
        "writer",
        ("Fence many partitions in one request (each entry decided as the single route)"),
        "FenceBatchRequest",
        {200: "FenceBatchAnswer"},
        (*_AUTH, *_BODY, "batch_too_large"),
    ),
    (
        "post",
        "/v1/commits",
        "commits",
        "writer",
        ("Commit many fences in one request, in order (each entry decided as the single route)"),
        "CommitBatchRequest",
        {200: "CommitBatchAnswer"},
        (*_AUTH, *_BODY, "batch_too_large"),
    ),
    (
        "get",
        "/v1/epoch",
        "epoch",
        "any",
        (
            "The cluster epoch to stamp objects with, and "
            "each hosted partition's created_epoch and window"
        ),
        None,
        {200: "Epoch"},
        (*_AUTH, "etcd_unavailable"),
    ),
    (
        "post",
        f"{_P}/reconciled",
        "reconciled",
        "reconciler",
        ("The reconciler lifted every entry through this offset"),
        "ReconciledRequest",
        {200: "PartitionState"},
        (*_AUTH, *_BODY, *_MOVE, "illegal_offset", "guard_closed"),
    ),
    (
        "post",
        f"{_P}/adopt",
        "adopt",
        "admin",
        ("Take the partition over (or, among replicas, tell its owner where the log ends)"),
        "AdoptRequest",
        {200: "PartitionState"},
        (*_AUTH, *_BODY, *_MOVE, "illegal_offset", "etcd_unavailable", "guard_closed"),
    ),
    (
        "post",
        f"{_P}/register",
        "register",
        "registrar",
        (
            "Register the partition "
            "(M(p) = cluster epoch - 1; an existing one is unchanged) and host it here when "
            "nobody owns it; among replicas, only a name of their --partitions list"
        ),
        None,
        {200: "RegisterAnswer"},
        (*_AUTH, *_BODY, "not_served", "etcd_unavailable"),
    ),
    (
        "post",
        f"{_P}/deregister",
        "deregister",
        "registrar",
        (
            "Delete the partition's "
            "record, once its objects are gone (refused under a live owner unless force)"
        ),
        "DeregisterRequest",
        {200: "DeregisterAnswer"},
        (*_AUTH, *_BODY, "live_owner", "etcd_unavailable"),
    ),
    (
        "get",
        f"{_P}/owner",
        "owner",
        "any",
        "Which replica owns the partition",
        None,
        {200: "Owner"},
        (*_AUTH, "not_hosted", "not_registered", "no_owner"),
    ),
    (
        "get",
        _P,
        "show",
        "any",
        "What the publisher knows of the partition",
        None,
        {200: "PartitionState"},
        (*_AUTH, *_MOVE, "guard_closed"),
    ),
    (
        "get",
        "/v1/partitions",
        "listing",
        "any",
        "Every partition hosted here",
        None,
        {200: "Listing"},
        _AUTH,
    ),
    ("get", "/metrics", "metrics", None, "Prometheus metrics", None, {200: "text"}, ()),
    (
        "get",
        "/healthz",
        "healthz",
        None,
        "Liveness: the process and its event loop answer",
        None,
        {200: "Status"},
        (),
    ),
    (
        "get",
        "/readyz",
        "readyz",
        None,
        ("Readiness: 200 once the first publish round is done, 503 before and during shutdown"),
        None,
        {200: "Status", 503: "Status"},
        (),
    ),
    (
        "get",
        "/v1/openapi.json",
        "openapi",
        None,
        "This OpenAPI document",
        None,
        {200: "document"},
        (),
    ),
)

_INFO = f"""The HTTP API of `watermark serve`, the l0gc publisher: writers fence the epoch of
each object they upload and commit it with its log offset; reconcilers report what they
lifted. docs/integration.md is the guide; this document is the contract.

Roles: with a token file every route but /metrics, /healthz, /readyz and
/v1/openapi.json needs `Authorization: Bearer TOKEN`; the token's role (x-l0gc-role:
writer, reconciler, registrar, admin; `any` = every role) decides (admin may use every
route).

Errors: `{{"error": CODE, "message": TEXT, ...}}`; each code's status, meaning and what a
writer does next (x-l0gc-action: retry, redirect, reupload, refence, stop) are in
x-l0gc-error-codes.

Bodies: at most {DEFAULT_MAX_BODY_BYTES} bytes ({DEFAULT_MAX_BATCH_BODY_BYTES} for the
batch routes, at most {DEFAULT_MAX_BATCH_ENTRIES} entries), strict JSON (no duplicate
keys, no NaN, nesting at most {MAX_BODY_DEPTH}), only the route's fields; integers are
JSON integers in [0, 2^63-1]. Server flags may lower these limits.

Replicas (`--replicated`): a partition route sent to a replica that does not own the
partition answers 307 `moved` with `Location` on the owner (the same path): send the same
request there, only if it is one of your configured publishers. Fence tokens live on the
replica that granted them: commit and abort there (never redirected).

Partition names may contain '/': percent-encode them in paths (orders%2F0)."""


def _answer(status: int, schema: str, *, many: bool = False) -> Json:
    if schema == "text":
        return {
            "description": "Prometheus text format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    if schema == "document":
        return {
            "description": "an OpenAPI 3.1 document",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    return {
        "description": "success" if status < 300 else "not ready",
        "content": {"application/json": {"schema": ref(schema)}},
    }


def _errors(codes: tuple[str, ...]) -> Json:
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(ERROR_CODES[code].status, []).append(code)
    answers: Json = {}
    for status, named in sorted(by_status.items()):
        listed = "; ".join(f"`{c}`: {ERROR_CODES[c].meaning}" for c in named)
        answer: Json = {
            "description": listed,
            "content": {"application/json": {"schema": ref("Error")}},
        }
        if status == 307:
            answer["headers"] = {
                "Location": {
                    "schema": {"type": "string"},
                    "description": "the same path on the owner",
                }
            }
        if status == 401:
            answer["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
        answers[str(status)] = answer
    return answers


_EXAMPLES: Final[Json] = {
    "fence": {"epoch": 3, "timeout_s": 5},
    "commit": {"offset": 0},
    "fences": {
        "fences": [{"partition": "orders/0", "epoch": 3}, {"partition": "orders/1", "epoch": 3}]
    },
    "reconciled": {"offset": 0},
    "adopt": {"log_end_offset": -1},
    "deregister": {"force": False},
}


def _operation(route: Route) -> Json:
    method, path, name, role, summary, body, answers, codes = route
    op: Json = {"operationId": name, "summary": summary, "responses": {}}
    params = []
    if "{partition}" in path:
        params.append(
            {
                "name": "partition",
                "in": "path",
                "required": True,
                "description": "the partition name, percent-encoded",
                "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                "example": "orders/0",
            }
        )
    if "{token}" in path:
        params.append(
            {
                "name": "token",
                "in": "path",
                "required": True,
                "description": "the fence token from the fence answer",
                "schema": {"type": "string", "minLength": 1, "maxLength": 64},
            }
        )
    if params:
        op["parameters"] = params
    if body is not None:
        media: Json = {"schema": ref(body)}
        if name in _EXAMPLES:
            media["example"] = _EXAMPLES[name]
        required = name not in ("adopt", "deregister")
        op["requestBody"] = {"required": required, "content": {"application/json": media}}
    elif method == "post":
        op["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": {"type": "object", "maxProperties": 0}}},
        }
    for status, schema in answers.items():
        op["responses"][str(status)] = _answer(status, schema)
    op["responses"].update(_errors(codes))
    if role is None:
        op["security"] = []
    else:
        op["x-l0gc-role"] = role
    if name == "fence":
        op["responses"]["200"]["links"] = {
            "commit": {"operationId": "commit", "parameters": {"token": "$response.body#/token"}},
            "abort": {"operationId": "abort", "parameters": {"token": "$response.body#/token"}},
            "state": {
                "operationId": "show",
                "parameters": {"partition": "$response.body#/partition"},
            },
        }
    return op


def document() -> Json:
    """The OpenAPI 3.1 document of the API (see the module docstring)."""
    paths: Json = {}
    for route in ROUTES:
        paths.setdefault(route[1], {})[route[0]] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "l0gc publisher API",
            "version": str(RECORD_VERSION),
            "description": _INFO,
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from the service's "
                    "token file; its role decides the routes",
                }
            },
        },
        "x-l0gc-error-codes": {
            code: {"status": e.status, "action": e.action, "meaning": e.meaning}
            for code, e in sorted(ERROR_CODES.items())
        },
    }


_EVERY_ROUTE_CODES = frozenset({*_AUTH, *_BODY})
"""Codes every route (with a body) may answer: said once under the table, not per row."""
_NAMED_ANSWERS: Final[dict[str, str]] = {
    "text": "Prometheus text",
    "document": "the OpenAPI 3.1 document",
}


def _fields(schema: str) -> str:
    """A schema's fields as docs show them: `{"a", "b"?}` (? = optional); the partition
    state's fields are "partition state"."""
    props, required = SCHEMAS[schema]["properties"], SCHEMAS[schema]["required"]
    state = set(STATE_FIELDS) <= set(props)
    shown = [
        f'"{n}"' + ("" if n in required else "?")
        for n in props
        if not (state and n in STATE_FIELDS)
    ]
    if not state:
        return "`{" + ", ".join(shown) + "}`"
    return "partition state" + (f" and `{', '.join(shown)}`" if shown else "")


def route_table() -> str:
    """The route table of docs/integration.md (markdown), generated from `ROUTES`:
    method and path, role, summary, request body, answers (each status with its schema's
    fields or its error codes). `scripts/gen_cli_reference.py` writes it into the page;
    its --check (a test) fails when the page drifts from this."""
    lines = ["| method and path | role | what it does | body | answers |", "|---|---|---|---|---|"]
    for method, path, _name, role, summary, body, answers, codes in ROUTES:
        shown = [
            f"{status} {_NAMED_ANSWERS.get(schema) or _fields(schema)}"
            for status, schema in answers.items()
        ]
        by_status: dict[int, list[str]] = {}
        for code in codes:
            if code not in _EVERY_ROUTE_CODES:
                by_status.setdefault(ERROR_CODES[code].status, []).append(f"`{code}`")
        shown += [f"{status} {' / '.join(named)}" for status, named in sorted(by_status.items())]
        lines.append(
            f"| `{method.upper()} {path.replace('{partition}', '{p}')}` | {role or 'none'} | "
            f"{summary} | {'-' if body is None else _fields(body)} | {'; '.join(shown)} |"
        )
    return "\n".join(lines) + "\n"


def render() -> str:
    """The document as the checked-in docs/openapi.json holds it."""
    return json.dumps(document(), indent=1, sort_keys=False) + "\n"


OPENAPI_JSON: Final[bytes] = json.dumps(document()).encode()
"""The document as generated (its ``servers`` entry is the default address)."""
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]{1,260}")


@functools.lru_cache(maxsize=16)
def served(origin: str) -> bytes:
    """What ``GET /v1/openapi.json`` answers when asked at `origin` (``scheme://host:port``
    as the request named it): the document with that one ``servers`` entry, so a client
    generated from it talks to the address it was fetched from. An origin that is not a
    plain scheme and host[:port] gets the generated default."""
    if not _ORIGIN.fullmatch(origin):
        return OPENAPI_JSON
    return json.dumps({**document(), "servers": [{"url": origin}]}).encode()


if __name__ == "__main__":
    sys.stdout.write(render())
