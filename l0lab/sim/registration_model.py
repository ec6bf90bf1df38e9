"""Register racing deregister, one etcd call at a time (`--model registration`).

A real `Publisher` (embedded, non-replicated: it adopts what it registers), the register
route's own work (`watermark.api.http_registry.register_and_host`) and the operator's
deregister (`watermark.api.owners.deregister`, or a variant's), on the real
`WatermarkStore` over `MemoryKV`. The two requests run as tasks whose every etcd call
waits for its own move, so the search takes every interleaving of their reads and
compare-and-swaps with each other and with a writer's fence and commit and the
publisher's round (issue 51 finding 3: in 7 of 40 tries a fence and a commit were
acknowledged for a partition whose record had just been deleted).

====================  ===============================================================
``register``          a register request for partition ``p`` arrives (at most twice)
``deregister``        an operator's deregister of ``p`` arrives (at most once)
``step R``            request R's next etcd call (R: ``register`` or ``deregister``)
``fence``             the writer asks the publisher for a fence on ``p`` (until it has
                      committed `MAX_COMMITS` entries)
``commit``            the writer commits its fence
``round``             the publisher's round (`Publisher.run_once`: a deleted record
                      drops the partition)
====================  ===============================================================

ACKED_AFTER_DEREGISTER: a fence granted, or a commit acknowledged, while ``p`` has no
record in etcd after it had one (deregister's promise: refused under a live owner, and
the owner acknowledges nothing after the record goes).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from l0gc.contract.record import PartitionRecord
from l0gc.errors import L0gcError
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.sim.checks import Violation, ViolationKind
from l0lab.sim.runner import quiet_logs
from l0lab.sim.smallmodel import ModelRun
from l0lab.sim.variants import Variant
from watermark.api.http_registry import Registry, register_and_host
from watermark.service.guard import FenceToken
from watermark.service.metrics import WatermarkMetrics
from watermark.service.publisher import Publisher

__all__ = ["RegistrationModel"]

NAMESPACE = "/l0gc/model-registration"
PARTITION = "p"
MAX_REGISTERS = 2
MAX_COMMITS = 2
_SETTLE = 10_000


@dataclass(frozen=True, slots=True)
class RegistrationModel:
    """The model (see the module docstring)."""

    depth: int = 24
    name: str = "registration"

    def run(self, variant: Variant, moves: Sequence[str]) -> ModelRun:
        """Run the real code along `moves`."""
        world = _World(variant)
        run = ModelRun(tuple(moves), world.violations, world.trace)
        with quiet_logs():
            asyncio.run(world.play(moves, run))
        return run


@functools.cache
def _metrics() -> WatermarkMetrics:
    """One registry for every run (nothing reads it; building one costs ~2 ms)."""
    return WatermarkMetrics()


class _GatedKV:
    """`MemoryKV` whose calls from a request task wait for that request's `step` move."""

    def __init__(self, kv: MemoryKV) -> None:
        self._kv = kv
        self.gates: dict[str, asyncio.Semaphore] = {}
        self.waiting: dict[str, str] = {}
        """request -> the etcd call it waits to send."""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._kv, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def gated(*args: Any, **kwargs: Any) -> Any:
            task = asyncio.current_task()
            actor = None if task is None else task.get_name()
            gate = self.gates.get(actor or "")
            if actor is not None and gate is not None:
                self.waiting[actor] = name
                await gate.acquire()
                del self.waiting[actor]
            return await attr(*args, **kwargs)

        return gated


