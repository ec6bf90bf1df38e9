"""The writer's routes: fences and commits, one at a time or in batches, and the epoch.

Design notes: docs/internals/publisher.md, `watermark.api.http_fences`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from l0gc.contract.record import RECORD_VERSION
from l0gc.contract.references import Keys
from l0gc.errors import L0gcError, PartitionNotHosted
from watermark.api import http_body
from watermark.api.http_errors import UNKNOWN_FENCE, Moved, UnknownFence, problem, short
from watermark.api.http_routing import ROUTER, on_owner, publisher_of, unhosted
from watermark.api.http_server import HTTP_LIMITS
from watermark.core.fencebook import DEFAULT_ENDED_HORIZON_S, DEFAULT_MAX_ENDED, FenceBook
from watermark.service.guard import FenceToken
from watermark.service.publisher import Publisher

__all__ = [
    "EPOCH_READER",
    "FENCES",
    "EpochReader",
    "FenceTable",
    "abort",
    "commit",
    "commits",
    "epoch",
    "fence",
    "fences",
]


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
    """``fence``: one fence on the partition of the path, at the body's epoch."""
    publisher = publisher_of(request)
    doc = await http_body.read_body(request, "epoch", "timeout_s")
    epoch = http_body.int_field(doc, "epoch")
    timeout_s = http_body.timeout_field(doc, publisher.fence_timeout_s)
    partition = request.match_info["partition"]
    token = await on_owner(
        request, partition, lambda: publisher.acquire(partition, epoch, timeout_s)
    )
    request.app[FENCES].add(token)
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
        exc = await unhosted(request, exc)
    if isinstance(exc, Moved):
        return {
            "status": 307,
            "error": "moved",
            "message": "owned by another replica: send this entry there",
            "owner": exc.owner,
            "address": exc.address,
        }
    if isinstance(exc, UnknownFence):
        return {"status": 404, "error": "unknown_fence", "message": UNKNOWN_FENCE}
    status, code, extra = problem(exc)
    return {"status": status, "error": code, "message": str(exc), **extra}


async def fences(request: web.Request) -> web.Response:
    """``fences``: one fence per entry, acquired concurrently."""
    publisher, limits = publisher_of(request), request.app[HTTP_LIMITS]
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
                f"partition {short.repr(partition)} appears twice in 'fences'"
            )
        wanted[partition] = http_body.int_field(entry, "epoch", where)

    def granted(token: FenceToken) -> dict[str, Any]:
        request.app[FENCES].add(token)
        return {"status": 200, **_granted(token, publisher)}

    async def waiting(partition: str, epoch: int) -> dict[str, Any]:
        try:
            token = await on_owner(
                request, partition, lambda: publisher.acquire(partition, epoch, timeout_s)
            )
        except (L0gcError, Moved) as exc:
            return {"partition": partition, **await _refused(request, exc)}
        return granted(token)

    # Entries granted on the fast path are answered without a task each; the rest
    # (a slide, an etcd read, another replica) are decided concurrently.
    results: list[dict[str, Any] | None] = []
    slow: list[tuple[int, str, int]] = []
    local = request.app[ROUTER] is None
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


def _commit(request: web.Request, token: FenceToken, offset: int, objects: Keys | None) -> bool:
    """Commit `token` at `offset`, naming `objects` (True: a repeat of a commit that
    succeeded); whatever the answer, a fence that ended is remembered as ended (see
    `FenceTable`; a commit refused for want of room for its references has not ended)."""
    try:
        return publisher_of(request).commit(token, offset, objects or ())
    finally:
        request.app[FENCES].finish(token)


async def commits(request: web.Request) -> web.Response:
    """``commits``: the entries applied in order, each answered. The batch's ``objects``
    are named by every entry that names none of its own (one L0 object holding data of
    many partitions: its key is sent, checked and encoded once)."""
    limits, table = request.app[HTTP_LIMITS], request.app[FENCES]
    doc = await http_body.read_body(
        request, "commits", "objects", max_bytes=limits.max_batch_body_bytes
    )
    shared = http_body.objects_field(doc)  # named by each entry that names none itself
    parsed = [
        (
            http_body.str_field(entry, "token", f"commits[{i}]."),
            http_body.int_field(entry, "offset", f"commits[{i}]."),
            shared if "objects" not in entry else http_body.objects_field(entry, f"commits[{i}]."),
        )
        for i, entry in enumerate(
            http_body.entries(doc, "commits", ("token", "offset"), limits, ("objects",))
        )
    ]
    results: list[dict[str, Any]] = []
    for token_id, offset, objects in parsed:
        try:
            token = table.get(token_id)
            repeat = _commit(request, token, offset, objects)
        except (L0gcError, UnknownFence) as exc:
            results.append(await _refused(request, exc))
            continue
        results.append(
            {"status": 200, "partition": token.partition, "offset": offset, "repeat": repeat}
        )
    return web.json_response({"results": results})


def _token(request: web.Request) -> FenceToken:
    return request.app[FENCES].get(request.match_info["token"])


async def commit(request: web.Request) -> web.Response:
    """``commit``: the fence of the path's token at the body's offset."""
    token = _token(request)
    doc = await http_body.read_body(
        request, "offset", "objects", max_bytes=request.app[HTTP_LIMITS].max_batch_body_bytes
    )
    offset = http_body.int_field(doc, "offset")
    repeat = _commit(request, token, offset, http_body.objects_field(doc))
    return web.json_response({**publisher_of(request).state(token.partition), "repeat": repeat})


async def abort(request: web.Request) -> web.Response:
    """``abort``: 200 ``{"aborted": true, "outcome": "aborted"}``
    when released now; for a fence that had already ended (within the horizon),
    ``{"aborted": false, "outcome": how it ended}``."""
    token = _token(request)
    await http_body.read_body(request)
    aborted = publisher_of(request).abort(token)
    request.app[FENCES].finish(token)
    outcome = token.outcome
    return web.json_response(
        {"aborted": aborted, "outcome": "revoked" if outcome is None else outcome.value}
    )


async def epoch(request: web.Request) -> web.Response:
    """``epoch``: the cluster epoch, read from etcd now (concurrent requests share
    one read), and the created_epoch and window of each partition hosted here."""
    publisher = publisher_of(request)
    current = await request.app[EPOCH_READER].read()
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


class EpochReader:
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


FENCES: web.AppKey[FenceTable] = web.AppKey("fences", FenceTable)
EPOCH_READER: web.AppKey[EpochReader] = web.AppKey("epoch_reader", EpochReader)
