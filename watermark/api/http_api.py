"""The publisher's JSON API over HTTP, for writers that are not in Python (aiohttp).

Routes (every body and answer is JSON; errors are ``{"error": CODE, "message": ...}``),
with the role each needs when the service has a token file (`watermark.api.auth`). The
contract is `watermark.api.openapi` (served at ``GET /v1/openapi.json``, checked in as
docs/openapi.json); each error code's status is in `watermark.api.openapi_errors`:

    POST /v1/partitions/{partition}/fence       {"epoch": N, "timeout_s": 5}     writer
         200 {"token", "partition", "epoch", "window": [a, b], "slid",
              "deadline" (unix seconds), "expires_in_s"}
         409 stale_epoch {"window": [a, b], "floor"}
         409 epoch_ahead {"cluster_epoch"}   404 not_hosted
         503 fence_timeout | guard_closed | etcd_unavailable
    POST /v1/fences/{token}/commit    {"offset": N}  -> 200 partition state + "repeat"
         404 unknown_fence   410 fence_expired   409 illegal_offset | already_committed |
         fencing_violation                                                       writer
    POST /v1/fences/{token}/abort           -> 200 {"aborted": bool, "outcome": ...}
         404 unknown_fence                                                       writer
    GET  /v1/epoch  -> 200 {"version", "epoch", "partitions": [{"partition",
                            "created_epoch", "window"}]}   503 etcd_unavailable  any role
    POST /v1/fences    {"fences": [{"partition": P, "epoch": N}, ...], "timeout_s": 5}
         -> 200 {"results": [one per entry, in order]}                          writer
    POST /v1/commits   {"commits": [{"token": T, "offset": N}, ...]}
         -> 200 {"results": [one per entry, in order]}                          writer
    POST /v1/partitions/{partition}/reconciled  {"offset": N[, "log_end_offset": L]}
                                                                -> 200 partition state
                                                                             reconciler
    POST /v1/partitions/{partition}/adopt       {"log_end_offset": N | -1 | null}
                                                                -> 200 partition state
         404 not_registered   409 illegal_offset   503 etcd_unavailable         admin
    POST /v1/partitions/{partition}/register | deregister   (`watermark.api.http_registry`)
                                                           registrar (force: admin)
    GET  /v1/partitions/{partition}                             -> 200 partition state
    GET  /v1/partitions/{partition}/owner   -> 200 {"version", "partition", "owner",
                                                    "address", "local"}
         404 not_hosted   503 no_owner
    GET  /v1/partitions                   -> 200 {"version", "owner", "partitions": [...]}
                                                                               any role
    GET  /metrics (Prometheus text)   GET /healthz   GET /readyz (503 until ready)
    GET  /v1/openapi.json (this API's OpenAPI 3.1 document)          open to everyone

Every request but the open three: 401 unauthorized (with ``WWW-Authenticate: Bearer``)
without ``Authorization: Bearer TOKEN`` or with an unknown token, 403 forbidden if the
token's role may not use the route (admin may use every route). Without a token file
(loopback, mutual TLS only, or --insecure-no-auth) nothing is asked. Tokens are never
logged or echoed.

Bodies (checked by `watermark.api.http_body`): at most `HttpLimits.max_body_bytes` (413
body_too_large), read within `HttpLimits.read_timeout_s` (408 request_timeout,
connection closed), strict JSON (`watermark.core.strictjson`: bounded nesting, no
duplicate keys, no NaN/Infinity) holding one object with only the route's fields;
integers must be JSON integers (``1.0`` is not) in [0, 2**63 - 1]. Anything else is 400
bad_request. An unexpected exception in a handler is a JSON 500 ``internal_error``
without details; the traceback goes to the log. Connection limits and the request-head
timeout: `watermark.api.http_server`.

Replicas (`watermark serve --replicated`, a `router` given to `create_app`): a request
for a partition this replica does not serve (fence, reconciled, adopt, show) is
answered, after the token check, with 307 and a ``Location`` on the owning replica (the
same path; the body is the JSON error ``moved`` with ``owner`` and ``address``), or
waits while the partition moves between replicas and then is served or redirected
(503 ``no_owner`` with ``Retry-After: 1`` if that takes longer than the router's wait),
or is 404 ``not_hosted`` when no replica lists it. A partition not hosted that has no
record in etcd at all (a typo, or deregistered) is 404 ``not_registered`` instead, which
a writer does not retry (`_unhosted`). ``adopt`` there never takes
ownership: the replicas own partitions through their leases, and ``adopt`` only tells
the owner where the log ends. Commits and aborts name a fence token, which lives on the
replica that granted it, and are never redirected.

Batches (`fences`, `commits`): one request fences every partition an L0 object carries,
or commits many (token, offset) entries. A batch is not atomic: each entry is decided on
its own, exactly as the single route would decide it, and answered in its result,
``{"status": 200, ...the single route's answer...}`` or ``{"status": S, "error": CODE,
"message", ...}`` with the single route's status and code (307 ``moved`` with ``owner``
and ``address`` for a partition another replica owns: send that entry there). Fences of
one batch are acquired concurrently (a slide on one partition does not hold up the
others), so a writer that gets some refused aborts the granted ones it will not use, as
it would after single fences. Commits are applied in the order given (a partition's
offsets must increase through the list). A partition may appear once per fence batch.
The batch itself answers 400 only when its body is malformed, 413 above
`HttpLimits.max_batch_entries` entries or `max_batch_body_bytes`; 401/403 as every route.

Partition names may contain '/' (``orders/0``). Routes take the name either raw
(``/v1/partitions/orders/0/fence``) or percent-encoded (``/v1/partitions/orders%2F0/
fence``); the route's fixed suffix (``/fence``, ``/reconciled``, ``/adopt``,
``/owner``) is matched last, so a name that itself ends in ``/fence`` still works (but
``GET .../x/owner`` raw is the owner of ``x``, not the state of ``x/owner``). Clients
should percent-encode: it is unambiguous for every name.

Protocol for a write: read the epoch (``GET /v1/epoch``), upload the object stamped with
epoch E, ``fence`` E, append the entry to the partition log, ``commit`` the token with
the entry's offset (or ``abort``). A token is a bearer credential for one fence.

Idempotence. Fences are remembered after they end (`FenceTable`: 5 minutes, or the last
100,000 ended ones): a commit repeated with the same token and offset answers 200 again
with ``"repeat": true``; another offset is 409 already_committed; a commit under a fence
that ended otherwise is 410 fence_expired naming how (aborted, refused, reclaimed,
revoked); abort of an ended fence answers 200 ``{"aborted": false, "outcome": ...}``. A
commit refused for good (illegal_offset, fencing_violation) releases its fence.

A fence's ``deadline`` is when a waiting window slide may reclaim it; a reclaimed
token's commit answers 410 (or 404 once the service has forgotten it) and the entry
must not be committed. On 409
stale_epoch or epoch_ahead re-read the cluster epoch and re-upload. A partition leader
that takes over a partition calls ``adopt`` with the offset of its log's last entry
(-1 when the log is empty): entries the previous owner applied but never published
then hold the watermark until the reconciler has passed them. Without it (null, or the
partitions `watermark serve --partitions` adopts at start) the partition gets no idle
advance until its first commit. One place, `_ERRORS`, maps exceptions to statuses.
"""

