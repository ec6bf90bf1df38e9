"""A real `watermark serve` on a free loopback port against a real etcd, for tests that
talk to it as a writer in another process would (the conformance fuzzing, the writer
clients, the reference writer in Node). Stopped by its PID."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from l0lab.testing.local_servers import LocalEtcd, free_port
from l0lab.testing.procs import Child, child_env, wait_http
from tests.clirun import run_cli

WRITER = "writer-token-0123456789abcdef0123"
RECONCILER = "reconciler-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef0123456"


@dataclass(frozen=True, slots=True)
class LiveServe:
    """A running `watermark serve` (tokens: WRITER, RECONCILER, ADMIN)."""

    url: str
    etcd: str
    namespace: str
    child: Child


def watermark(etcd: LocalEtcd, namespace: str, *args: str) -> str:
    """Run one `watermark` admin command against `etcd`; its stdout."""
    done = run_cli("watermark", *args, "--etcd", etcd.endpoint, "--namespace", namespace,
                   env=child_env())  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def request(url: str, method: str, path: str, body: dict[str, Any] | None = None,
            token: str = WRITER) -> tuple[int, dict[str, Any]]:  # fmt: skip
    """One HTTP request to a serve at `url`; (status, JSON body), redirects not followed."""
    sent = urllib.request.Request(
        url + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
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
) -> Iterator[LiveServe]:
    """The cluster epoch advanced `epochs` times, `partitions` registered, and a serve
    hosting them with a token file (writer, reconciler, admin); stopped on exit."""
    for _ in range(epochs):
        watermark(etcd, namespace, "epoch", "advance")
    watermark(etcd, namespace, "partition", "register", *partitions)
    tokens = workdir / "tokens"
    tokens.write_text(f"writer:{WRITER}\nreconciler:{RECONCILER}\nadmin:{ADMIN}\n")
    tokens.chmod(0o600)
    port = free_port()
    child = Child.python(
        "serve",
        ["-m", "watermark", "serve", "--etcd", etcd.endpoint, "--namespace", namespace,
         "--partitions", ",".join(partitions), "--owner-id", "writer-gw-1",
         "--http-port", str(port), "--auth-token-file", str(tokens),
         "--publish-interval", "200ms", "--log-level", "warning", *extra],
        workdir / "serve.log",
    ).start()  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        if not wait_http(url + "/readyz", 30, child=child):
            raise RuntimeError(f"watermark serve did not get ready: {child.tail()}")
        yield LiveServe(url, etcd.endpoint, namespace, child)
    finally:
        child.stop()
