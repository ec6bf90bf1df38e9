"""A chaos writer process: partition leaders that write L0 objects, and their logs.

    python -m l0lab.chaos.writer SPEC.json

Two kinds, one loop. An *http* writer leads partitions hosted by `watermark serve`
processes and fences and commits over their HTTP API with a writer token; an
*embedded* writer hosts a real `Publisher` for its own partitions in this process (the
Python API, as an application embedding l0gc would), serves the publisher's HTTP API
for the reconcilers, and adopts its partitions with its logs' ends when it starts.

Per partition, `slots` writes run concurrently at about `rate` objects per second:
read the cached cluster epoch, stamp it, record the upload, PUT the object (through the
fault proxy), fence the epoch; a share of writes then holds the fence for 1-2.5 s (a
slow log append); append the entry to the partition log and commit it
(`l0lab.chaos.backends`). Appends and commits of one partition are serialised, as a log's
are. A write whose PUT fails or whose fence is refused leaves an orphan.

A small control API (loopback, `control_port`) lets the harness pause partitions (new
writes stop and every write in flight is resolved; the answer carries the log ends,
which are then final), resume them with a new route, stop writing, and read counters.
SIGTERM stops writing the same way and exits 0; a restarted writer first resolves the
entries its predecessor left unresolved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from gcd.rules.layout import KeyLayout
from gcd.storage.s3.settings import S3Settings
from l0gc.auth import TokenFile
from l0gc.errors import L0gcError, StorageError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0gc.logs import configure_logging
from l0gc.process.signals import StopOnSignals
from l0lab.chaos.backends import EmbeddedBackend, HttpBackend
from l0lab.chaos.records import History, PartitionLog, log_path
from l0lab.demo.s3io import DemoBucket
from watermark.api.http_api import create_app
from watermark.api.http_server import ApiServer
from watermark.service.clock import EpochClock, stamp_epoch
from watermark.service.publisher import Publisher

__all__ = ["PartitionWriter", "WriterSpec", "main"]

_log = structlog.get_logger("gcd.chaos.writer")
_PAUSE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class WriterSpec:
    """Everything a writer process needs (written as JSON by the harness)."""

    name: str
    mode: str
    run_dir: str
    etcd: list[str]
    namespace: str
    endpoint_url: str
    bucket: str
    root: str
    routes: dict[str, str]
    """partition -> publisher base URL (http); partition -> "" (embedded)."""
    token: str = ""
    token_file: str = ""
    control_port: int = 0
    api_port: int = 0
    owner_id: str = ""
    rate: float = 2.0
    slots: int = 3
    slow_share: float = 0.08
    prefixes: list[int] = field(default_factory=lambda: list(range(0, 1000, 37)))
    seed: int = 0
    hold_ttl_s: float = 5.0
    replicas: list[str] = field(default_factory=list)
    """Every publisher replica's base URL (replicated publishers; `routes` are hints)."""

    def dump(self, path: Path) -> None:
        """Write the spec as JSON."""
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> WriterSpec:
        """Read a spec written by `dump`."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))


class PartitionWriter:
    """One partition's leader (see the module docstring)."""

    def __init__(
        self,
        partition: str,
        log: PartitionLog,
        backend: Any,
        *,
        clock: EpochClock,
        bucket: DemoBucket,
        history: History,
        layout: KeyLayout,
        created_epoch: int,
        spec: WriterSpec,
        rng: random.Random,
    ) -> None:
        self.partition = partition
        self.log = log
        self.backend = backend
        self.clock = clock
        self.bucket = bucket
        self.history = history
        self.layout = layout
        self.created_epoch = created_epoch
        self.spec = spec
        self.rng = rng
        self.lock = asyncio.Lock()
        self.inflight = 0
        self.paused = False
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.idle = asyncio.Event()
        self.idle.set()
        self.counts = {"written": 0, "committed": 0, "orphans": 0, "aborted": 0}

    async def run(self, stop: asyncio.Event) -> None:
        """Run `slots` concurrent writes until `stop`."""
        await asyncio.gather(*(self._slot(stop) for _ in range(self.spec.slots)))

    async def _slot(self, stop: asyncio.Event) -> None:
        rate = self.spec.rate / self.spec.slots
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.expovariate(rate))
            if stop.is_set():
                return
            if self.paused:
                await _either(self.resumed, stop)
            if not stop.is_set() and not self.paused:
                await self._write_one()

    def _enter(self) -> None:
        self.inflight += 1
        self.idle.clear()

    def _leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.idle.set()

    async def _write_one(self) -> None:
        self._enter()
        try:
            await self._write()
        except (L0gcError, OSError, aiohttp.ClientError) as exc:
            _log.warning("chaos.write_failed", partition=self.partition, error=repr(exc))
        finally:
            self._leave()

    async def _write(self) -> None:
        try:
            cached = await self.clock.current()
        except L0gcError:
            await asyncio.sleep(0.5)  # no epoch yet (etcd down): try again later
            return
        epoch = stamp_epoch(cached, (self.created_epoch,))
        prefix = self.rng.choice(self.spec.prefixes)
        key = self.layout.format(prefix, epoch, uuid.UUID(int=self.rng.getrandbits(128)).hex)
        self.history.write("upload", key=key, partition=self.partition, epoch=epoch)
        self.counts["written"] += 1
        try:
            await self.bucket.put(key)
        except StorageError as exc:
            self.history.write("put_failed", key=key, code=exc.code)
            self.counts["orphans"] += 1
            return
        self.history.write("stored", key=key)
        token, why = await self.backend.fence(self.partition, epoch)
        if token is None:
            self.history.write("refused", key=key, why=why)
            self.counts["orphans"] += 1
            with contextlib.suppress(L0gcError):
                await self.clock.refresh()
            if why.startswith("unreachable"):
                await asyncio.sleep(0.5)  # the publisher is down: do not spin
            return
        if self.rng.random() < self.spec.slow_share:
            await asyncio.sleep(self.rng.uniform(1.0, 2.5))  # a slow log append
        async with self.lock:
            entry = self.log.append(key, epoch, token)
            outcome, why = await self.backend.commit(self.partition, token, entry.offset)
            self._resolve(entry.offset, outcome, why)

    def _resolve(self, offset: int, outcome: str, why: str) -> None:
        if outcome == "abort":
            self.log.abort(offset, why)
            self.counts["aborted"] += 1
            if why == "fencing_violation":
                self.history.write(
                    "fencing_violation",
                    partition=self.partition,
                    offset=offset,
                    epoch=self.log.entries[offset].epoch,
                )
        else:
            self.log.commit(offset, outcome)
            self.counts["committed"] += 1

    async def recover(self, *, embedded: bool) -> None:
        """Resolve the entries a killed predecessor left unresolved."""
        for entry in self.log.unresolved():
            if embedded or entry.token is None:
                # The publisher died with this process: its successor (us) is told the
                # log end, so the entry stays.
                self._resolve(entry.offset, "kept", "")
                continue
            outcome, why = await self.backend.commit(
                self.partition, entry.token, entry.offset, resumed=True
            )
            self._resolve(entry.offset, outcome, why)

    async def pause(self) -> int:
        """Stop new writes and wait for those in flight; return the log end (then final)."""
        self.paused = True
        self.resumed.clear()
        await asyncio.wait_for(self.idle.wait(), _PAUSE_TIMEOUT_S)
        return self.log.log_end

    def resume(self) -> None:
        """Write again."""
        self.paused = False
        self.resumed.set()


