"""Partition registration over HTTP: a writer that creates topics registers them itself.

Design notes: docs/internals/publisher.md, `watermark.api.http_registry`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from l0gc.auth import Role
from l0gc.contract.record import RECORD_VERSION, PartitionRecord
from watermark.api import http_body, owners
from watermark.service.publisher import Publisher

__all__ = [
    "REGISTRY",
    "ROLE",
    "ForceForbidden",
    "Registry",
    "deregister",
    "register",
    "register_and_host",
]


@dataclass(frozen=True, slots=True)
class Registry:
    """What the two routes need from the app: the publisher, and whether it is a replica."""

    publisher: Publisher
    replicated: bool
    revoke_wait_s: float = owners.DEFAULT_REVOKE_WAIT_S
    check_served: Callable[[str], None] | None = None
    """Among replicas: NotServed for a name their --partitions list does not hold."""


REGISTRY: web.AppKey[Registry] = web.AppKey("registry", Registry)
ROLE: web.RequestKey[Role | None] = web.RequestKey("role")
"""The caller's role, set by the auth middleware (None: no token file)."""


class ForceForbidden(Exception):
    """``force`` from a token that is not admin: answered 403 forbidden."""


async def register(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/register."""
    registry, partition = request.app[REGISTRY], request.match_info["partition"]
    await http_body.read_body(request)
    record, created = await register_and_host(registry, partition)
    return web.json_response(
        {
            "version": RECORD_VERSION,
            "partition": partition,
            "registered": created,
            "hosted": registry.publisher.serving(partition),
            "record": json.loads(record.encode()),
        }
    )


async def register_and_host(registry: Registry, partition: str) -> tuple[PartitionRecord, bool]:
    """The register route's work: (the record, whether this call created it). A
    non-replicated publisher adopts a record nobody owns (the exhaustive checker's
    registration model runs this against `owners.deregister`)."""
    store, publisher = registry.publisher.store, registry.publisher
    if registry.check_served is not None:
        registry.check_served(partition)  # never a record nobody hosts (issue 55)
    before = await store.get_partition(partition)
    record = before if before is not None else await store.register_partition(partition)
    if not registry.replicated and record.owner is None and not publisher.serving(partition):
        await publisher.adopt(partition)
    return record, before is None


async def deregister(request: web.Request) -> web.Response:
    """POST /v1/partitions/{partition}/deregister."""
    registry, partition = request.app[REGISTRY], request.match_info["partition"]
    doc = await http_body.read_body(request, "force", "reason")
    force = doc.get("force", False)
    reason = doc.get("reason", "")
    if type(force) is not bool:
        raise http_body.BadRequest("field 'force' must be true or false")
    if type(reason) is not str or len(reason) > 1000:
        raise http_body.BadRequest("field 'reason' must be a string of at most 1000 characters")
    role = request.get(ROLE)
    if force and role not in (None, Role.ADMIN):
        raise ForceForbidden
    deleted = await owners.deregister(
        registry.publisher.store,
        [partition],
        force=force,
        revoke_wait_s=registry.revoke_wait_s,
        reason=reason or f"POST /v1/partitions/{partition}/deregister with force",
    )
    return web.json_response(
        {"version": RECORD_VERSION, "partition": partition, "deregistered": bool(deleted)}
    )
