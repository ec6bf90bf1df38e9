"""Free ports for the local servers: below the kernel's ephemeral range, so no outgoing
connection can take one between its choice and the server's bind."""

from __future__ import annotations

import socket
from pathlib import Path

from l0lab.testing import local_servers
from l0lab.testing.local_servers import free_port


def test_free_ports_are_drawn_below_the_ephemeral_range_and_can_be_bound() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    quiet = (10_000, low) if low >= 14_096 else None  # this machine: 32768, so (10000, 32768)
    assert quiet == local_servers._QUIET_PORTS
    ports = {free_port() for _ in range(20)}
    if quiet is not None:
        assert all(10_000 <= port < low for port in ports), ports
    assert len(ports) > 1  # drawn at random: workers do not walk the same sequence
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_not_given() -> None:
    """A port held by a listener is drawn again (here: every draw but the last is taken)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        draws = iter([taken, taken, taken])
        real = local_servers._RANDOM

        class Rigged:
            def randrange(self, low: int, high: int) -> int:
                return next(draws, real.randrange(low, high))

        local_servers._RANDOM = Rigged()  # type: ignore[assignment]
        try:
            port = free_port()
        finally:
            local_servers._RANDOM = real
    assert port != taken