def control_app(
    writers: dict[str, PartitionWriter], routes: dict[str, str], stop_writing: asyncio.Event
) -> web.Application:
    """The harness's control API of this process (see the module docstring)."""

    async def pause(request: web.Request) -> web.Response:
        names = (await request.json())["partitions"]
        ends = {name: await writers[name].pause() for name in names}
        return web.json_response({"log_ends": ends})

    async def resume(request: web.Request) -> web.Response:
        doc = await request.json()
        routes.update(doc.get("routes", {}))
        for name in doc["partitions"]:
            writers[name].resume()
        return web.json_response({"resumed": doc["partitions"]})

    async def stop(_request: web.Request) -> web.Response:
        stop_writing.set()
        for writer in writers.values():
            writer.resume()  # wake slots waiting on a pause, so they see the stop
        ends = {name: await writer.pause() for name, writer in writers.items()}
        return web.json_response({"log_ends": ends})

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                name: {
                    **w.counts,
                    "log_end": w.log.log_end,
                    "inflight": w.inflight,
                    "paused": w.paused,
                }
                for name, w in writers.items()
            }
        )

    app = web.Application()
    app.router.add_post("/pause", pause)
    app.router.add_post("/resume", resume)
    app.router.add_post("/stop", stop)
    app.router.add_get("/status", status)
    return app