from __future__ import annotations

import asyncio
import reprlib
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import structlog
from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST

from watermark.api import http_body
from watermark.api.auth import Access, TokenSet, allows, bearer_token, roles_allowed
from watermark.api.http_registry import (
    REGISTRY,
    ROLE,
    ForceForbidden,
    Registry,
    deregister,
    register,
)
from watermark.api.http_server import HTTP_LIMITS, HttpLimits
from watermark.api.openapi import served
from watermark.api.openapi_errors import ERROR_CODES
from watermark.core.assignment import Route, RouteKind
from watermark.core.fencebook import DEFAULT_ENDED_HORIZON_S, DEFAULT_MAX_ENDED, FenceBook
from watermark.core.record import RECORD_VERSION
from watermark.errors import (
    AlreadyCommitted,
    ConfigError,
    EpochAhead,
    EtcdUnavailable,
    FenceExpired,
    FenceTimeout,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    L0gcError,
    LiveOwner,
    NoOwner,
    PartitionNotHosted,
    PartitionNotRegistered,
    StaleEpoch,
)
from watermark.service.guard import FenceToken
from watermark.service.metrics import HttpRefusal
from watermark.service.publisher import Publisher

__all__ = [
    "FenceTable",
    "Moved",
    "Router",
    "UnknownFence",
    "create_app",
]

