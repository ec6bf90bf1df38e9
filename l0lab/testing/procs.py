"""The processes of a chaos run: started by the harness, signalled and stopped by PID.

`Child` is one process (a `watermark serve`, a `gcd daemon`, a writer, the S3 server)
in a session of its own, with its output appended to a log file of the run directory.
The nemesis kills it (SIGKILL), freezes it (SIGSTOP) and thaws it (SIGCONT); `stop`
thaws it first, then asks it to stop (SIGTERM) and kills it if it does not in time.
Only the harness's own children are ever signalled, each by the PID it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Child", "ServeProc", "child_env", "listens", "wait_http"]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every child: no L0GC_* or AWS profile of the caller, test
    credentials for the local S3 server, unbuffered output."""
    dropped = {"AWS_PROFILE", "AWS_SESSION_TOKEN"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("L0GC_") and k not in dropped}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def wait_http(url: str, timeout_s: float, *, child: Child | None = None) -> bool:
    """Poll `url` until it answers 200 (another process starting up); False on timeout.

    Raises RuntimeError at once if `child` exits meanwhile.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child is not None and not child.alive:
            raise RuntimeError(f"{child.name} exited at start; see {child.log_path}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def listens(pid: int | None, port: int) -> bool:
    """True when process `pid` holds the socket listening on 127.0.0.1:`port` (Linux:
    /proc/net/tcp's inode against the process's open files). A readiness probe answered
    on a port says nothing of who answered: another process may have taken the port
    between `free_port()` and the start. True where /proc cannot tell (not Linux)."""
    table = Path("/proc/net/tcp")
    if pid is None or not table.exists():
        return pid is not None
    wanted = f"0100007F:{port:04X}"
    inodes = {
        fields[9]
        for fields in (line.split() for line in table.read_text().splitlines()[1:])
        if len(fields) > 9 and fields[1] == wanted and fields[3] == "0A"  # 0A: LISTEN
    }
    try:
        entries = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it exited
        return False
    held = set()
    for entry in entries:
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own fd, say)
            held.add(os.readlink(entry))
    return any(f"socket:[{inode}]" in held for inode in inodes)


class Child:
    """One child process of the run (see the module docstring)."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env if env is not None else child_env()
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen = False
        self.starts = 0
        self._log: Any = None

    @classmethod
    def python(
        cls, name: str, args: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> Child:
        """`python args...` with this interpreter."""
        return cls(name, [sys.executable, *args], log_path, env)

    @property
    def pid(self) -> int | None:
        """The PID while running."""
        return None if self.process is None else self.process.pid

    @property
    def alive(self) -> bool:
        """True while the process runs (frozen or not)."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> Child:
        """Start it (again)."""
        if self.alive:
            return self
        self._close_log()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"--- start {self.starts + 1}: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(  # noqa: S603 - our own argv
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        self.starts += 1
        self.frozen = False
        return self

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None:
            self.process.send_signal(sig)  # not os.kill: a reaped PID is soon another's

    def freeze(self) -> None:
        """SIGSTOP."""
        self._signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        """SIGCONT."""
        self._signal(signal.SIGCONT)
        self.frozen = False

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.process is None:
            return
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.frozen = False

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGCONT, SIGTERM, wait; SIGKILL after `timeout_s`. The exit code (None: killed)."""
        if self.process is None:
            return None
        if self.frozen:
            self.thaw()
        if self.alive:
            self._signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        self._close_log()
        return code

    def wait(self, timeout_s: float) -> int | None:
        """Wait for the process to exit by itself; None if it did not in time."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, chars: int = 2000) -> str:
        """The end of its log, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass(slots=True)
class ServeProc:
    """One `watermark serve` process on loopback; each restart is a new incarnation with a
    new owner id."""

    name: str
    port: int
    child: Child
    incarnation: int = 0
    host: str = "127.0.0.1"
    """The loopback address it listens on (127.0.0.2, ... stand in for pod addresses)."""

    @property
    def url(self) -> str:
        """Its HTTP API."""
        return f"http://{self.host}:{self.port}"

    @property
    def owner_id(self) -> str:
        """The owner (member) id of the running incarnation."""
        return f"{self.name}.{self.incarnation}"
