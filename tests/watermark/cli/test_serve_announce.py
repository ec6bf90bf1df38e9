"""`watermark serve` on a terminal says where it listens (issue 55): its default log level
there is warning, so a person saw nothing at all once it was up. Run on a real pseudo-
terminal and a real etcd; off a terminal the JSON log's `watermark.http_listening` says it.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.serving import serve_args

pytestmark = pytest.mark.integration


def test_serve_on_a_terminal_prints_one_listening_line(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    port, probes = free_port(), free_port()
    argv = serve_args(
        etcd_server,
        namespace,
        "--register",
        "--probe-port",
        str(probes),
        port=port,
        partitions=("p/0",),
        owner="tty",
    )
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "watermark", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        cwd=tmp_path,
    )
    os.close(follower)
    said = b""
    try:
        deadline = time.monotonic() + 60
        while b"\n" not in said.partition(b"listening on")[2]:
            left = deadline - time.monotonic()
            assert left > 0, f"no listening line in 60 s: {said!r}"
            ready, _, _ = select.select([leader], [], [], left)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed: the process exited
                    chunk = b""
                assert chunk, f"serve exited ({process.poll()}) before saying: {said!r}"
                said += chunk
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.close(leader)
    line = next(t for t in said.decode().splitlines() if "listening on" in t)
    assert line.strip() == (
        f"watermark serve: listening on http://127.0.0.1:{port}; probes "
        f"and /metrics on http://127.0.0.1:{probes}"
    )
