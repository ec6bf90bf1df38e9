"""`watermark serve` as one object: what it opens, in which order, and how it closes.

Design notes: docs/internals/publisher.md, `watermark.service.runner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from l0gc.contract.kv import KV
from l0gc.contract.references import DEFAULT_MAX_REFERENCES
from l0gc.errors import L0gcError, PartitionNotRegistered
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0gc.process.signals import StopOnSignals
from watermark.core.gcstate import PartitionGcState
from watermark.service.eventlog import EVENT_LOG
from watermark.service.guard import FencingGuard
from watermark.service.liveness import Liveness, take_over_plan
from watermark.service.metrics import WatermarkMetrics
from watermark.service.publisher import Publisher
from watermark.service.replicas import ReplicaSet, ReplicaSettings, advertised_url
from watermark.service.ticker import EpochTicker

__all__ = ["Front", "PublisherRunner", "RunnerSettings", "ServeParts"]

_log = structlog.get_logger("watermark.runner")


@dataclass(frozen=True, slots=True)
class ServeParts:
    """The classes `serve` builds its publisher from: the real ones, unless a test harness
    (`gcd chaos --broken-build`) passes deliberately broken ones."""

    store_class: type[WatermarkStore] = WatermarkStore
    state_class: type[PartitionGcState] = PartitionGcState
    guard_class: type[FencingGuard] = FencingGuard


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """What `watermark serve` was asked to run (the flags, checked by the CLI)."""

    owner_id: str
    partitions: tuple[str, ...]
    register: bool
    take_over: bool
    publish_interval_s: float
    idle_advance: bool
    hold_ttl_s: float
    fence_timeout_s: float
    drain_timeout_s: float
    tick_interval_s: float  # 0: no ticker
    ticker_lease_ttl_s: int
    member_lease_ttl_s: int
    http_host: str  # for the default advertised URL
    replicas: ReplicaSettings | None = None  # None: adopt every partition at start
    advertise_url: str | None = None
    fleet_urls_given: bool = False
    max_references: int = DEFAULT_MAX_REFERENCES


class Front(Protocol):
    """The publisher's listeners: the HTTP API and its probes (`watermark.api.front`)."""

    @property
    def tls(self) -> bool:
        """The API is served over TLS."""
        ...

    async def bind(
        self, publisher: Publisher, ready: Callable[[], bool], router: ReplicaSet | None
    ) -> int:
        """Bind the API socket (not accepting yet) and start the probes; the API's port.
        On failure nothing stays open."""
        ...

    async def open(self) -> None:
        """Accept the API's connections."""
        ...

    async def close(self) -> None:
        """Stop the API, then the probes."""
        ...

    def reload(self) -> None:
        """SIGHUP: re-read what may change while running (the token file)."""
        ...


@dataclass(slots=True)
class _Running:
    """What a started runner holds, and the events that stop its tasks."""

    store: WatermarkStore
    kv: KV
    publisher: Publisher
    replicas: ReplicaSet | None
    liveness: Liveness | None
    port: int
    publisher_stop: asyncio.Event = field(default_factory=asyncio.Event)
    ticker_stop: asyncio.Event = field(default_factory=asyncio.Event)
    replicas_stop: asyncio.Event = field(default_factory=asyncio.Event)
    liveness_stop: asyncio.Event = field(default_factory=asyncio.Event)


