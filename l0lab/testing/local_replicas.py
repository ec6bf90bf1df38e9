"""`watermark serve --replicated` replicas as local processes, and writers that find owners.

For the integration tests (`tests/watermark/service/test_replicas_e2e.py`) and the failover
benchmark (`bench/failover.py`), on loopback against a real etcd:

- `LocalReplicas`: N `watermark serve --replicated` processes sharing one partition
  list, with bearer tokens, each started, killed (SIGKILL) or stopped (SIGTERM) by its
  PID (`l0lab.testing.procs.Child`).
- `OwnerClient`: the owner-lookup retry loop of docs/integration.md, as a writer in any
  language would write it: send to the cached owner of the partition, or to any replica;
  on 307 cache the ``Location``'s replica and resend there, only if it is one of the
  configured replicas (`urls`), else count it and ask another; on 503 or a connection
  error forget the cached owner, wait a moment and resend to another replica. Every
  answer says how many attempts it took.
- `ReplicaWriter`: a partition's leader writing through the client: stamp, upload
  (optional), fence, append to its in-memory log, commit at the replica that granted the
  fence; it records every entry, every request's attempts, and the longest time between
  two successful commits. `LagReconciler`: lifts entries older than a lag.
- `WatermarkMonitor`: reads every M(p) from etcd and records any that went backwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import sys
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from gcd.rules.layout import KeyLayout
from l0gc.contract.members import weight
from l0gc.errors import L0gcError
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import free_port
from l0lab.testing.procs import Child, ServeProc, wait_http
from watermark.service.clock import EpochClock, stamp_epoch

__all__ = [
    "Answer",
    "LagReconciler",
    "LocalReplicas",
    "LogEntry",
    "OwnerClient",
    "ReplicaProc",
    "ReplicaWriter",
    "WatermarkMonitor",
]

_READY_S = 60.0
_RETRYABLE = frozenset({503})


ReplicaProc = ServeProc
"""One `watermark serve --replicated` process (restartable: a new owner id each time)."""


class LocalReplicas:
    """Replicas of one partition list on loopback; see the module docstring."""

    def __init__(
        self,
        etcd_endpoints: Sequence[str],
        namespace: str,
        partitions: Sequence[str],
        run_dir: Path,
        *,
        lease_ttl_s: int = 2,
        interval_s: float = 0.2,
        tick_interval_s: float = 0.5,
        publish_interval_s: float = 0.2,
        drain_timeout_s: float = 2.0,
        fleet_urls: str | None = None,
    ) -> None:
        self.etcd = ",".join(etcd_endpoints)
        self.fleet_urls = fleet_urls
        self.namespace = namespace
        self.partitions = list(partitions)
        self.run_dir = run_dir
        self.lease_ttl_s = lease_ttl_s
        self.interval_s = interval_s
        self.tick_interval_s = tick_interval_s
        self.publish_interval_s = publish_interval_s
        self.drain_timeout_s = drain_timeout_s
        self.tokens = {role: secrets.token_hex(16) for role in ("writer", "reconciler", "admin")}
        self.token_file = run_dir / "tokens"
        self.procs: dict[str, ReplicaProc] = {}
        run_dir.mkdir(parents=True, exist_ok=True)
        self.token_file.write_text("".join(f"{r}:{t}\n" for r, t in self.tokens.items()))
        self.token_file.chmod(0o600)

    def argv(self, proc: ReplicaProc) -> list[str]:
        """The command line of `proc`'s next incarnation."""
        return [
            sys.executable,
            "-m",
            "watermark",
            "serve",
            "--replicated",
            "--etcd",
            self.etcd,
            "--namespace",
            self.namespace,
            "--partitions",
            ",".join(self.partitions),
            "--register",
            "--http-host",
            proc.host,
            "--http-port",
            str(proc.port),
            "--auth-token-file",
            str(self.token_file),
            "--owner-id",
            proc.owner_id,
            "--member-lease-ttl",
            str(self.lease_ttl_s),
            "--membership-interval",
            str(self.interval_s),
            "--tick-interval",
            str(self.tick_interval_s),
            "--ticker-lease-ttl",
            "2",
            "--publish-interval",
            str(self.publish_interval_s),
            "--drain-timeout",
            str(self.drain_timeout_s),
            "--etcd-timeout",
            "2",
            "--log-level",
            "info",
            *(["--fleet-urls", self.fleet_urls] if self.fleet_urls else []),
        ]

    def start(self, name: str, *, host: str = "127.0.0.1", port: int | None = None) -> ReplicaProc:
        """Start replica `name` (a new incarnation) and wait until it is ready (blocking).
        A new replica listens on `host` (a loopback address; 127.0.0.2, ... stand in for
        pods) and `port` (default: a free one)."""
        proc = self.procs.get(name)
        if proc is None:
            log = self.run_dir / f"{name}.log"
            child = Child(name, [], log)
            proc = self.procs[name] = ReplicaProc(name, port or free_port(), child, host=host)
        proc.incarnation += 1
        proc.child.argv = self.argv(proc)
        proc.child.start()
        if not wait_http(f"{proc.url}/readyz", _READY_S, child=proc.child):
            raise RuntimeError(f"replica {name} did not become ready: {proc.child.tail()}")
        return proc

    def kill(self, name: str) -> None:
        """kill -9 replica `name` (by its PID)."""
        self.procs[name].child.kill()

    def terminate(self, name: str, timeout_s: float = 30.0) -> int | None:
        """SIGTERM replica `name` and wait for it to exit; its exit code."""
        return self.procs[name].child.stop(timeout_s)

    def live(self) -> list[ReplicaProc]:
        """The replicas whose process runs."""
        return [p for p in list(self.procs.values()) if p.child.alive]  # a snapshot: threads add

    def urls(self) -> list[str]:
        """The API of every running replica (what a Service in front of them would route to)."""
        return [p.url for p in self.live()]

    def logs(self) -> str:
        """Every replica's log, concatenated (for failure messages and checks)."""
        return "\n".join(p.child.log_path.read_text(errors="replace") for p in self.procs.values())

    def stop_all(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every replica at once (SIGKILL after `timeout_s`)."""
        children = [proc.child for proc in self.procs.values()]
        with ThreadPoolExecutor(max_workers=max(1, len(children))) as pool:
            list(pool.map(lambda child: child.stop(timeout_s), children))

    def assigned(self) -> dict[str, str]:
        """partition -> the live replica that rendezvous hashing gives it (each incarnation
        has a new owner id, so a restarted replica's share may differ, and may be empty)."""
        live = self.live()
        return {
            p: max(live, key=lambda proc: (weight(proc.owner_id, p), proc.owner_id)).name
            for p in self.partitions
        }

    async def hosted(self, session: aiohttp.ClientSession, token: str) -> dict[str, list[str]]:
        """partition -> the live replicas that host it (GET /v1/partitions on each)."""
        found: dict[str, list[str]] = {p: [] for p in self.partitions}
        headers = {"Authorization": f"Bearer {token}"}
        for proc in self.live():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                timeout = aiohttp.ClientTimeout(total=2)
                async with session.get(
                    f"{proc.url}/v1/partitions", headers=headers, timeout=timeout
                ) as response:
                    if response.status == 200:
                        for state in (await response.json())["partitions"]:
                            found.setdefault(state["partition"], []).append(proc.name)
        return found


@dataclass(slots=True)
class Answer:
    """A request's final answer and how many attempts it took."""

    status: int
    doc: Any
    attempts: int
    base: str
    waited_s: float
    trail: tuple[str, ...] = ()
    """What each attempt met, e.g. ``127.0.0.1:4100 307`` (for failure messages)."""


class OwnerClient:
    """The owner-lookup retry loop (see the module docstring)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        urls: Callable[[], list[str]],
        token: str,
        *,
        rng: random.Random,
        max_attempts: int = 200,
        backoff_s: float = 0.1,
    ) -> None:
        self._session = session
        self._urls = urls
        self._token = token
        self._rng = rng
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self.owners: dict[str, str] = {}
        """partition -> the replica URL last seen owning it."""
        self.refused_redirects: list[str] = []
        """Locations of 307 answers not followed: outside `urls()`, the configured set."""

    async def _send(self, url: str, body: Any) -> tuple[int, Any, str | None]:
        headers = {"Authorization": f"Bearer {self._token}"}
        timeout = aiohttp.ClientTimeout(total=15)
        async with self._session.post(
            url, json=body, headers=headers, allow_redirects=False, timeout=timeout
        ) as response:
            doc = await response.json(content_type=None)
            return response.status, doc, response.headers.get("Location")

    async def call(self, partition: str, suffix: str, body: Any) -> Answer:
        """POST /v1/partitions/{partition}{suffix} at the partition's owner."""
        path = f"/v1/partitions/{urllib.parse.quote(partition, safe='')}{suffix}"
        started = time.monotonic()
        trail: list[str] = []
        for attempt in range(1, self._max_attempts + 1):
            urls = self._urls()
            cached = self.owners.get(partition)
            base = cached or (self._rng.choice(urls) if urls else "")
            where = f"{base.rpartition('/')[2]}{'' if cached else ' (any)'}"
            try:
                if not base:
                    raise aiohttp.ClientConnectionError("no replica running")
                status, doc, location = await self._send(base + path, body)
            except (aiohttp.ClientError, TimeoutError) as exc:
                trail.append(f"{where} {type(exc).__name__}")
                self.owners.pop(partition, None)
                await asyncio.sleep(self._backoff_s)
                continue
            reason = doc.get("reason", doc.get("error", "")) if isinstance(doc, dict) else ""
            trail.append(f"{where} {status} {reason}".rstrip())
            if status == 307 and location:
                parsed = urllib.parse.urlsplit(location)
                target = f"{parsed.scheme}://{parsed.netloc}"
                if target not in urls:  # never send the token outside the configured set
                    trail[-1] += f" to {target}: outside the configured replicas, not followed"
                    self.refused_redirects.append(location)
                    self.owners.pop(partition, None)
                    await asyncio.sleep(self._backoff_s)
                    continue
                self.owners[partition] = target
                continue
            if status in _RETRYABLE:
                self.owners.pop(partition, None)
                await asyncio.sleep(self._backoff_s)
                continue
            self.owners[partition] = base
            return Answer(status, doc, attempt, base, time.monotonic() - started, tuple(trail))
        return Answer(
            0,
            {"error": "gave_up"},
            self._max_attempts,
            "",
            time.monotonic() - started,
            tuple(trail),
        )

    async def at(self, base: str, path: str, body: Any) -> Answer:
        """POST `path` at replica `base` only (a fence token lives where it was granted)."""
        started = time.monotonic()
        try:
            status, doc, _ = await self._send(base + path, body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Answer(0, {"error": repr(exc)}, 1, base, time.monotonic() - started)
        return Answer(status, doc, 1, base, time.monotonic() - started)


@dataclass(slots=True)
class LogEntry:
    """One entry of a partition log: its object and whether its commit was acknowledged
    (True), refused (False) or its answer lost (None)."""

    offset: int
    epoch: int
    key: str
    appended_at: float
    committed: bool | None = None


@dataclass(slots=True)
class ReplicaWriter:
    """A partition's leader writing through an `OwnerClient`; see the module docstring."""

    partition: str
    client: OwnerClient
    clock: EpochClock
    created_epoch: int
    upload: Callable[[str], Awaitable[None]] | None = None
    rng: random.Random = field(default_factory=random.Random)
    entries: list[LogEntry] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    """Attempts of every fence request (1: no retry)."""
    retried: list[tuple[str, ...]] = field(default_factory=list)
    """The trail of every fence request that needed more than one retry."""
    errors: list[str] = field(default_factory=list)
    longest_gap_s: float = 0.0
    """Longest time between two acknowledged commits."""
    commit_times: list[float] = field(default_factory=list)
    """When each acknowledged commit was answered (monotonic)."""
    _last_commit: float | None = None

    async def write_one(self) -> None:
        """One write: stamp, upload, fence, append, commit."""
        epoch = stamp_epoch(await self.clock.current(), [self.created_epoch])
        key = KeyLayout.default().format(self.rng.randrange(1000), epoch, uuid.uuid4().hex)
        if self.upload is not None:
            await self.upload(key)
        fence = await self.client.call(self.partition, "/fence", {"epoch": epoch})
        self.attempts.append(fence.attempts)
        if fence.attempts > 2:
            self.retried.append(fence.trail)
        if fence.status == 409 and fence.doc.get("error") in ("stale_epoch", "epoch_ahead"):
            await self.clock.refresh()  # the upload is garbage
            return
        if fence.status != 200:
            self.errors.append(f"fence: {fence.status} {fence.doc}")
            return
        entry = LogEntry(len(self.entries), epoch, key, time.monotonic())
        self.entries.append(entry)  # the log append
        token = urllib.parse.quote(fence.doc["token"], safe="")
        commit = await self.client.at(
            fence.base, f"/v1/fences/{token}/commit", {"offset": entry.offset}
        )
        if commit.status == 200:
            entry.committed = True
            now = time.monotonic()
            self.commit_times.append(now)
            if self._last_commit is not None:
                self.longest_gap_s = max(self.longest_gap_s, now - self._last_commit)
            self._last_commit = now
        elif commit.status == 0:
            self.errors.append(f"commit answer lost at offset {entry.offset}")
        else:
            entry.committed = False
            self.errors.append(f"commit: {commit.status} {commit.doc}")

    def stall_around(self, moment: float) -> float:
        """The gap between the last acknowledged commit before `moment` and the first
        after it (to now, if none yet)."""
        times = self.commit_times
        before = max((t for t in times if t <= moment), default=moment)
        after = min((t for t in times if t > moment), default=time.monotonic())
        return after - before

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        """Write every `interval_s` until `stop`."""
        while not stop.is_set():
            try:
                await self.write_one()
            except L0gcError as exc:  # the epoch read failed: etcd is the harness's
                self.errors.append(f"epoch: {exc}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


class LagReconciler:
    """Reports entries older than `lag_s` as lifted; `lifted[p]` is the highest offset it
    ever sent (sent before the answer: a lost answer may still have reached the owner)."""

    def __init__(self, client: OwnerClient, writers: Sequence[ReplicaWriter], lag_s: float):
        self.client = client
        self.writers = list(writers)
        self.lag_s = lag_s
        self.lifted: dict[str, int] = {}

    async def run(self, stop: asyncio.Event, interval_s: float = 0.3) -> None:
        """Lift until `stop`."""
        while not stop.is_set():
            now = time.monotonic()
            for writer in self.writers:
                old = [e.offset for e in writer.entries if now - e.appended_at >= self.lag_s]
                target = max(old, default=-1)
                if target > self.lifted.get(writer.partition, -1):
                    self.lifted[writer.partition] = target
                    await self.client.call(writer.partition, "/reconciled", {"offset": target})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


class WatermarkMonitor:
    """Reads every partition's M(p) from etcd; `regressions` lists any that went down."""

    def __init__(self, store: WatermarkStore) -> None:
        self.store = store
        self.highest: dict[str, int] = {}
        self.regressions: list[str] = []
        self.reads = 0

    async def run(self, stop: asyncio.Event, interval_s: float = 0.1) -> None:
        """Read until `stop`."""
        while not stop.is_set():
            with contextlib.suppress(L0gcError):
                for name, record in (await self.store.list_partitions()).items():
                    if isinstance(record, L0gcError):
                        self.regressions.append(f"{name}: unreadable record {record}")
                        continue
                    before = self.highest.get(name, -1)
                    if record.watermark < before:
                        self.regressions.append(f"{name}: M(p) {before} -> {record.watermark}")
                    self.highest[name] = max(before, record.watermark)
                self.reads += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