_PUBLISHER: web.AppKey[Publisher] = web.AppKey("publisher", Publisher)
_FENCES: web.AppKey[FenceTable] = web.AppKey("fences")
_READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
_TOKENS: web.AppKey[Callable[[], TokenSet | None]] = web.AppKey("tokens")
_ROUTER: web.AppKey[Router | None] = web.AppKey("router")
_EPOCH_READER: web.AppKey[_EpochReader] = web.AppKey("epoch_reader")
_T = TypeVar("_T")
_log = structlog.get_logger("watermark.http")
_short = reprlib.Repr()  # a hostile value must not flood a message
_short.maxstring = _short.maxother = _short.maxlong = 40

# Most specific first: PartitionNotRegistered is a ConfigError. Each code's status is
# in `watermark.api.openapi_errors.ERROR_CODES`, the one table of the API's errors.
_ERRORS: tuple[tuple[type[L0gcError], str], ...] = (
    (StaleEpoch, "stale_epoch"),
    (EpochAhead, "epoch_ahead"),
    (PartitionNotHosted, "not_hosted"),
    (PartitionNotRegistered, "not_registered"),
    (FenceTimeout, "fence_timeout"),
    (GuardClosed, "guard_closed"),
    (FenceExpired, "fence_expired"),
    (AlreadyCommitted, "already_committed"),
    (FencingViolation, "fencing_violation"),
    (IllegalTransition, "illegal_offset"),
    (EtcdUnavailable, "etcd_unavailable"),
    (NoOwner, "no_owner"),
    (LiveOwner, "live_owner"),
    (ConfigError, "bad_request"),
    (L0gcError, "error"),
)

