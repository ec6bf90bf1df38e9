"""`l0lab.testing.procs.listens`: a readiness probe answered on a port is only ours when
our process holds the listening socket (the chaos harness's port race of run AI)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from l0lab.testing.local_servers import free_port
from l0lab.testing.procs import Child, listens
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="Linux /proc only")


def test_only_the_process_holding_the_listener_listens(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        assert not listens(os.getpid(), port)  # bound, not listening yet
        sock.listen()
        assert listens(os.getpid(), port)
        child = Child(
            "idler", [sys.executable, "-c", "import signal; signal.pause()"], tmp_path / "s.log"
        )
        child.start()
        try:
            wait_until_sync(lambda: child.alive, timeout_s=10, what="the child running")
            assert not listens(child.pid, port)  # another process answers on that port
        finally:
            child.stop(5.0)
    assert not listens(os.getpid(), port)  # closed
    assert not listens(None, port)
