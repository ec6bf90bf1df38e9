"""`watermark namespace`, the old spelling of `gcd namespace`, runs gcd in a child process:
a stop signal sent to `watermark` stops the child too, and the exit code says so."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_a_stop_signal_to_watermark_namespace_stops_its_gcd_child() -> None:
    """The child hangs connecting to an etcd that accepts and never answers; SIGTERM to
    `watermark` reaches it (the connection closes: the child is gone, not orphaned) and
    `watermark` exits 143, as a shell reports a command ended by SIGTERM."""
    with socket.create_server(("127.0.0.1", 0)) as hole:
        port = hole.getsockname()[1]
        hole.settimeout(60)
        argv = ["namespace", "show", "--etcd", f"127.0.0.1:{port}", "--namespace", "/x"]
        parent = subprocess.Popen(
            [sys.executable, "-m", "watermark", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            connection, _ = hole.accept()  # the gcd child is running and connecting
            with connection:
                parent.send_signal(signal.SIGTERM)
                assert parent.wait(timeout=30) == 143
                connection.settimeout(30)
                while connection.recv(65536):  # bytes until the child's end closes it
                    pass
        finally:
            parent.kill()
            parent.wait(timeout=30)
            assert parent.stderr is not None
            parent.stderr.close()