class _World:
    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        self.raw = MemoryKV()
        self.kv = _GatedKV(self.raw)
        store = WatermarkStore(self.kv, NAMESPACE, wall_clock=time.time)
        self.publisher = Publisher(
            store, "pub", hook=None, clock=time.monotonic, metrics=_metrics()
        )
        self.store = store
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.started = {"register": 0, "deregister": 0}
        self.sent = {"register": 0, "deregister": 0}
        """etcd calls each kind of request has sent (where a waiting request is)."""
        self.outcomes: list[str] = []
        self.token: FenceToken | None = None
        self.offset = 0
        self.ever_registered = False
        self.violations: list[Violation] = []
        self.trace: list[str] = []
        self.step = 0

    async def play(self, moves: Sequence[str], run: ModelRun) -> None:
        await self.store.init_cluster_epoch(1)
        await self.publisher.read_cluster_epoch()
        try:
            for move in moves:
                self.step += 1
                self.trace.append(f"> {move}")
                kind, *args = move.split()
                await getattr(self, "_" + kind)(*args)
                await self.settle()
                await self.observe()
                if self.violations:
                    return
            run.state = await self.snapshot()
            run.enabled = list(self.enabled())
        finally:
            for task in self.tasks.values():
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    def enabled(self) -> Iterator[str]:
        for request, limit in (("register", MAX_REGISTERS), ("deregister", 1)):
            if request not in self.tasks and self.started[request] < limit:
                yield request
        yield from (f"step {request}" for request in sorted(self.kv.waiting))
        if self.token is not None:
            yield "commit"
        elif self.offset < MAX_COMMITS:
            yield "fence"
        yield "round"

    async def settle(self) -> None:
        """Yield until every task is blocked (on a gate, or done)."""
        ready = asyncio.get_running_loop()._ready  # type: ignore[attr-defined]
        for _ in range(_SETTLE):
            await asyncio.sleep(0)
            if not ready:
                break
        else:
            raise RuntimeError(f"tasks kept running for {_SETTLE} yields")
        for request, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[request]
                self.kv.gates.pop(request, None)
                error = task.exception()
                outcome = "ok" if error is None else type(error).__name__
                if error is not None and not isinstance(error, L0gcError):
                    self.violations.append(
                        Violation(ViolationKind.CRASH, self.step, f"{request}: {error!r}")
                    )
                self.outcomes.append(f"{request} {outcome}")
                self.trace.append(f"{request} answered: {outcome}")

    async def observe(self) -> None:
        if await self.raw.get(self.store.partition_key(PARTITION)) is not None:
            self.ever_registered = True

    async def acked(self, what: str) -> None:
        """The publisher acknowledged `what`: a violation if ``p`` has no record."""
        self.trace.append(f"publisher acknowledged the {what}")
        gone = await self.raw.get(self.store.partition_key(PARTITION)) is None
        if gone and self.ever_registered:
            self.violations.append(
                Violation(
                    ViolationKind.ACKED_AFTER_DEREGISTER,
                    self.step,
                    f"the {what} on {PARTITION} was acknowledged after its record was deleted",
                )
            )

    # -- the moves --------------------------------------------------------------------

    def spawn(self, request: str, work: Callable[[], Any]) -> None:
        self.started[request] += 1
        self.kv.gates[request] = asyncio.Semaphore(0)
        self.tasks[request] = asyncio.get_running_loop().create_task(work(), name=request)

    async def _register(self) -> None:
        registry = Registry(self.publisher, replicated=False)
        self.spawn("register", lambda: register_and_host(registry, PARTITION))

    async def _deregister(self) -> None:
        self.spawn("deregister", lambda: self.variant.deregister(self.store, [PARTITION]))

    async def _step(self, request: str) -> None:
        self.trace.append(f"{request} sends {self.kv.waiting[request]}")
        self.sent[request] += 1
        self.kv.gates[request].release()

    async def _fence(self) -> None:
        try:
            self.token = self.publisher.try_acquire(PARTITION, 1)
        except L0gcError as exc:
            self.trace.append(f"fence refused: {type(exc).__name__}")
            return
        if self.token is not None:
            await self.observe()
            await self.acked("fence")

    async def _commit(self) -> None:
        assert self.token is not None
        token, self.token = self.token, None
        try:
            self.publisher.commit(token, self.offset)
        except L0gcError as exc:
            self.trace.append(f"commit refused: {type(exc).__name__}")
            return
        self.offset += 1
        await self.acked("commit")

    async def _round(self) -> None:
        await self.publisher.run_once()
        self.trace.append(f"publisher hosts {self.publisher.partitions}")

    async def snapshot(self) -> bytes:
        item = await self.raw.get(self.store.partition_key(PARTITION))
        record = None
        if item is not None:
            decoded = PartitionRecord.decode(item.value, partition=PARTITION)
            record = (decoded.owner, decoded.owner_epoch, item.mod_revision)
        state = (
            record,
            self.publisher.partitions,
            sorted(self.kv.waiting.items()),
            sorted(self.tasks),
            self.started,
            self.sent,
            self.outcomes,
            self.token is not None,
            self.offset,
            self.ever_registered,
        )
        return hashlib.sha256(repr(state).encode()).digest()