async def _serve_app(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def run(spec: WriterSpec) -> int:
    """Run the writer until SIGTERM (or SIGINT); 0 after a clean stop."""
    stop = asyncio.Event()
    with StopOnSignals(stop).installed():
        return await _run(spec, stop)


async def _run(spec: WriterSpec, stop: asyncio.Event) -> int:
    run_dir = Path(spec.run_dir)
    kv = await open_kv(
        EtcdSettings(endpoints=tuple(spec.etcd), namespace=spec.namespace, timeout_s=2.0),
        connect=False,
    )
    store = WatermarkStore(kv, spec.namespace)
    history = History(run_dir / "history" / f"writer-{spec.name}.jsonl")
    routes = dict(spec.routes)
    stop_writing = asyncio.Event()
    runners: list[web.AppRunner] = []
    publisher: Publisher | None = None
    publisher_stop = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    settings = S3Settings(bucket=spec.bucket, endpoint_url=spec.endpoint_url, region="us-east-1")
    try:
        async with DemoBucket.open(settings) as bucket, aiohttp.ClientSession() as session:
            embedded = spec.mode == "embedded"
            logs = {name: PartitionLog.open(log_path(run_dir, name)) for name in routes}
            if embedded:
                publisher = Publisher(
                    store, spec.owner_id, publish_interval_s=0.5, hold_ttl_s=spec.hold_ttl_s
                )
                backend: Any = EmbeddedBackend(publisher)
            else:
                backend = HttpBackend(
                    session, lambda p: routes[p], spec.token, replicas=spec.replicas
                )
            created: dict[str, int] = {}
            for name in routes:
                created[name] = (await _retry(store.register_partition, name)).created_epoch
            clock = EpochClock(store, refresh_interval_s=0.5)
            rng = random.Random(spec.seed)
            writers = {
                name: PartitionWriter(
                    name,
                    logs[name],
                    backend,
                    clock=clock,
                    bucket=bucket,
                    history=history,
                    layout=KeyLayout.default(spec.root),
                    created_epoch=created[name],
                    spec=spec,
                    rng=random.Random(rng.getrandbits(64)),
                )
                for name in routes
            }
            for writer in writers.values():
                await writer.recover(embedded=embedded)
            if publisher is not None:
                for name, writer in writers.items():
                    await _retry(publisher.adopt, name, log_end_offset=writer.log.log_end)
                tokens = TokenFile(spec.token_file)
                api = ApiServer(
                    create_app(publisher, tokens=lambda: tokens.tokens), metrics=publisher.metrics
                )
                await api.start("127.0.0.1", spec.api_port)
                tasks.append(asyncio.create_task(publisher.run(publisher_stop)))
            runners.append(
                await _serve_app(control_app(writers, routes, stop_writing), spec.control_port)
            )
            both = asyncio.Event()

            async def stop_all() -> None:
                await _either(stop, stop_writing)
                both.set()

            watcher = asyncio.create_task(stop_all())
            await asyncio.gather(*(w.run(both) for w in writers.values()))
            await stop.wait()  # after /stop the publisher (embedded) keeps publishing
            watcher.cancel()
            if publisher is not None:
                await api.stop()
                publisher_stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
            for log in logs.values():
                log.close()
    finally:
        for runner in runners:
            await runner.cleanup()
        history.close()
        await kv.close()
    return 0


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    """Wait until one of two events is set."""
    waits = [asyncio.create_task(first.wait()), asyncio.create_task(second.wait())]
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


async def _retry(call: Any, *args: Any, attempts: int = 60, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)` until it succeeds (etcd may be down when a writer restarts)."""
    for attempt in range(attempts):
        try:
            return await call(*args, **kwargs)
        except L0gcError as exc:
            if attempt == attempts - 1:
                raise
            _log.warning("chaos.writer_retry", error=str(exc))
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python -m l0lab.chaos.writer SPEC.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    configure_logging("warning")
    spec = WriterSpec.load(Path(args[0]))
    started = time.monotonic()
    code = asyncio.run(run(spec))
    _log.info("chaos.writer_stopped", name=spec.name, seconds=round(time.monotonic() - started))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
