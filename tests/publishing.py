"""The one way tests build a publisher inside the test process.

A test that drives `watermark.service.publisher.Publisher` itself (adopt, fence, commit,
publish rounds, hand-overs, replicas, the HTTP API over an in-process server) builds it
here: `new_publishing(...)` makes one namespace's `WatermarkStore` (on a fresh
`MemoryKV` unless given another KV: a counting or blocking fake, a real etcd's
`EtcdKV`), with the cluster epoch set, partitions registered and the epoch advanced as
asked, and optionally a `HandClock` the test moves; `Publishing.publisher(owner,
**options)` makes a publisher on that store (on the hand clock unless `clock=` is
given), `Publishing.adopting(owner, *partitions, **options)` one that adopted them.
`api_on_loopback` puts an aiohttp app of a publisher behind a real `ApiServer` on
127.0.0.1.

    world = await new_publishing(registered=("p",))      # MemoryKV, cluster epoch 5
    publisher = await world.adopting("pub-a", "p", hold_ttl_s=10)
    store, publisher = await hosting("p")                 # the same, in one call
    successor = await Publishing(store).adopting("pub-b", "p")    # on a store already made

The `publishing` fixture of tests/conftest.py is the same factory, and with
`etcd=True` puts the store on the session's real etcd in the test's namespace (its
client closed after the test). A publisher as a process of its own (`watermark serve`)
is tests/serving.py's; a `--replicated` fleet is the lab's `LocalReplicas`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from l0gc.contract.kv import KV
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from watermark.api.http_server import ApiServer
from watermark.service.publisher import Publisher

__all__ = [
    "NS",
    "HandClock",
    "MakePublishing",
    "Publishing",
    "api_on_loopback",
    "hosting",
    "new_publishing",
]

NS = "/l0gc/test"
"""The namespace of a store on a MemoryKV when the test names none."""


class HandClock:
    """A clock the test moves by hand (`clock.now += 30`)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Publishing:
    """One namespace's store, and the publishers a test builds on it."""

    store: WatermarkStore
    clock: HandClock | None = None
    """Given to each publisher (unless the call gives `clock=`)."""

    @property
    def kv(self) -> KV:
        """The KV under the store (a MemoryKV, a test's fake or a real etcd's client)."""
        return self.store.kv

    def publisher(self, owner: str = "pub-a", **options: Any) -> Publisher:
        """A `Publisher` as `owner` on this store, hosting nothing yet; `options` as its
        constructor takes them (publish_interval_s, hold_ttl_s, metrics, hook, ...)."""
        if self.clock is not None:
            options.setdefault("clock", self.clock)
        return Publisher(self.store, owner, **options)

    async def adopting(
        self, owner: str, *partitions: str, log_end_offset: int | None = None, **options: Any
    ) -> Publisher:
        """`publisher(owner, **options)` having adopted `partitions` in order (each with
        `log_end_offset`)."""
        publisher = self.publisher(owner, **options)
        for name in partitions:
            await publisher.adopt(name, log_end_offset=log_end_offset)
        return publisher


async def new_publishing(
    kv: KV | None = None,
    *,
    namespace: str = NS,
    epoch: int | None = 5,
    registered: Sequence[str] = (),
    advanced: int = 0,
    clock: HandClock | None = None,
    wall_clock: bool = False,
) -> Publishing:
    """A `Publishing` on a store in `namespace` over `kv` (default: a fresh MemoryKV, on
    `clock` when given): the cluster epoch initialised at `epoch` (None: not written),
    `registered` registered in order, then the epoch advanced `advanced` times. With
    `wall_clock`, the store stamps records (`updated_at`) with `clock` too."""
    if kv is None:
        kv = MemoryKV() if clock is None else MemoryKV(now=clock)
    if wall_clock:
        assert clock is not None, "wall_clock=True stamps records with `clock`: give one"
        store = WatermarkStore(kv, namespace, wall_clock=clock)
    else:
        store = WatermarkStore(kv, namespace)
    if epoch is not None:
        await store.init_cluster_epoch(epoch)
    for name in registered:
        await store.register_partition(name)
    for _ in range(advanced):
        await store.advance_cluster_epoch()
    return Publishing(store, clock)


MakePublishing = Callable[..., Awaitable[Publishing]]
"""The `publishing` fixture: `await publishing(etcd=False, **new_publishing_options)`."""


async def hosting(
    *partitions: str, owner: str = "pub-a", **options: Any
) -> tuple[WatermarkStore, Publisher]:
    """The common start: a store on a fresh MemoryKV at cluster epoch 5 with `partitions`
    registered, and a publisher `owner` (`options`: its constructor's) that adopted them."""
    world = await new_publishing(registered=partitions)
    return world.store, await world.adopting(owner, *partitions, **options)


async def api_on_loopback(
    stack: AsyncExitStack, app: web.Application, *, port: int = 0, **server: Any
) -> tuple[ApiServer, int]:
    """`app` (a publisher's `create_app`) served by an `ApiServer` (`server`: its options,
    ssl_context, metrics, ...) on 127.0.0.1:`port` (0: a free one); stopped when `stack`
    closes. The server and the port it listens on."""
    api = ApiServer(app, **server)
    bound = await api.start("127.0.0.1", port)
    stack.push_async_callback(api.stop)
    return api, bound
