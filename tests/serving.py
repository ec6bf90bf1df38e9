"""The one way tests start `watermark serve` as a process of its own.

A test that needs a real publisher (its HTTP API, its signals, its exit code, its log)
starts it here: `python -m watermark serve` on free loopback ports, with the test's etcd,
namespace, owner and extra flags, readiness probed on `/readyz` (tests/waiting.py: never a
fixed sleep; a child that exits while starting fails at once with its log), stopped by its
PID (SIGTERM, then SIGKILL after a deadline). The process is `l0lab.testing.procs.Child`,
the lab's child process (its own session, output appended to `log`).

    with serving(etcd_server, namespace, tmp_path / "serve.log", "--register",
                 partitions=("p/0",), owner="solo") as serve:
        urlopen(serve.url + "/v1/epoch")
    # stopped here; serve.stop() earlier returns its exit code

- `serve_args(...)`: the `serve ...` argument list, for a run to its end with
  `tests/clirun.py`'s `run_cli` (a start that must fail with exit 2);
- `new_serve(...)`: a `Serve` not yet started (`start()`, `wait_ready()`, `stop()`, again:
  a restart keeps the port); `serving(...)`: started, ready, stopped on exit. Async
  tests use `new_serve` and run its blocking waits in a thread
  (`await asyncio.to_thread(serve.wait_ready)`), so their event loop runs on;
- `live_serve(...)`: a serve a writer talks to, as in production: the cluster epoch
  advanced, partitions registered, a token file with the WRITER, RECONCILER and ADMIN
  tokens; `request(...)` and `watermark(...)` talk to it over HTTP and the admin CLI.

`program` runs another entry point with the same arguments (the chaos tests' broken
builds, `-m l0lab.chaos.broken_serve BUILD`); `env` replaces the child's environment
(default: `child_env()`, no L0GC_* of the caller).

Not here: a publisher inside the test process (`watermark.service` objects on a MemoryKV
or a real etcd, an aiohttp app of one on a loopback `ApiServer`) is tests/publishing.py's
(the `publishing` fixture), and a fleet of `--replicated` processes is the lab's
`l0lab.testing.local_replicas.LocalReplicas`.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from l0lab.testing.local_servers import LocalEtcd, free_port
from l0lab.testing.procs import Child, child_env
from tests.clirun import run_cli
from tests.waiting import wait_until_sync

__all__ = [
    "ADMIN",
    "RECONCILER",
    "WRITER",
    "Serve",
    "live_serve",
    "new_serve",
    "request",
    "serve_args",
    "serving",
    "token_file",
    "watermark",
]

WRITER = "writer-token-0123456789abcdef0123"
RECONCILER = "reconciler-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef0123456"
HOST = "127.0.0.1"


@dataclass(slots=True)
class Serve:
    """One `watermark serve` process (see the module docstring)."""

    child: Child
    port: int
    etcd: str
    """The etcd endpoint it was given ("" when the environment gives it)."""
    namespace: str
    probe_port: int | None = None

    @property
    def url(self) -> str:
        """Its HTTP API, http://127.0.0.1:PORT."""
        return f"http://{HOST}:{self.port}"

    @property
    def probe_url(self) -> str:
        """Where /readyz is probed: the probe port when it has one, else the API port."""
        return f"http://{HOST}:{self.probe_port}" if self.probe_port else self.url

    @property
    def pid(self) -> int | None:
        """The PID while it runs."""
        return self.child.pid

    @property
    def log(self) -> Path:
        """Its output (stdout and stderr, every start appended)."""
        return self.child.log_path

    @property
    def alive(self) -> bool:
        return self.child.alive

    def tail(self, chars: int = 3000) -> str:
        """The end of its log, for assertion messages."""
        return self.child.tail(chars)

    def start(self) -> Serve:
        """Start it (again, on the same port); not waiting for readiness."""
        self.child.start()
        return self

    def _ready(self) -> bool:
        if not self.child.alive:
            raise AssertionError(f"watermark serve exited while starting:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.probe_url + "/readyz", timeout=1) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError as exc:  # 503 while starting: close its socket now
            exc.close()
            return False

    def wait_ready(self, timeout_s: float = 60.0) -> Serve:
        """Until /readyz answers 200; AssertionError with its log if it exits or times out."""
        wait_until_sync(
            self._ready,
            timeout_s=timeout_s,
            what=f"{self.probe_url}/readyz",
            ignore=(OSError,),
            detail=self.tail,
        )
        return self

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to its PID (SIGHUP, SIGINT, ...)."""
        assert self.child.process is not None, "not started"
        self.child.process.send_signal(sig)

    def wait_exit(self, timeout_s: float) -> int | None:
        """Its exit code once it exits by itself; None if it did not within `timeout_s`."""
        code = self.child.wait(timeout_s)
        if code is not None:
            self.child.stop()  # reaped already: this closes its log file
        return code

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM by PID, SIGKILL after `timeout_s`; the exit code (None: killed)."""
        return self.child.stop(timeout_s)


def serve_args(
    etcd: LocalEtcd | None,
    namespace: str | None,
    *extra: str,
    port: int | None = None,
    partitions: Sequence[str] = (),
    owner: str | None = None,
) -> list[str]:
    """`serve --etcd E --namespace N [--partitions P,..] [--owner-id O] [--http-port]
    EXTRA` (etcd or namespace None: left to the environment)."""
    argv = ["serve"]
    if etcd is not None:
        argv += ["--etcd", etcd.endpoint]
    if namespace is not None:
        argv += ["--namespace", namespace]
    if partitions:
        argv += ["--partitions", ",".join(partitions)]
    if owner is not None:
        argv += ["--owner-id", owner]
    if port is not None:
        argv += ["--http-port", str(port)]
    return [*argv, *extra]


def new_serve(
    etcd: LocalEtcd | None,
    namespace: str | None,
    log: Path,
    *extra: str,
    partitions: Sequence[str] = (),
    owner: str | None = None,
    port: int | None = None,
    probe_port: int | None = None,
    env: Mapping[str, str] | None = None,
    program: Sequence[str] = ("-m", "watermark"),
) -> Serve:
    """A `Serve` on `port` (default: a free one), not started; see the module docstring."""
    port = free_port() if port is None else port
    if probe_port is not None:
        extra = ("--probe-port", str(probe_port), *extra)
    argv = serve_args(etcd, namespace, *extra, port=port, partitions=partitions, owner=owner)
    child = Child.python(log.stem, [*program, *argv], log, None if env is None else dict(env))
    return Serve(child, port, "" if etcd is None else etcd.endpoint, namespace or "", probe_port)


@contextmanager
def serving(
    etcd: LocalEtcd | None,
    namespace: str | None,
    log: Path,
    *extra: str,
    timeout_s: float = 60.0,
    **options: Any,
) -> Iterator[Serve]:
    """`new_serve(...)` started and ready; stopped (by PID) on exit."""
    serve = new_serve(etcd, namespace, log, *extra, **options)
    try:
        yield serve.start().wait_ready(timeout_s)
    finally:
        serve.stop()


def token_file(workdir: Path, **tokens: str) -> Path:
    """`workdir/tokens` with `role:token` lines, mode 0600 (default: the three roles)."""
    tokens = tokens or {"writer": WRITER, "reconciler": RECONCILER, "admin": ADMIN}
    path = workdir / "tokens"
    path.write_text("".join(f"{role}:{token}\n" for role, token in tokens.items()))
    path.chmod(0o600)
    return path


def watermark(etcd: LocalEtcd, namespace: str, *args: str) -> str:
    """Run one `watermark` admin command against `etcd`; its stdout (exit 0 asserted)."""
    done = run_cli(
        "watermark", *args, "--etcd", etcd.endpoint, "--namespace", namespace, env=child_env()
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def request(
    url: str, method: str, path: str, body: dict[str, Any] | None = None, token: str = WRITER
) -> tuple[int, dict[str, Any]]:
    """One HTTP request to a serve at `url`; (status, JSON body), redirects not followed."""
    sent = urllib.request.Request(
        url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(sent, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@contextmanager
def live_serve(
    etcd: LocalEtcd,
    namespace: str,
    workdir: Path,
    *,
    partitions: Sequence[str] = ("orders/0", "orders/1"),
    epochs: int = 3,
    extra: Sequence[str] = (),
) -> Iterator[Serve]:
    """The cluster epoch advanced `epochs` times, `partitions` registered, and a serve
    (owner writer-gw-1) hosting them with a token file (writer, reconciler, admin);
    stopped on exit."""
    for _ in range(epochs):
        watermark(etcd, namespace, "epoch", "advance")
    watermark(etcd, namespace, "partition", "register", *partitions)
    tokens = token_file(workdir)
    with serving(
        etcd,
        namespace,
        workdir / "serve.log",
        "--auth-token-file",
        str(tokens),
        "--publish-interval",
        "200ms",
        "--log-level",
        "warning",
        *extra,
        partitions=partitions,
        owner="writer-gw-1",
        timeout_s=30,
    ) as serve:
        yield serve


@dataclass
class AsyncApi:
    """A serve's API over aiohttp, each call with a bearer token (see `api_client`)."""

    http: aiohttp.ClientSession
    base: str

    async def post(self, path: str, body: dict[str, Any], token: str) -> tuple[int, Any]:
        """(status, JSON answer) of POST `path` (already percent-encoded)."""
        headers = {"Authorization": f"Bearer {token}"}
        async with self.http.post(
            URL(self.base + path, encoded=True), json=body, headers=headers
        ) as answer:
            return answer.status, await answer.json()

    async def epoch(self, token: str) -> int:
        """GET /v1/epoch's cluster epoch."""
        headers = {"Authorization": f"Bearer {token}"}
        async with self.http.get(self.base + "/v1/epoch", headers=headers) as answer:
            return int((await answer.json())["epoch"])


@asynccontextmanager
async def api_client(serve: Serve) -> AsyncIterator[AsyncApi]:
    """An `AsyncApi` on `serve`: 30 s per call, a new connection each (a serve restarted on
    the same port must not be sent a pooled socket of its previous process)."""
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=30), connector=aiohttp.TCPConnector(force_close=True)
    ) as http:
        yield AsyncApi(http, serve.url)
