"""Probes on their own listener (`watermark serve --probe-port`, issue 36 item 6), against
a real `watermark serve` flooded with idle sockets from 20 loopback source addresses.

The API port keeps a reserve of connections for probes, at most 2 per address: idle
sockets from a dozen addresses hold all of it, so /healthz on the API port fails much
of the time (the kubelet would restart a healthy publisher). The probe port is not
reachable through the API port's admission at all: every /healthz and /readyz sent
there during the flood is answered 200, within the probes' timeout (`PROBE_TIMEOUT_S`,
the chart's timeoutSeconds, as docs/kubernetes.md promises), while /healthz on the API
port is refused before and after them (waited for, not sampled).
"""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.clirun import run_cli
from tests.serving import new_serve, serve_args
from tests.waiting import wait_until
from tests.watermark.api.test_http_server_admission import PROBE_TIMEOUT_S, Flood, _get

pytestmark = pytest.mark.integration

SOURCES = [f"127.0.0.{n}" for n in range(10, 30)]  # 20 source addresses


async def test_probes_on_the_probe_port_answer_through_an_idle_connection_flood(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    serve = new_serve(
        etcd_server,
        namespace,
        tmp_path / "solo.log",
        "--register",
        "--max-connections",
        "64",
        "--max-connections-per-peer",
        "8",
        "--http-head-timeout",
        "3s",
        "--publish-interval",
        "0.2",
        "--drain-timeout",
        "0.5",
        partitions=("p/0",),
        owner="solo",
        probe_port=free_port(),
    ).start()
    port, api, probes = serve.port, serve.url, serve.probe_url
    flood = Flood(port, SOURCES, 8)
    try:
        await asyncio.to_thread(serve.wait_ready)
        for path in ("/healthz", "/readyz", "/metrics"):  # the probe port serves these only
            assert (await asyncio.to_thread(_get, probes + path))[0] == 200
        assert (await asyncio.to_thread(_get, probes + "/v1/epoch"))[0] == 404
        flood.start()
        await wait_until(
            lambda: flood.seen["too_many_connections"] >= 200,
            timeout_s=30,
            what="the flood to fill the API port and its probe reserve",
            detail=lambda: str(flood.seen),
        )
        # The flood starves the API port's own probe reserve (else this test shows
        # nothing): its /healthz is refused, before and after the probe port's rounds.
        await _api_healthz_refused(api, flood)
        slowest = 0.0
        rounds = 40
        for _ in range(rounds):
            for path in ("/healthz", "/readyz"):
                started = time.monotonic()
                status, body, _ = await asyncio.to_thread(_get, probes + path)
                assert status == 200, (path, status, body, flood.seen)
                slowest = max(slowest, time.monotonic() - started)
        assert slowest < PROBE_TIMEOUT_S, slowest  # measured: under 0.2 s
        await _api_healthz_refused(api, flood)
        print(
            f"\nunder the flood: {2 * rounds}/{2 * rounds} probes answered on the probe "
            f"port (slowest {slowest:.3f} s); {dict(flood.seen)}"
        )
    finally:
        await flood.abandon()  # nothing is counted after the flood here
        serve.stop(15.0)


async def _api_healthz_refused(api: str, flood: Flood) -> None:
    """Wait until a /healthz on the API port is refused: the flood holds its reserve."""

    async def refused() -> bool:
        return (await asyncio.to_thread(_get, api + "/healthz"))[0] != 200

    await wait_until(
        refused,
        timeout_s=30,
        what="a /healthz on the flooded API port refused",
        ignore=(urllib.error.URLError, TimeoutError),  # not answered: ask again
        detail=lambda: str(flood.seen),
    )


def test_a_probe_port_in_use_is_refused_naming_the_flag(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """--probe-port on a port that is taken: exit 2 naming --probe-port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = run_cli(
            "watermark",
            *serve_args(
                etcd_server,
                namespace,
                "--register",
                "--probe-port",
                str(busy),
                port=free_port(),
                partitions=("p/0",),
            ),
        )
    assert done.returncode == 2, done.stderr
    assert "choose another --probe-port" in done.stderr
