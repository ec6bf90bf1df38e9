"""Where a partition's request is served: here, on another replica (307), or nowhere.

Design notes: docs/internals/publisher.md, `watermark.api.http_routing`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiohttp import web

from l0gc.errors import GuardClosed, L0gcError, PartitionNotHosted, PartitionNotRegistered
from watermark.api.http_errors import Moved
from watermark.core.assignment import Route, RouteKind
from watermark.service.publisher import Publisher

__all__ = ["PUBLISHER", "ROUTER", "Router", "locate", "now", "on_owner", "publisher_of", "unhosted"]

_T = TypeVar("_T")


class Router(Protocol):
    """Where requests for partitions go among replicas (`watermark.service.replicas.ReplicaSet`)."""

    @property
    def address(self) -> str:
        """This replica's own URL, as the others redirect to it."""
        ...

    async def locate(self, partition: str) -> Route:
        """SERVE, REDIRECT or UNKNOWN (waiting while the partition moves; NoOwner after)."""
        ...

    def check_served(self, partition: str) -> None:
        """NotServed unless the fleet's --partitions list names `partition`."""
        ...


PUBLISHER: web.AppKey[Publisher] = web.AppKey("publisher", Publisher)
ROUTER: web.AppKey[Router | None] = web.AppKey("router")


def publisher_of(request: web.Request) -> Publisher:
    """The publisher whose API this is."""
    return request.app[PUBLISHER]


async def unhosted(request: web.Request, exc: PartitionNotHosted) -> L0gcError:
    """`exc`, or PartitionNotRegistered when etcd holds no record of its partition: a
    typo or a deregistered partition is answered ``not_registered`` (stop), not
    ``not_hosted`` (retry forever). If etcd cannot say, the answer stays ``not_hosted``."""
    try:
        registered = await publisher_of(request).store.get_partition(exc.partition)
    except L0gcError:
        return exc  # etcd unavailable, a malformed record or name: not provably absent
    return exc if registered is not None else PartitionNotRegistered(exc.partition)


async def locate(request: web.Request, partition: str) -> None:
    """Return when this replica serves `partition`; raise Moved (307) or
    PartitionNotHosted otherwise. Without a router every partition is served here."""
    router = request.app[ROUTER]
    if router is None or publisher_of(request).serving(partition):
        return
    found = await router.locate(partition)
    if found.kind is RouteKind.REDIRECT and found.member is not None:
        raise Moved(partition, found.member.member_id, found.member.address)
    if found.kind is not RouteKind.SERVE:
        raise PartitionNotHosted(partition)


async def on_owner(request: web.Request, partition: str, action: Callable[[], Awaitable[_T]]) -> _T:
    """Run `action` on the replica that owns `partition` (see the module docstring): a
    partition that moves away meanwhile is located again, twice at most."""
    for attempt in range(3):
        await locate(request, partition)
        try:
            return await action()
        except (PartitionNotHosted, GuardClosed):
            if request.app[ROUTER] is None or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def now(value: _T) -> _T:
    """`value`, as an awaitable (an `on_owner` action that does not wait)."""
    return value
