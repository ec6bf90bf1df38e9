"""A request body of the publisher's HTTP API: read within limits, checked field by field.

What a request must be before a route's logic sees it (the OpenAPI document of
`watermark.api.openapi` states it for the API's users): a body of at most
`HttpLimits.max_body_bytes` (413 body_too_large, connection closed), read within
`HttpLimits.read_timeout_s` (408 request_timeout, connection closed), strict JSON
(`l0gc.strictjson`: bounded nesting, no duplicate keys, no NaN/Infinity) that
is one object with only the route's fields; integers are JSON integers in
[0, `MAX_FIELD_VALUE`]; a batch holds at most `HttpLimits.max_batch_entries` entries of
exactly the entry's fields. Anything else raises an `HttpProblem`, which the API's
error middleware answers with its status and code (and counts as refused).
"""

from __future__ import annotations

import asyncio
import reprlib
from typing import Any

from aiohttp import web

from l0gc import strictjson
from l0gc.contract.references import MAX_ENTRY_KEYS, Keys
from l0gc.errors import InvalidJson, InvalidRecord
from watermark.api.http_server import HTTP_LIMITS
from watermark.api.limits import HttpLimits
from watermark.service.metrics import HttpRefusal

__all__ = [
    "MAX_FENCE_TIMEOUT_S",
    "MAX_FIELD_VALUE",
    "BadRequest",
    "BatchTooLarge",
    "BodyTimeout",
    "BodyTooLarge",
    "HttpProblem",
    "entries",
    "int_field",
    "objects_field",
    "read_body",
    "str_field",
    "timeout_field",
]

MAX_FENCE_TIMEOUT_S = 300.0
MAX_FIELD_VALUE = 2**63 - 1
"""The largest epoch or offset a request may carry (a signed 64-bit integer)."""
MAX_BODY_DEPTH = 4
_short = reprlib.Repr()  # a hostile value must not flood a message
_short.maxstring = _short.maxother = _short.maxlong = 40


class HttpProblem(Exception):
    """A request the API refuses before any route logic: `status`, `code`, `reason`."""

    status = 400
    code = "bad_request"
    reason = HttpRefusal.BAD_REQUEST
    close = False


class BadRequest(HttpProblem):
    """The request body is not what the route takes; answered with 400."""


class BodyTooLarge(HttpProblem):
    """The body is larger than the limit; answered with 413 and the connection closed."""

    status, code, reason, close = 413, "body_too_large", HttpRefusal.BODY_TOO_LARGE, True


class BatchTooLarge(HttpProblem):
    """More entries than a batch may carry; answered with 413."""

    status, code, reason = 413, "batch_too_large", HttpRefusal.BODY_TOO_LARGE


class BodyTimeout(HttpProblem):
    """The body did not arrive in time; answered with 408 and the connection closed."""

    status, code, reason, close = 408, "request_timeout", HttpRefusal.READ_TIMEOUT, True


async def read_body(
    request: web.Request, *fields: str, max_bytes: int | None = None
) -> dict[str, Any]:
    """The request's JSON object, which may hold only `fields` (see the module docstring),
    of at most `max_bytes` (default: the limits' `max_body_bytes`)."""
    if not request.can_read_body:
        return {}
    limits = request.app[HTTP_LIMITS]
    cap = limits.max_body_bytes if max_bytes is None else max_bytes
    declared = request.content_length
    if declared is not None and declared > cap:
        raise BodyTooLarge(
            f"request body of {declared} bytes is larger than the limit of {cap}; "
            + (
                "split the batch"
                if max_bytes is not None
                else "these routes take a small JSON object"
            )
        )
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise BodyTimeout(
            f"request body not received within {limits.read_timeout_s:g} s; send the whole "
            "request at once"
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise BodyTooLarge(
            f"request body is larger than the limit of {cap} bytes; these routes take a "
            "small JSON object"
        ) from None
    if len(raw) > cap:  # chunked bodies carry no Content-Length
        raise BodyTooLarge(f"request body of {len(raw)} bytes is larger than the limit of {cap}")
    try:
        doc = strictjson.loads(raw, what="request body", max_bytes=cap, max_depth=MAX_BODY_DEPTH)
    except InvalidJson as exc:
        raise BadRequest(str(exc)) from None
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object")
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        takes = ", ".join(fields) or "no fields"
        raise BadRequest(
            f"request body field {_short.repr(unknown[0])} is not taken by this route "
            f"(it takes: {takes})"
        )
    return doc


def int_field(doc: dict[str, Any], name: str, where: str = "", *, minimum: int = 0) -> int:
    value = doc.get(name)
    if type(value) is not int or not minimum <= value <= MAX_FIELD_VALUE:
        raise BadRequest(
            f"field {where}{name!r} must be a JSON integer in [{minimum}, {MAX_FIELD_VALUE}], "
            f"got {_short.repr(value)}"
        )
    return value


def str_field(doc: dict[str, Any], name: str, where: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(
            f"field {where}{name!r} must be a non-empty string, got {_short.repr(value)}"
        )
    return value


def objects_field(doc: dict[str, Any], where: str = "") -> Keys | None:
    """The optional ``objects``: object keys (at most `MAX_ENTRY_KEYS`), checked once
    (`Keys`), None if absent."""
    if "objects" not in doc:
        return None
    value = doc["objects"]
    if not isinstance(value, list) or len(value) > MAX_ENTRY_KEYS:
        raise BadRequest(
            f"field {where}'objects' must be a list of at most {MAX_ENTRY_KEYS} object keys, "
            f"got {_short.repr(value)}"
        )
    try:
        return Keys.checked(value, f"field {where}'objects'")
    except InvalidRecord as exc:
        raise BadRequest(str(exc)) from None


def entries(
    doc: dict[str, Any],
    name: str,
    fields: tuple[str, ...],
    limits: HttpLimits,
    optional: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The batch's list of entry objects, each holding exactly `fields` (and any of
    `optional`)."""
    entries = doc.get(name)
    if not isinstance(entries, list) or not entries:
        raise BadRequest(f"field {name!r} must be a non-empty list of objects")
    if len(entries) > limits.max_batch_entries:
        raise BatchTooLarge(
            f"{len(entries)} entries in {name!r}: the limit is {limits.max_batch_entries} "
            "per request; split the batch"
        )
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not set(fields) <= set(entry) <= {*fields, *optional}:
            also = f" (and optionally {', '.join(optional)})" if optional else ""
            raise BadRequest(
                f"{name}[{index}] must be an object with exactly the fields "
                f"{', '.join(fields)}{also}; got {_short.repr(entry)}"
            )
    return entries


def timeout_field(doc: dict[str, Any], default: float) -> float:
    value = doc.get("timeout_s", default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"field 'timeout_s' must be a number of seconds, got {_short.repr(value)}")
    if not 0 < value <= MAX_FENCE_TIMEOUT_S:
        raise BadRequest(
            f"field 'timeout_s' must be in (0, {MAX_FENCE_TIMEOUT_S:g}], got {_short.repr(value)}"
        )
    return float(value)
