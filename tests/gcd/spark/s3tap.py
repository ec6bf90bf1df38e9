"""A tap on the in-process S3 server: what arrived when, as the server saw it.

`S3Tap(s3_server, bucket)` wraps the WSGI app of moto's server (tests/conftest.py
`s3_server`, a werkzeug server in this process) for the duration of a `with` block.
It records every DeleteObjects request on `bucket` (arrival time, number of keys) and
every ListObjectsV2, so a test can count requests and measure keys per second at the
server, whatever process sent them (a Spark executor, a driver in a subprocess).

`on_delete(number, environ)` is called after the server has carried out the N-th
(1-based) DeleteObjects request and before it answers; with `client_process` a test
can find the process that sent it (e.g. a Spark executor's Python worker) and kill it
by its PID, so that its Spark task fails after deleting and is retried.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from l0lab.testing.faultproxy import operation_of
from l0lab.testing.local_servers import LocalS3


@dataclass(frozen=True, slots=True)
class Arrival:
    """One DeleteObjects request as it reached the server."""

    at: float
    keys: int


class S3Tap:
    """Records DeleteObjects/ListObjectsV2 on one bucket; see the module docs."""

    def __init__(
        self,
        server: LocalS3,
        bucket: str,
        *,
        on_delete: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        self._wsgi = server._server._server  # moto's werkzeug server, serving this process
        self._bucket = bucket
        self._on_delete = on_delete
        self._app: Callable[..., Iterable[bytes]] | None = None
        self._lock = threading.Lock()
        self.deletes: list[Arrival] = []
        self.lists = 0

    def __enter__(self) -> S3Tap:
        self._app = self._wsgi.app
        self._wsgi.app = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._wsgi.app = self._app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        """The WSGI app: record, pass on to moto, call `on_delete`, answer."""
        assert self._app is not None
        path = environ.get("PATH_INFO", "")
        operation = operation_of(environ["REQUEST_METHOD"], environ.get("QUERY_STRING", ""))
        if path.strip("/").split("/")[0] != self._bucket or operation == "other":
            return self._app(environ, start_response)
        if operation == "list":
            with self._lock:
                self.lists += 1
            return self._app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)
        with self._lock:
            self.deletes.append(Arrival(time.monotonic(), body.count(b"<Key>")))
            number = len(self.deletes)
        answer = list(self._app(environ, start_response))  # carried out: keys deleted
        if self._on_delete is not None:
            self._on_delete(number, environ)
        return answer

    def most_keys_within(self, window_s: float) -> int:
        """The most keys that arrived in any `window_s`-long interval."""
        arrivals = sorted(self.deletes, key=lambda a: a.at)
        best, total, start = 0, 0, 0
        for arrival in arrivals:
            total += arrival.keys
            while arrival.at - arrivals[start].at > window_s:
                total -= arrivals[start].keys
                start += 1
            best = max(best, total)
        return best

    def keys_per_second(self) -> float:
        """Keys over the time from the first DeleteObjects to the last one."""
        if len(self.deletes) < 2:
            return 0.0
        span = max(a.at for a in self.deletes) - min(a.at for a in self.deletes)
        return sum(a.keys for a in self.deletes) / span if span > 0 else float("inf")


def _descendants(ancestor: int) -> list[int]:
    """PIDs of every process below `ancestor` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process is gone
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [ancestor]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def client_process(environ: dict[str, Any], ancestor: int) -> int | None:
    """The PID, below `ancestor`, whose socket sent this request (Linux /proc)."""
    port = int(environ["REMOTE_PORT"])
    server_port = int(environ["SERVER_PORT"])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
            if int(local, 16) == port and int(remote, 16) == server_port:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in _descendants(ancestor):
        try:
            links = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
        except OSError:
            continue
        if links & inodes:
            return pid
    return None
