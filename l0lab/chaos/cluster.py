"""The whole system of a chaos run, as real processes on loopback, and what can be done to it.

`Cluster.start` brings up, on free loopback ports and under one run directory:

* a 3-member etcd cluster (`l0lab.testing.local_servers.LocalEtcdCluster`);
* moto's S3 server as a process of its own, behind the fault proxy (`l0lab.testing.faultproxy`,
  on the harness's event loop): every S3 request of the writers and sweepers goes
  through the proxy, whose URL is the one the namespace is bound to;
* the namespace bound to bucket/root at the proxy's URL with `watermark namespace bind`,
  as an operator would, and the cluster epoch initialised;
* two `watermark serve` publishers (``serve-a``, ``serve-b``) owning disjoint partitions,
  each with the epoch ticker (leader-elected) and the HTTP API behind bearer tokens; or,
  with `ChaosConfig.publisher_replicas`, one `serve --replicated` set sharing all those
  partitions through etcd leases (the writers and reconcilers follow 307s to the owner,
  `l0lab.chaos.owners`);
* two writer processes (`l0lab.chaos.writer`): ``http`` leads the publishers' partitions
  over the HTTP API, ``embedded`` hosts a Publisher of its own for two more;
* two `gcd daemon` sweepers, shards 0/2 and 1/2, journaling every deletion.

The partition -> owner table (`routes`) is the harness's, as a cluster controller's
would be (``replicated`` for the partitions a replicated set assigns itself). The
operations the nemesis uses (restart a publisher and adopt its
partitions with the writers' log ends, pause and resume a writer's partitions) live
here; the faults themselves, and finding the etcd or ticker leader, are in
`l0lab.chaos.nemesis`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from gcd.rules.layout import DEFAULT_ROOT
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.kv import KV
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.chaos.config import ChaosConfig
from l0lab.chaos.records import PartitionLog, log_path
from l0lab.chaos.writer import WriterSpec
from l0lab.demo.s3io import DemoBucket
from l0lab.testing.faultproxy import FaultProxy
from l0lab.testing.local_servers import LocalEtcd, LocalEtcdCluster, free_port
from l0lab.testing.procs import Child, ServeProc, child_env, listens, wait_http

__all__ = ["Cluster", "PublisherProc", "SweeperProc", "WriterProc"]

_log = structlog.get_logger("gcd.chaos")
NAMESPACE = "/l0gc/chaos"
BUCKET = "l0gc-chaos"
EMBEDDED = "embedded"
REPLICATED = "replicated"
_READY_S = 60.0


PublisherProc = ServeProc
"""One `watermark serve` of the cluster (first incarnation 1)."""


@dataclass(slots=True)
class SweeperProc:
    """One `gcd daemon`."""

    index: int
    port: int
    child: Child

    @property
    def metrics_url(self) -> str:
        """Its /metrics."""
        return f"http://127.0.0.1:{self.port}/metrics"


@dataclass(slots=True)
class WriterProc:
    """One writer process and its spec."""

    name: str
    spec_path: Path
    control_port: int
    child: Child
    api_port: int = 0

    @property
    def control_url(self) -> str:
        """Its control API."""
        return f"http://127.0.0.1:{self.control_port}"


class Cluster:
    """The processes of one run; see the module docstring."""

    def __init__(self, config: ChaosConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = run_dir
        self.logs = run_dir / "logs"
        self.journal_dir = run_dir / "journal"
        self.tokens = {role: secrets.token_hex(16) for role in ("writer", "reconciler", "admin")}
        self.token_file = run_dir / "tokens"
        self.root = DEFAULT_ROOT
        self.etcd = LocalEtcdCluster(base_dir=run_dir / "etcd")
        self.s3_port = free_port()
        self.s3 = Child.python(
            "s3",
            ["-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)],
            self.logs / "s3.log",
        )
        self.proxy = FaultProxy(f"http://127.0.0.1:{self.s3_port}")
        self.routes: dict[str, str] = {}
        self.publishers: dict[str, PublisherProc] = {}
        for index, name in enumerate(config.publisher_names):
            if index < 2:
                for partition in config.serve_partitions(index):
                    self.routes[partition] = REPLICATED if config.replicated else name
            port = free_port()
            child = Child(name, [], self.logs / f"{name}.log")
            self.publishers[name] = PublisherProc(name, port, child, incarnation=1)
        for partition in config.embedded_names:
            self.routes[partition] = EMBEDDED
        self.sweepers = [
            SweeperProc(i, free_port(), Child(f"sweeper-{i}", [], self.logs / f"sweeper-{i}.log"))
            for i in range(2)
        ]
        self.writers: dict[str, WriterProc] = {}
        self.kv: KV | None = None
        self.store: WatermarkStore | None = None
        self.session: aiohttp.ClientSession | None = None
        self.problems: list[str] = []
        """Things the harness saw go wrong that are not the checker's (adopt refused...)."""

    # -- addresses ------------------------------------------------------------------------

    @property
    def etcd_endpoints(self) -> str:
        """Every member, comma-separated."""
        return ",".join(self.etcd.endpoints)

    @property
    def s3_url(self) -> str:
        """moto itself (the harness's own reads bypass the proxy)."""
        return f"http://127.0.0.1:{self.s3_port}"

    def url(self, partition: str) -> str:
        """The HTTP API of the partition's owner (of some replica: a hint, when replicated)."""
        owner = self.routes[partition]
        if owner == EMBEDDED:
            return f"http://127.0.0.1:{self.writers[EMBEDDED].api_port}"
        if owner == REPLICATED:
            urls = self.replica_urls
            return urls[sorted(self.routes).index(partition) % len(urls)]
        return self.publishers[owner].url

    @property
    def replica_urls(self) -> list[str]:
        """Every replica's HTTP API (none unless the publishers are replicated)."""
        if not self.config.replicated:
            return []
        return [self.publishers[name].url for name in sorted(self.publishers)]

    def s3_settings(self, *, direct: bool = False) -> S3Settings:
        """Settings for the bucket, through the proxy unless `direct`."""
        endpoint = self.s3_url if direct else self.proxy.endpoint_url
        return S3Settings(bucket=BUCKET, endpoint_url=endpoint, region="us-east-1")

    # -- argv -----------------------------------------------------------------------------

    def serve_argv(self, pub: PublisherProc) -> list[str]:
        """The command line of `pub`'s next incarnation."""
        build = self.config.broken_build
        base = ["-m", "l0lab.chaos.broken_serve", build] if build else ["-m", "watermark"]
        served = {pub.name, REPLICATED}
        partitions = ",".join(p for p, owner in sorted(self.routes.items()) if owner in served)
        cfg = self.config
        replicas = [
            "--replicated",
            "--advertise-url",
            pub.url,
            "--member-lease-ttl",
            str(cfg.member_lease_ttl_s),
            "--membership-interval",
            "0.5",
        ]
        return [
            sys.executable,
            *base,
            "serve",
            *(replicas if cfg.replicated else []),
            "--etcd",
            self.etcd_endpoints,
            "--namespace",
            NAMESPACE,
            "--partitions",
            partitions,
            "--register",
            "--http-port",
            str(pub.port),
            "--auth-token-file",
            str(self.token_file),
            "--tick-interval",
            str(cfg.epoch_interval_s),
            "--ticker-lease-ttl",
            str(cfg.ticker_lease_ttl_s),
            "--publish-interval",
            "0.5",
            "--hold-ttl",
            str(cfg.hold_ttl_s),
            "--fence-timeout",
            "5",
            "--drain-timeout",
            "2",
            "--owner-id",
            pub.owner_id,
            "--etcd-timeout",
            "2",
            "--log-level",
            "warning",
        ]

    def _round_argv(self, index: int) -> list[str]:
        return [
            "--bucket",
            BUCKET,
            "--endpoint-url",
            self.proxy.endpoint_url,
            "--region",
            "us-east-1",
            "--root",
            self.root,
            "--etcd",
            self.etcd_endpoints,
            "--namespace",
            NAMESPACE,
            "--etcd-timeout",
            "2",
            "--grace",
            f"{self.config.grace_s}s",
            "--shard-index",
            str(index),
            "--shard-count",
            str(len(self.sweepers)),
            "--journal-dir",
            str(self.journal_dir),
            "--concurrency",
            "4",
            "--list-concurrency",
            "2",
            "--log-level",
            "warning",
        ]

    def _daemon_argv(self, sweeper: SweeperProc) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gcd",
            "daemon",
            *self._round_argv(sweeper.index),
            "--interval",
            "0.5s",
            "--idle-interval",
            "1s",
            "--max-interval",
            "2s",
            "--full-pass-interval",
            "5s",
            "--unready-after",
            "60s",
            "--shard-ttl",
            f"{self.config.shard_ttl_s}s",
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(sweeper.port),
        ]

    def sweep_argv(self, index: int) -> list[str]:
        """A one-shot `gcd sweep` of shard `index` (the final rounds)."""
        return [
            sys.executable,
            "-m",
            "gcd",
            "sweep",
            *self._round_argv(index),
            "--shard-ttl",
            f"{self.config.shard_ttl_s}s",
            "--json",
        ]

    # -- start and stop -------------------------------------------------------------------

    async def start(self) -> None:
        """Bring everything up (see the module docstring)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name, value in child_env().items():  # the harness's own S3 client, like LocalS3
            if name.startswith("AWS_"):
                os.environ.setdefault(name, value)
        lines = (f"{role}:{token}\n" for role, token in self.tokens.items())
        self.token_file.write_text("".join(lines))
        self.token_file.chmod(0o600)
        await asyncio.to_thread(self.etcd.start)
        self.s3.start()
        url = f"{self.s3_url}/moto-api/"
        if not await asyncio.to_thread(wait_http, url, _READY_S, child=self.s3):
            raise RuntimeError(f"the S3 server did not start: {self.s3.tail()}")
        await self.proxy.start()
        self.session = aiohttp.ClientSession()
        async with DemoBucket.open(self.s3_settings(direct=True)) as bucket:
            await bucket.ensure_bucket()
        self.kv = await open_kv(
            EtcdSettings(endpoints=self.etcd.endpoints, namespace=NAMESPACE, timeout_s=1.0),
            connect=False,
        )
        self.store = WatermarkStore(self.kv, NAMESPACE)
        await self.store.init_cluster_epoch(1)
        await asyncio.to_thread(self._bind)
        await asyncio.gather(*(self.start_publisher(name) for name in self.publishers))
        await self._start_writers()
        await asyncio.gather(*(self.start_sweeper(s) for s in self.sweepers))

    def _bind(self) -> None:
        """`watermark namespace bind`, as an operator runs it once per cluster."""
        argv = [
            sys.executable,
            "-m",
            "watermark",
            "namespace",
            "bind",
            "--bucket",
            BUCKET,
            "--root",
            self.root,
            "--endpoint-url",
            self.proxy.endpoint_url,
            "--region",
            "us-east-1",
            "--etcd",
            self.etcd_endpoints,
            "--namespace",
            NAMESPACE,
        ]
        done = subprocess.run(  # noqa: S603 - argv is ours
            argv,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"watermark namespace bind failed: {done.stderr.strip()}")

    async def start_publisher(self, name: str) -> None:
        """Start (or restart) publisher `name` and wait until it has published.

        Its port was drawn when the cluster was built: another process may have taken it
        since (a fresh-clone CI run saw serve-b exit on the bind while another worker's
        server answered its /readyz, and the run blamed the first fault for 20 s without
        serve-b). Ready means *our* process listens; a first start that lost its port
        draws another (nothing knows the old one yet), a restart says so and fails."""
        pub = self.publishers[name]
        for _ in range(3):
            pub.child.argv = self.serve_argv(pub)
            pub.child.start()
            try:
                ready = await asyncio.to_thread(
                    wait_http, f"{pub.url}/readyz", _READY_S, child=pub.child
                )
            except RuntimeError:  # exited at start (the bind, or anything else)
                ready = False
            if ready and listens(pub.child.pid, pub.port):
                return
            if pub.incarnation > 1 or (not ready and pub.child.alive):
                break
            await asyncio.to_thread(pub.child.stop, 5.0)
            _log.warning("chaos.publisher_port_lost", publisher=name, port=pub.port)
            pub.port = free_port()
        raise RuntimeError(
            f"{name} did not become ready on port {pub.port} (or another process answered "
            f"there): {pub.child.tail()}"
        )

    async def start_sweeper(self, sweeper: SweeperProc) -> None:
        """Start (or restart) a sweeper and wait for its /healthz."""
        sweeper.child.argv = self._daemon_argv(sweeper)
        sweeper.child.start()
        url = f"http://127.0.0.1:{sweeper.port}/healthz"
        if not await asyncio.to_thread(wait_http, url, _READY_S, child=sweeper.child):
            raise RuntimeError(f"sweeper {sweeper.index} did not start: {sweeper.child.tail()}")

    def _writer_spec(self, name: str, control_port: int, api_port: int, seed: int) -> WriterSpec:
        cfg = self.config
        embedded = name == EMBEDDED
        partitions = [p for p, o in sorted(self.routes.items()) if (o == EMBEDDED) == embedded]
        return WriterSpec(
            name=name,
            mode="embedded" if name == EMBEDDED else "http",
            run_dir=str(self.run_dir),
            etcd=list(self.etcd.endpoints),
            namespace=NAMESPACE,
            endpoint_url=self.proxy.endpoint_url,
            bucket=BUCKET,
            root=self.root,
            routes={p: ("" if name == EMBEDDED else self.url(p)) for p in partitions},
            replicas=[] if embedded else self.replica_urls,
            token=self.tokens["writer"],
            token_file=str(self.token_file),
            control_port=control_port,
            api_port=api_port,
            owner_id=f"{EMBEDDED}-publisher",
            rate=cfg.write_rate / len(self.routes),
            slow_share=cfg.slow_commit_share,
            seed=seed,
            hold_ttl_s=cfg.hold_ttl_s,
        )

    async def _start_writers(self) -> None:
        for offset, name in enumerate(("http", EMBEDDED)):
            control, api = free_port(), free_port() if name == EMBEDDED else 0
            spec_path = self.run_dir / f"writer-{name}.json"
            self._writer_spec(name, control, api, self.config.seed * 7 + offset).dump(spec_path)
            child = Child.python(
                f"writer-{name}",
                ["-m", "l0lab.chaos.writer", str(spec_path)],
                self.logs / f"writer-{name}.log",
            )
            self.writers[name] = WriterProc(name, spec_path, control, child, api)
        await asyncio.gather(*(self.start_writer(name) for name in self.writers))

    async def start_writer(self, name: str, *, seed_bump: int = 0) -> None:
        """Start (or restart) a writer with the current routes; wait for its control API."""
        writer = self.writers[name]
        spec = WriterSpec.load(writer.spec_path)
        fresh = self._writer_spec(name, writer.control_port, writer.api_port, spec.seed + seed_bump)
        fresh.dump(writer.spec_path)
        writer.child.start()
        url = f"{writer.control_url}/status"
        if not await asyncio.to_thread(wait_http, url, _READY_S, child=writer.child):
            raise RuntimeError(f"writer {name} did not start: {writer.child.tail()}")

    async def stop_all(self) -> None:
        """Stop every process by PID (thawed first), the proxy and etcd."""
        children = [w.child for w in self.writers.values()] + [s.child for s in self.sweepers]
        children += [p.child for p in self.publishers.values()] + [self.s3]
        await asyncio.gather(*(asyncio.to_thread(child.stop, 20.0) for child in children))
        for member in self.etcd.members:
            if member.process is not None:
                _signal_cont(member)
        await asyncio.to_thread(self.etcd.close)
        await self.proxy.stop()
        if self.kv is not None:
            await self.kv.close()
        if self.session is not None:
            await self.session.close()

    # -- operations -----------------------------------------------------------------------

    async def _json(
        self,
        method: str,
        url: str,
        body: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 40.0,
    ) -> tuple[int, Any]:
        assert self.session is not None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self.session.request(
            method, url, json=body, headers=headers, timeout=timeout
        ) as resp:
            return resp.status, await resp.json(content_type=None)

    async def writer_pause(self, name: str, partitions: list[str]) -> dict[str, int]:
        """Pause partitions on writer `name`; their log ends (final while paused)."""
        if not partitions:
            return {}
        try:
            status, doc = await self._json(
                "POST", f"{self.writers[name].control_url}/pause", {"partitions": partitions}
            )
            if status == 200:
                return {p: int(v) for p, v in doc["log_ends"].items()}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.problems.append(f"pausing {partitions} on writer {name} failed: {exc!r}")
        # The writer is gone: nothing appends, the files are the logs.
        return {p: PartitionLog.read(log_path(self.run_dir, p)).log_end for p in partitions}

    async def writer_resume(self, name: str, partitions: list[str]) -> None:
        """Resume partitions on writer `name`, with their current routes."""
        if not partitions:
            return
        routes = {p: self.url(p) for p in partitions}
        try:
            await self._json(
                "POST",
                f"{self.writers[name].control_url}/resume",
                {"partitions": partitions, "routes": routes},
            )
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.problems.append(f"resuming {partitions} on writer {name} failed: {exc!r}")

    async def writer_stop(self, name: str) -> None:
        """Writer `name` stops writing and resolves its writes in flight; the process keeps
        running (the embedded one keeps publishing)."""
        try:
            status, doc = await self._json("POST", f"{self.writers[name].control_url}/stop", {})
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            status, doc = 0, repr(exc)
        if status != 200:
            self.problems.append(f"writer {name} did not stop writing cleanly: {doc}")

    async def adopt(self, owner: str, partition: str, log_end: int) -> bool:
        """POST adopt {"log_end_offset": log_end} to publisher `owner` (admin token)."""
        name = urllib.parse.quote(partition, safe="")
        url = f"{self.publishers[owner].url}/v1/partitions/{name}/adopt"
        for _ in range(20):
            try:
                body = {"log_end_offset": log_end}
                status, doc = await self._json(
                    "POST", url, body, token=self.tokens["admin"], timeout_s=10
                )
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, doc = 0, {"error": repr(exc)}
            if status == 200:
                return True
            if status not in (0, 503):
                break
            await asyncio.sleep(0.5)
        self.problems.append(f"{owner} refused to adopt {partition} at log end {log_end}: {doc}")
        return False

    def partitions_of(self, owner: str) -> list[str]:
        """The partitions routed to `owner`."""
        return sorted(p for p, o in self.routes.items() if o == owner)

    async def restart_publisher(self, name: str) -> None:
        """Restart a killed publisher: the writers pause its partitions, the new process
        adopts each with its log end, the writers resume. A replica just starts again:
        the leases give it its share back (handed over by the others)."""
        if self.config.replicated:
            self.publishers[name].incarnation += 1
            await self.start_publisher(name)
            return
        parts = self.partitions_of(name)
        ends = await self.writer_pause("http", parts)
        self.publishers[name].incarnation += 1
        await self.start_publisher(name)
        for partition in parts:
            await self.adopt(name, partition, ends[partition])
        await self.writer_resume("http", parts)


def _signal_cont(member: LocalEtcd) -> None:
    """Thaw an etcd member the nemesis may have frozen, so it can be stopped."""
    member.signal(signal.SIGCONT)
