"""A publisher restarted on the same port as soon as the old one has exited binds it
(issue 42: "address in use within 5 s of SIGTERM"): the listener sets SO_REUSEADDR
(asyncio's default on POSIX), so connections the old process leaves in TIME_WAIT do not
block the port. A new process started while the old one still drains (up to
--drain-timeout after SIGTERM) cannot bind: the old one still listens, as it must to
answer its held fences."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd
from tests.serving import live_serve, new_serve

pytestmark = pytest.mark.integration


def test_a_restart_on_the_same_port_right_after_exit_binds(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """The old serve answered a client on a kept-alive connection (TIME_WAIT after its
    exit); the new one, started at once on the same port, gets ready."""
    with live_serve(etcd_server, namespace, tmp_path, partitions=("orders/0",)) as old:
        port = int(old.url.rsplit(":", 1)[1])
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert client.recv(1000).startswith(b"HTTP/1.1 200")
        assert old.child.stop() == 0
    client.close()
    new = new_serve(
        etcd_server,
        namespace,
        tmp_path / "again.log",
        "--take-over",
        "--insecure-no-auth",
        "--log-level",
        "warning",
        partitions=("orders/0",),
        owner="writer-gw-2",
        port=port,
    ).start()
    try:
        new.wait_ready(30)
        assert "address already in use" not in new.tail().lower()
    finally:
        assert new.stop() == 0