_UNKNOWN_FENCE = (
    "no such fence: never granted by this publisher, or it ended more than 5 minutes ago "
    "and is forgotten; do not commit the entry under this token: fence again"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class UnknownFence(Exception):
    """No live fence has this token; answered with 404."""


class Router(Protocol):
    """Where requests for partitions go among replicas (`watermark.service.replicas.ReplicaSet`)."""

    @property
    def address(self) -> str:
        """This replica's own URL, as the others redirect to it."""
        ...

    async def locate(self, partition: str) -> Route:
        """SERVE, REDIRECT or UNKNOWN (waiting while the partition moves; NoOwner after)."""
        ...


class Moved(Exception):
    """Another replica owns the partition; answered with 307 to it."""

    def __init__(self, partition: str, owner: str, address: str) -> None:
        super().__init__(partition, owner, address)
        self.partition = partition
        self.owner = owner
        self.address = address


def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": code, "message": message, **extra}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes a JSON answer; nothing but the log sees a traceback."""
    try:
        return await handler(request)
    except http_body.HttpProblem as exc:
        _publisher(request).metrics.http_refused(exc.reason)
        response = _error(exc.status, exc.code, str(exc))
        if exc.close:
            response.force_close()
        return response
    except Moved as exc:
        _publisher(request).metrics.redirects.inc()
        response = _error(
            307,
            "moved",
            f"partition {_short.repr(exc.partition)} is owned by replica {_short.repr(exc.owner)} "
            f"at {exc.address}: send this request there (and keep sending this partition's "
            "requests there until it answers otherwise)",
            owner=exc.owner,
            address=exc.address,
        )
        response.headers[hdrs.LOCATION] = exc.address + request.raw_path
        return response
    except UnknownFence:
        return _error(
            404,
            "unknown_fence",
            _UNKNOWN_FENCE,
        )
    except ForceForbidden:
        _publisher(request).metrics.http_refused(HttpRefusal.FORBIDDEN)
        return _error(403, "forbidden", "only an admin token may deregister with force "
                      "(it revokes a live owner)")  # fmt: skip
    except L0gcError as exc:
        if isinstance(exc, PartitionNotHosted):
            exc = await _unhosted(request, exc)
        status, code, extra = _problem(exc)
        if status >= 500:
            _log.warning("watermark.http_error", route=_route(request), code=code, error=str(exc))
        response = _error(status, code, str(exc), **extra)
        if isinstance(exc, NoOwner):
            response.headers[hdrs.RETRY_AFTER] = "1"
        return response
    except web.HTTPException as exc:  # the router's 404 and 405
        if exc.status < 400:
            raise
        response = _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
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
        return _error(
            500,
            "internal_error",
            "the service failed to handle this request (its log has the details); retry, "
            "and report it if it persists",
        )


async def _unhosted(request: web.Request, exc: PartitionNotHosted) -> L0gcError:
    """`exc`, or PartitionNotRegistered when etcd holds no record of its partition: a
    typo or a deregistered partition is answered ``not_registered`` (stop), not
    ``not_hosted`` (retry forever). If etcd cannot say, the answer stays ``not_hosted``."""
    try:
        registered = await _publisher(request).store.get_partition(exc.partition)
    except L0gcError:
        return exc  # etcd unavailable, a malformed record or name: not provably absent
    return exc if registered is not None else PartitionNotRegistered(exc.partition)


def _problem(exc: L0gcError) -> tuple[int, str, dict[str, Any]]:
    """(status, code, extra fields) of the answer to `exc` (see `_ERRORS`)."""
    code = next(c for kind, c in _ERRORS if isinstance(exc, kind))
    status = ERROR_CODES[code].status
    extra: dict[str, Any] = {}
    if isinstance(exc, StaleEpoch | FenceTimeout):
        extra["window"] = list(exc.window)
    if isinstance(exc, FenceTimeout) and exc.oldest is not None:
        extra["held_epoch"], extra["held_for_s"] = exc.oldest[0], round(exc.oldest[1], 3)
    if isinstance(exc, AlreadyCommitted):
        extra["committed_offset"] = exc.committed
    if isinstance(exc, StaleEpoch):
        extra["floor"] = exc.floor
    if isinstance(exc, EpochAhead):
        extra["cluster_epoch"] = exc.cluster_epoch
    return status, code, extra


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
    metrics = _publisher(request).metrics
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
        response = _error(401, "unauthorized", message)
        response.headers[hdrs.WWW_AUTHENTICATE] = challenge
        return response
    request[ROLE] = role
    if not allows(role, access):
        metrics.http_refused(HttpRefusal.FORBIDDEN)
        needed = " or ".join(r.value for r in roles_allowed(access))
        response = _error(
            403,
            "forbidden",
            f"a {role.value} token may not use {request.method} {_route(request)}: it needs "
            f"a {needed} token",
        )
        response.headers[hdrs.WWW_AUTHENTICATE] = 'Bearer realm="l0gc", error="insufficient_scope"'
        return response
    return await handler(request)


def _publisher(request: web.Request) -> Publisher:
    return request.app[_PUBLISHER]


async def _locate(request: web.Request, partition: str) -> None:
    """Return when this replica serves `partition`; raise Moved (307) or
    PartitionNotHosted otherwise. Without a router every partition is served here."""
    router = request.app[_ROUTER]
    if router is None or _publisher(request).serving(partition):
        return
    found = await router.locate(partition)
    if found.kind is RouteKind.REDIRECT and found.member is not None:
        raise Moved(partition, found.member.member_id, found.member.address)
    if found.kind is not RouteKind.SERVE:
        raise PartitionNotHosted(partition)


async def _on_owner(
    request: web.Request, partition: str, action: Callable[[], Awaitable[_T]]
) -> _T:
    """Run `action` on the replica that owns `partition` (see the module docstring): a
    partition that moves away meanwhile is located again, twice at most."""
    for attempt in range(3):
        await _locate(request, partition)
        try:
            return await action()
        except (PartitionNotHosted, GuardClosed):
            if request.app[_ROUTER] is None or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _now(value: _T) -> _T:
    return value


class FenceTable:
    """Fences granted over HTTP, by token id: live ones until they end, ended ones for
    the horizon of `watermark.core.fencebook` (5 min, or the last 100,000 ended fences),
    so a repeated commit or abort is answered as the first one was."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        horizon_s: float = DEFAULT_ENDED_HORIZON_S,
        max_ended: int = DEFAULT_MAX_ENDED,
    ) -> None:
        self._clock = clock
        self._book: FenceBook[FenceToken] = FenceBook(horizon_s=horizon_s, max_ended=max_ended)

    def add(self, token: FenceToken) -> None:
        """Remember a granted fence."""
        self._book.add(token.token, token, self._clock())

    def get(self, token_id: str) -> FenceToken:
        """The fence with this token id (live, or ended within the horizon); UnknownFence
        if there is none."""
        token = self._book.get(token_id, self._clock())
        if token is None:
            raise UnknownFence
        return token

    def finish(self, token: FenceToken) -> None:
        """`token` may have ended (committed, aborted, refused): remember it as ended."""
        if token.outcome is not None:
            self._book.finish(token.token, self._clock())


async def fence(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/fence."""
    publisher = _publisher(request)
    doc = await http_body.read_body(request, "epoch", "timeout_s")
    epoch = http_body.int_field(doc, "epoch")
    timeout_s = http_body.timeout_field(doc, publisher.fence_timeout_s)
    partition = request.match_info["partition"]
    token = await _on_owner(
        request, partition, lambda: publisher.acquire(partition, epoch, timeout_s)
    )
    request.app[_FENCES].add(token)
    return web.json_response(_granted(token, publisher))


def _granted(token: FenceToken, publisher: Publisher) -> dict[str, Any]:
    """A granted fence as the API answers it."""
    expires_in = None if token.deadline is None else max(0.0, token.deadline - publisher.clock())
    return {
        "token": token.token,
        "partition": token.partition,
        "epoch": token.epoch,
        "window": list(token.window),
        "slid": token.slid,
        "deadline": None if expires_in is None else round(time.time() + expires_in, 3),
        "expires_in_s": expires_in,
    }


async def _refused(request: web.Request, exc: L0gcError | Moved | UnknownFence) -> dict[str, Any]:
    """A batch entry's answer for a refusal: the single route's status, code and fields."""
    if isinstance(exc, PartitionNotHosted):
        exc = await _unhosted(request, exc)
    if isinstance(exc, Moved):
        return {"status": 307, "error": "moved", "message": "owned by another replica: send "
                "this entry there", "owner": exc.owner, "address": exc.address}  # fmt: skip
    if isinstance(exc, UnknownFence):
        return {"status": 404, "error": "unknown_fence", "message": _UNKNOWN_FENCE}
    status, code, extra = _problem(exc)
    return {"status": status, "error": code, "message": str(exc), **extra}


async def fences(request: web.Request) -> web.Response:
    """POST /v1/fences: one fence per entry, acquired concurrently."""
    publisher, limits = _publisher(request), request.app[HTTP_LIMITS]
    doc = await http_body.read_body(
        request, "fences", "timeout_s", max_bytes=limits.max_batch_body_bytes
    )
    timeout_s = http_body.timeout_field(doc, publisher.fence_timeout_s)
    wanted: dict[str, int] = {}
    for index, entry in enumerate(http_body.entries(doc, "fences", ("partition", "epoch"), limits)):
        where = f"fences[{index}]."
        partition = http_body.str_field(entry, "partition", where)
        if partition in wanted:
            raise http_body.BadRequest(
                f"partition {_short.repr(partition)} appears twice in 'fences'"
            )
        wanted[partition] = http_body.int_field(entry, "epoch", where)

    def granted(token: FenceToken) -> dict[str, Any]:
        request.app[_FENCES].add(token)
        return {"status": 200, **_granted(token, publisher)}

    async def waiting(partition: str, epoch: int) -> dict[str, Any]:
        try:
            token = await _on_owner(
                request, partition, lambda: publisher.acquire(partition, epoch, timeout_s)
            )
        except (L0gcError, Moved) as exc:
            return {"partition": partition, **await _refused(request, exc)}
        return granted(token)

    # Entries granted on the fast path are answered without a task each; the rest
    # (a slide, an etcd read, another replica) are decided concurrently.
    results: list[dict[str, Any] | None] = []
    slow: list[tuple[int, str, int]] = []
    local = request.app[_ROUTER] is None
    for partition, epoch in wanted.items():
        token = None
        if local or publisher.serving(partition):
            try:
                token = publisher.try_acquire(partition, epoch)
            except L0gcError as exc:
                results.append({"partition": partition, **await _refused(request, exc)})
                continue
        results.append(None if token is None else granted(token))
        if token is None:
            slow.append((len(results) - 1, partition, epoch))
    decided = await asyncio.gather(*(waiting(p, e) for _, p, e in slow))
    for (index, _, _), answer in zip(slow, decided, strict=True):
        results[index] = answer
    return web.json_response({"results": results})


def _commit(request: web.Request, token: FenceToken, offset: int) -> bool:
    """Commit `token` at `offset` (True: a repeat of a commit that succeeded); whatever
    the answer, a fence that ended is remembered as ended (see `FenceTable`)."""
    try:
        return _publisher(request).commit(token, offset)
    finally:
        request.app[_FENCES].finish(token)


async def commits(request: web.Request) -> web.Response:
    """POST /v1/commits: the entries applied in order, each answered."""
    limits, table = request.app[HTTP_LIMITS], request.app[_FENCES]
    doc = await http_body.read_body(request, "commits", max_bytes=limits.max_batch_body_bytes)
    parsed = [
        (http_body.str_field(entry, "token", f"commits[{i}]."),
         http_body.int_field(entry, "offset", f"commits[{i}]."))
        for i, entry in enumerate(http_body.entries(doc, "commits", ("token", "offset"), limits))
    ]  # fmt: skip
    results: list[dict[str, Any]] = []
    for token_id, offset in parsed:
        try:
            token = table.get(token_id)
            repeat = _commit(request, token, offset)
        except (L0gcError, UnknownFence) as exc:
            results.append(await _refused(request, exc))
            continue
        results.append(
            {"status": 200, "partition": token.partition, "offset": offset, "repeat": repeat}
        )
    return web.json_response({"results": results})


def _token(request: web.Request) -> FenceToken:
    return request.app[_FENCES].get(request.match_info["token"])


async def commit(request: web.Request) -> web.Response:
    """POST /v1/fences/{token}/commit."""
    token = _token(request)
    offset = http_body.int_field(await http_body.read_body(request, "offset"), "offset")
    repeat = _commit(request, token, offset)
    return web.json_response({**_publisher(request).state(token.partition), "repeat": repeat})


async def abort(request: web.Request) -> web.Response:
    """POST /v1/fences/{token}/abort: 200 ``{"aborted": true, "outcome": "aborted"}``
    when released now; for a fence that had already ended (within the horizon),
    ``{"aborted": false, "outcome": how it ended}``."""
    token = _token(request)
    await http_body.read_body(request)
    aborted = _publisher(request).abort(token)
    request.app[_FENCES].finish(token)
    outcome = token.outcome
    return web.json_response(
        {"aborted": aborted, "outcome": "revoked" if outcome is None else outcome.value}
    )


async def epoch(request: web.Request) -> web.Response:
    """GET /v1/epoch: the cluster epoch, read from etcd now (concurrent requests share
    one read), and the created_epoch and window of each partition hosted here."""
    publisher = _publisher(request)
    current = await request.app[_EPOCH_READER].read()
    hosted = []
    for name in publisher.partitions:
        try:
            state = publisher.state(name)
        except PartitionNotHosted:
            continue  # let go meanwhile
        hosted.append(
            {"partition": name, "created_epoch": state["created_epoch"], "window": state["window"]}
        )
    return web.json_response({"version": RECORD_VERSION, "epoch": current, "partitions": hosted})


class _EpochReader:
    """Shares one etcd read of the cluster epoch among the requests that arrive while it
    runs (a crowd of writers polling costs one read per round trip, not one each)."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._reading: asyncio.Task[int] | None = None

    async def read(self) -> int:
        reading = self._reading
        if reading is None or reading.done():
            reading = self._reading = asyncio.ensure_future(self._publisher.read_cluster_epoch())
        return await asyncio.shield(reading)


async def openapi(request: web.Request) -> web.Response:
    """GET /v1/openapi.json: the API's OpenAPI 3.1 document (docs/openapi.json), its
    ``servers`` entry the address the request was sent to."""
    body = served(f"{request.scheme}://{request.host}")
    return web.Response(body=body, content_type="application/json")


def _log_end_offset(doc: dict[str, Any]) -> int | None:
    log_end = doc.get("log_end_offset")
    highest = http_body.MAX_FIELD_VALUE
    if log_end is not None and (type(log_end) is not int or not -1 <= log_end <= highest):
        raise http_body.BadRequest(
            f"field 'log_end_offset' must be the offset of the log's last entry (>= 0), -1 "
            f"for an empty log, or null if unknown; got {_short.repr(log_end)}"
        )
    return log_end


async def reconciled(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/reconciled."""
    publisher = _publisher(request)
    partition = request.match_info["partition"]
    doc = await http_body.read_body(request, "offset", "log_end_offset")
    offset = http_body.int_field(doc, "offset", minimum=-1)  # -1: nothing lifted yet
    log_end = _log_end_offset(doc)

    def report() -> dict[str, Any]:
        publisher.reconciled(partition, offset, log_end_offset=log_end)
        return publisher.state(partition)

    return web.json_response(await _on_owner(request, partition, lambda: _now(report())))


async def adopt(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/adopt."""
    log_end = _log_end_offset(await http_body.read_body(request, "log_end_offset"))
    publisher, partition = _publisher(request), request.match_info["partition"]
    if request.app[_ROUTER] is None:
        state = await publisher.adopt(partition, log_end_offset=log_end)
        return web.json_response(state)

    def learn() -> dict[str, Any]:  # replicas own through leases: never take ownership here
        if log_end is None:
            return publisher.state(partition)
        return publisher.learn_log_end(partition, log_end)

    return web.json_response(await _on_owner(request, partition, lambda: _now(learn())))


async def show(request: web.Request) -> web.Response:
    """GET /v1/partitions/{partition}."""
    publisher, partition = _publisher(request), request.match_info["partition"]
    state = await _on_owner(request, partition, lambda: _now(publisher.state(partition)))
    return web.json_response(state)


async def owner(request: web.Request) -> web.Response:
    """GET /v1/partitions/{partition}/owner."""
    publisher, partition = _publisher(request), request.match_info["partition"]
    router = request.app[_ROUTER]
    address = None if router is None else router.address
    try:
        await _locate(request, partition)
    except Moved as moved:
        owner_id, address, local = moved.owner, moved.address, False
    else:
        publisher.state(partition)  # PartitionNotHosted (404) if not hosted after all
        owner_id, local = publisher.owner_id, True
    return web.json_response(
        {
            "version": RECORD_VERSION,
            "partition": partition,
            "owner": owner_id,
            "address": address,
            "local": local,
        }
    )


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


# What each route needs (None: open to everyone). A path no route matches needs READ,
# so a caller without a token learns nothing from 404s.
_ACCESS: dict[Callable[..., Any], Access | None] = {
    fence: Access.WRITE,
    commit: Access.WRITE,
    abort: Access.WRITE,
    fences: Access.WRITE,
    commits: Access.WRITE,
    epoch: Access.READ,
    reconciled: Access.RECONCILE,
    adopt: Access.ADMIN,
    register: Access.REGISTER,
    deregister: Access.REGISTER,
    show: Access.READ,
    owner: Access.READ,
    listing: Access.READ,
    metrics: None,
    healthz: None,
    readyz: None,
    openapi: None,
}


def create_app(
    publisher: Publisher,
    *,
    ready: Callable[[], bool] | None = None,
    tokens: Callable[[], TokenSet | None] | None = None,
    limits: HttpLimits | None = None,
    router: Router | None = None,
) -> web.Application:
    """The aiohttp application for `publisher`.

    `ready` overrides the readiness check; `tokens` returns the tokens callers must
    present (called per request, so a reloaded token file takes effect at once; None:
    no token is asked); `limits` bound the requests (see `watermark.api.http_server`);
    `router` makes it one replica of several (see the module docstring).
    """
    limits = limits if limits is not None else HttpLimits()
    app = web.Application(
        middlewares=[_errors, _authorize], client_max_size=limits.max_batch_body_bytes
    )
    app[_PUBLISHER] = publisher
    app[_FENCES] = FenceTable(publisher.clock)
    app[_EPOCH_READER] = _EpochReader(publisher)
    app[_READY] = ready if ready is not None else (lambda: publisher.published_once)
    app[_TOKENS] = tokens if tokens is not None else (lambda: None)
    app[HTTP_LIMITS] = limits
    app[_ROUTER] = router
    app[REGISTRY] = Registry(publisher, replicated=router is not None)
    partition = "/v1/partitions/{partition:.+}"
    app.router.add_post(f"{partition}/fence", fence)
    app.router.add_post(f"{partition}/reconciled", reconciled)
    app.router.add_post(f"{partition}/adopt", adopt)
    app.router.add_get(f"{partition}/owner", owner)
    app.router.add_post(f"{partition}/register", register)
    app.router.add_post(f"{partition}/deregister", deregister)
    app.router.add_get(partition, show)
    app.router.add_get("/v1/partitions", listing)
    app.router.add_post("/v1/fences/{token}/commit", commit)
    app.router.add_post("/v1/fences/{token}/abort", abort)
    app.router.add_post("/v1/fences", fences)
    app.router.add_post("/v1/commits", commits)
    app.router.add_get("/v1/epoch", epoch)
    app.router.add_get("/v1/openapi.json", openapi)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
