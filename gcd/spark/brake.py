"""`gcd pause` reaches a running Spark job: the driver serves the pause key's answer
(`DriverBrake`, kept up to date by `gcd.spark.pausing`); executors ask it before each
delete batch (`BrakeClient`). Imports nothing an executor lacks.

Design notes: docs/internals/spark.md, `gcd.spark.brake`.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from l0gc.contract.journal_anchor import JournalAnchor
from l0gc.errors import InvalidRecord

__all__ = ["BRAKE_TIMEOUT_S", "BrakeClient", "DriverBrake"]

BRAKE_TIMEOUT_S: Final = 5.0
"""How long an executor waits for the driver's answer before it stops (fail closed)."""
_MAX_ANSWER = 4096
_MAX_REPORT = 4096
MAX_CHAINS: Final = 1_000_000
"""Task journals whose ends a driver keeps (a bound on its memory, ~200 bytes each)."""


@dataclass(eq=False)
class DriverBrake:
    """The pause key as the job's executors see it (the driver's side).

    `reason` is None while deletion may go on; once set (paused, or the pause key could
    not be read) it never clears for this job. `serve` answers executors over HTTP.
    """

    reason: str | None = None
    stopped_at: float | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    chains: dict[str, JournalAnchor] = field(default_factory=dict)
    """The newest end each delete task reported of its journal (`gcd.spark.journal`):
    the driver anchors them in etcd as the job runs."""
    _server: ThreadingHTTPServer | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def stop(self, reason: str, *, now: Callable[[], float] = time.time) -> bool:
        """Engage for good (the first reason stands); True when this call engaged it."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason, self.stopped_at = reason, now()
            return True

    def report(self, body: bytes) -> bool:
        """Keep a task's journal end (never an older one); False when not an anchor."""
        try:
            end = JournalAnchor.decode(body, "a delete task's report")
        except InvalidRecord:
            return False
        with self._lock:
            known = self.chains.get(end.sweeper)
            if known is None and len(self.chains) >= MAX_CHAINS:
                return False
            if known is None or end.seq > known.seq:
                self.chains[end.sweeper] = end
            return True

    def chain_ends(self) -> list[JournalAnchor]:
        """Every chain's newest end reported so far (a copy)."""
        with self._lock:
            return list(self.chains.values())

    def answer(self) -> bytes:
        """What an executor is told: ``{"stop": null}`` or ``{"stop": "reason"}``."""
        with self._lock:
            return json.dumps({"stop": self.reason}).encode()

    def serve(self, host: str) -> str:
        """Start answering on `host` (the address executors reach the driver at, an
        ephemeral port); the URL executors ask."""
        brake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                known = self.path == f"/{brake.token}"
                body = brake.answer() if known else b'{"error": "unknown path"}'
                self.send_response(200 if known else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = self.headers.get("Content-Length") or "0"
                size = int(length) if length.isdigit() else 0
                known = self.path == f"/{brake.token}/anchor" and 0 < size <= _MAX_REPORT
                kept = known and brake.report(self.rfile.read(size))
                self.send_response(204 if kept else 400)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: one request per delete batch."""

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="l0gc-brake", daemon=True).start()
        port = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/{self.token}"

    def close(self) -> None:
        """Stop answering (executors asking after this stop: fail closed)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@dataclass(eq=False)
class BrakeClient:
    """An executor's question to the driver, once per delete batch: None to go on,
    else why to stop. An answer it cannot get or read stops too (fail closed), and a
    stop is final for the task."""

    url: str
    timeout_s: float = BRAKE_TIMEOUT_S
    _stop: str | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _pool: Any = field(default=None, init=False)

    def check(self) -> str | None:
        """None when this task may send its next request; else why not."""
        if self._stop is not None:
            return self._stop
        reason = self._ask()
        if reason is not None:
            with self._lock:
                self._stop = self._stop or reason
        return self._stop

    def _ask(self) -> str | None:
        import urllib3  # noqa: PLC0415 - executor-side dependency (boto3's)

        # A PoolManager, not urllib3.request: urllib3 1.26 (boto3 allows it) lacks that.
        self._pool = self._pool or urllib3.PoolManager(maxsize=1)
        try:
            answer = self._pool.request(
                "GET", self.url, timeout=urllib3.Timeout(total=self.timeout_s), retries=False
            )
            doc = json.loads(answer.data[:_MAX_ANSWER]) if answer.status == 200 else None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            return f"pause state unknown: the driver's brake did not answer ({exc!r:.200})"
        if not isinstance(doc, dict) or "stop" not in doc:
            return f"pause state unknown: the driver's brake answered HTTP {answer.status}"
        stop = doc["stop"]
        return None if stop is None else str(stop)[:500]