class PublisherRunner:
    """Opens, runs and closes one `watermark serve` (see the module docstring)."""

    def __init__(
        self,
        settings: RunnerSettings,
        etcd: EtcdSettings,
        front: Front,
        parts: ServeParts | None = None,
    ) -> None:
        self.settings = settings
        self.etcd = etcd
        self.front = front
        self.parts = parts if parts is not None else ServeParts()

    async def run(self) -> dict[str, Any]:
        """Serve until SIGTERM/SIGINT or a failed task; the command's result."""
        kv = await open_kv(self.etcd)
        signals = StopOnSignals(asyncio.Event())  # SIGTERM/SIGINT stop; SIGHUP reloads
        with signals.installed(extra={signal.SIGHUP: self.front.reload}):
            try:
                store = self.parts.store_class(kv, self.etcd.namespace)
                return await self._serve(store, kv, signals)
            finally:
                await kv.close()

    def _publisher(self, store: WatermarkStore) -> Publisher:
        settings = self.settings
        return Publisher(
            store,
            settings.owner_id,
            publish_interval_s=settings.publish_interval_s,
            idle_advance=settings.idle_advance,
            metrics=WatermarkMetrics(),
            hold_ttl_s=settings.hold_ttl_s,
            fence_timeout_s=settings.fence_timeout_s,
            drain_timeout_s=settings.drain_timeout_s,
            state_class=self.parts.state_class,
            guard_class=self.parts.guard_class,
            max_references=settings.max_references,
        )

    async def _serve(self, store: WatermarkStore, kv: KV, signals: StopOnSignals) -> dict[str, Any]:
        settings, front, stopping = self.settings, self.front, signals.stop
        partitions = list(settings.partitions)
        publisher = self._publisher(store)
        # Nothing is written to etcd before every check has passed and the port is bound:
        # a `serve` that cannot start leaves every partition as it found it. (Replicas
        # adopt each partition on its own later, retrying one that cannot be adopted yet.)
        owners = {}
        replicas = None
        if settings.replicas is None:
            owners = await current_owners(
                store, partitions, register=settings.register, owner_id=settings.owner_id
            )
        else:
            replicas = ReplicaSet(store, kv, publisher, settings.replicas)

        def ready() -> bool:
            return bool(
                publisher.published_once
                and not stopping.is_set()
                and (replicas is None or replicas.settled)
            )

        port = await front.bind(publisher, ready, replicas)
        running = _Running(store, kv, publisher, replicas, None, port)
        try:
            if replicas is None:
                running.liveness = Liveness(
                    kv, store.namespace, settings.owner_id, settings.member_lease_ttl_s
                )
                await self._take_partitions(store, publisher, running.liveness, owners)
            else:
                url = settings.advertise_url or advertised_url(
                    settings.http_host, port, tls=front.tls
                )
                replicas.advertise(url)
                for name in partitions if settings.register else ():
                    await store.register_partition(name)
            await front.open()
        except BaseException:
            await front.close()
            if running.liveness is not None:
                await running.liveness.release()
            raise
        return await self._until_stopped(running, signals)

    def _start_tasks(self, running: _Running) -> list[asyncio.Task[None]]:
        """The publisher's rounds, the liveness key or the replica set, the ticker."""
        settings, publisher = self.settings, running.publisher
        tasks = [asyncio.create_task(publisher.run(running.publisher_stop), name="publisher")]
        if running.liveness is not None:
            tasks.append(
                asyncio.create_task(running.liveness.keep(running.liveness_stop), name="liveness")
            )
        if running.replicas is not None:  # announced once the API answers at the advertised URL
            if not settings.fleet_urls_given:
                _log.warning(
                    "watermark.fleet_urls_unset",
                    fleet=repr(running.replicas.fleet),
                    message="no --fleet-urls: a member record under {ns}/replicas/members/ "
                    "with this replica's port on any host, or its host on any port, gets "
                    "redirects with writers' tokens; set --fleet-urls to the addresses "
                    "replicas advertise",
                )
            tasks.append(
                asyncio.create_task(running.replicas.run(running.replicas_stop), name="replicas")
            )
        if settings.tick_interval_s > 0:
            ticker = EpochTicker(
                running.store,
                running.kv,
                settings.tick_interval_s,
                settings.owner_id,
                settings.ticker_lease_ttl_s,
                hook=(publisher.metrics.hook, EVENT_LOG),
            )
            tasks.append(asyncio.create_task(ticker.run(running.ticker_stop), name="ticker"))
        return tasks

    async def _until_stopped(self, running: _Running, signals: StopOnSignals) -> dict[str, Any]:
        """Run until stopped (a signal, or a task that ends), then stop in order."""
        settings, stopping, publisher = self.settings, signals.stop, running.publisher
        tasks = self._start_tasks(running)
        _log.info(
            "watermark.serve_started",
            owner=settings.owner_id,
            port=running.port,
            partitions=list(settings.partitions),
        )
        stop_wait = asyncio.create_task(stopping.wait())
        done, _ = await asyncio.wait([stop_wait, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop_wait
        stopping.set()
        _log.info("watermark.serve_stopping", owner=settings.owner_id)
        if running.replicas is not None:  # hand the partitions over while the API answers
            running.ticker_stop.set()  # and let another replica tick meanwhile
            running.replicas_stop.set()
            await asyncio.wait([t for t in tasks if t.get_name() == "replicas"])
        publisher.abort_waiters()
        await publisher.drain()
        await self.front.close()
        running.publisher_stop.set()
        running.ticker_stop.set()
        running.liveness_stop.set()
        # The publisher's run ends with the final publish; the ticker's with resigning.
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        if running.liveness is not None:  # after the final publish: a successor may adopt
            await running.liveness.release()
        for task, outcome in zip(tasks, outcomes, strict=True):
            if isinstance(outcome, BaseException) or task in done:
                _log.error("watermark.task_failed", task=task.get_name(), error=repr(outcome))
                raise L0gcError(f"the {task.get_name()} task failed ({outcome!r}); see the logs")
        if signal.SIGINT in signals.received[:1]:
            raise KeyboardInterrupt  # Ctrl-C: the same clean stop, then exit 130
        return {"stopped": True, "owner": settings.owner_id, "partitions": publisher.partitions}

    async def _take_partitions(
        self,
        store: WatermarkStore,
        publisher: Publisher,
        liveness: Liveness,
        owners: dict[str, str | None],
    ) -> None:
        """Without replicas: hold this owner id's liveness key, wait (bounded) for the
        live owners of our partitions to go (unless `take_over`), register, adopt."""
        settings = self.settings
        wait_s = 2.0 * settings.member_lease_ttl_s + 1.0
        await liveness.hold(wait_s)
        if settings.take_over:
            alive = await liveness.alive([o for o in owners.values() if o is not None])
            held = take_over_plan(owners, settings.owner_id, alive.__contains__)
            if held:
                _log.warning("watermark.take_over", partitions=sorted(held), owners=sorted(alive))
        else:
            await liveness.wait_for_owners(owners, wait_s)
        for name in owners:
            if settings.register:
                await store.register_partition(name)
            await publisher.adopt(name)


async def current_owners(
    store: WatermarkStore,
    partitions: Sequence[str],
    *,
    register: bool,
    owner_id: str | None = None,
) -> dict[str, str | None]:
    """Each partition's owner as stored (read only); PartitionNotRegistered for one that
    is not registered unless `register`, InvalidRecord for one that does not parse.

    With `owner_id`, also every registered partition whose record names this owner id
    but is not in `partitions`: one a writer registered over HTTP, which this publisher
    hosted before it restarted (issue 55: it was hosted by nobody after a restart, its
    unmoving M(p) holding GC back, until an admin adopted it). The caller waits for the
    previous incarnation's liveness key to go before adopting, as for the rest.
    """
    records = await store.list_partitions() if partitions or owner_id else {}
    owners: dict[str, str | None] = {}
    for name in partitions:
        found = records.get(name)
        if isinstance(found, L0gcError):
            raise found
        if found is None and not register:
            raise PartitionNotRegistered(name)
        owners[name] = None if found is None else found.owner
    for name, found in sorted(records.items()):
        if (
            owner_id is not None
            and name not in owners
            and not isinstance(found, L0gcError)
            and found is not None
            and found.owner == owner_id
        ):
            owners[name] = owner_id
            _log.info("watermark.rehosting_registered", partition=name, owner=owner_id)
    return owners
