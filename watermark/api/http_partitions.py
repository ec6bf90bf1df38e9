"""The partition routes: the reconciler's report, adopt, and what is known of them.

The handlers of the operations ``reconciled``, ``adopt``, ``show``, ``owner`` and
``listing`` (the contract: `watermark.api.openapi`; register and deregister:
`watermark.api.http_registry`). Each partition route is served on the replica that owns
the partition (`watermark.api.http_routing`). A partition leader that takes a partition
over calls ``adopt`` with the offset of its log's last entry (-1 when the log is
empty): entries the previous owner applied but never published then hold the watermark
until the reconciler has passed them; without it the partition gets no idle advance
until its first commit. Among replicas ``adopt`` never takes ownership (the replicas own
partitions through their leases): it only tells the owner where the log ends.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from l0gc.contract.record import RECORD_VERSION
from l0gc.contract.references import References
from l0gc.errors import InvalidRecord
from watermark.api import http_body
from watermark.api.http_errors import Moved, short
from watermark.api.http_routing import ROUTER, locate, now, on_owner, publisher_of
from watermark.api.http_server import HTTP_LIMITS

__all__ = ["adopt", "listing", "owner", "reconciled", "show"]


def _log_end_offset(doc: dict[str, Any]) -> int | None:
    log_end = doc.get("log_end_offset")
    highest = http_body.MAX_FIELD_VALUE
    if log_end is not None and (type(log_end) is not int or not -1 <= log_end <= highest):
        raise http_body.BadRequest(
            f"field 'log_end_offset' must be the offset of the log's last entry (>= 0), -1 "
            f"for an empty log, or null if unknown; got {short.repr(log_end)}"
        )
    return log_end


def _log_references(doc: dict[str, Any]) -> References | None:
    """The optional ``log_references`` (the keys the log's entries name, as a record
    stores them: `l0gc.contract.references.References`)."""
    if doc.get("log_references") is None:
        return None
    if doc.get("log_end_offset") is None:
        raise http_body.BadRequest(
            "field 'log_references' goes with 'log_end_offset': the keys of the entries "
            "through the log end the same request tells"
        )
    try:
        return References.decode(doc["log_references"], "log_references")
    except InvalidRecord as exc:
        raise http_body.BadRequest(str(exc)) from None


async def reconciled(request: web.Request) -> web.Response:
    """``reconciled``: the reconciler lifted every entry through the body's offset."""
    publisher = publisher_of(request)
    partition = request.match_info["partition"]
    doc = await http_body.read_body(
        request,
        "offset",
        "log_end_offset",
        "objects",
        "log_references",
        max_bytes=request.app[HTTP_LIMITS].max_batch_body_bytes,
    )
    offset = http_body.int_field(doc, "offset", minimum=-1)  # -1: nothing lifted yet
    log_end, log_references = _log_end_offset(doc), _log_references(doc)
    objects = http_body.objects_field(doc)
    lifted = None if objects is None else frozenset(objects)

    def report() -> dict[str, Any]:
        publisher.reconciled(
            partition,
            offset,
            log_end_offset=log_end,
            objects=lifted,
            log_references=log_references,
        )
        return publisher.state(partition)

    return web.json_response(await on_owner(request, partition, lambda: now(report())))


async def adopt(request: web.Request) -> web.Response:
    """``adopt``: take the partition over, or (replicas) tell its owner the log end."""
    doc = await http_body.read_body(
        request,
        "log_end_offset",
        "log_references",
        max_bytes=request.app[HTTP_LIMITS].max_batch_body_bytes,
    )
    log_end, log_references = _log_end_offset(doc), _log_references(doc)
    publisher, partition = publisher_of(request), request.match_info["partition"]
    if request.app[ROUTER] is None:
        state = await publisher.adopt(
            partition, log_end_offset=log_end, log_references=log_references
        )
        return web.json_response(state)

    def learn() -> dict[str, Any]:  # replicas own through leases: never take ownership here
        if log_end is None:
            return publisher.state(partition)
        return publisher.learn_log_end(partition, log_end, log_references)

    return web.json_response(await on_owner(request, partition, lambda: now(learn())))


async def show(request: web.Request) -> web.Response:
    """``show``: the partition's state."""
    publisher, partition = publisher_of(request), request.match_info["partition"]
    state = await on_owner(request, partition, lambda: now(publisher.state(partition)))
    return web.json_response(state)


async def owner(request: web.Request) -> web.Response:
    """``owner``: which replica owns the partition."""
    publisher, partition = publisher_of(request), request.match_info["partition"]
    router = request.app[ROUTER]
    address = None if router is None else router.address
    try:
        await locate(request, partition)
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
    """``listing``: every partition hosted here."""
    publisher = publisher_of(request)
    return web.json_response(
        {
            "version": RECORD_VERSION,
            "owner": publisher.owner_id,
            "partitions": [publisher.state(name) for name in publisher.partitions],
        }
    )
