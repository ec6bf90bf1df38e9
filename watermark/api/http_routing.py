"""Where a partition's request is served: here, on another replica (307), or nowhere.

Without a router (one `watermark serve` adopting its partitions) every partition is
served by this process's `Publisher`. With one (`watermark serve --replicated`, a
`Router` given to `create_app`: `watermark.service.replicas.ReplicaSet`), a request for
a partition this replica does not serve (fence, reconciled, adopt, show) is answered,
after the token check, with 307 and a ``Location`` on the owning replica (the same
path; the body is the JSON error ``moved`` with ``owner`` and ``address``), or waits
while the partition moves between replicas and then is served or redirected (503
``no_owner`` with ``Retry-After: 1`` if that takes longer than the router's wait), or
is 404 ``not_hosted`` when no replica lists it. A partition not hosted that has no
record in etcd at all (a typo, or deregistered) is 404 ``not_registered`` instead,
which a writer does not retry (`unhosted`). Commits and aborts name a fence token,
which lives on the replica that granted it, and are never redirected.

The app's shared parts live under the keys here (`PUBLISHER`, `ROUTER`), so that every
route module reads them the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiohttp import web

from watermark.api.http_errors import Moved
from watermark.core.assignment import Route, RouteKind
from watermark.errors import GuardClosed, L0gcError, PartitionNotHosted, PartitionNotRegistered
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
