"""Fair admission before authentication (issue 25, finding 5), against a real
`watermark serve` process flooded with real sockets on loopback.

One client address (127.0.0.2) holding and re-opening 1,500 silent sockets gets at most
--max-connections-per-peer of them; the rest are answered 503 at once, and the held
ones are closed after --http-head-timeout. Meanwhile /healthz and /readyz from another
address (127.0.0.1) answer within a bound, and so does a writer's call. With several
flooding addresses filling --max-connections, the probes' reserve still answers
/healthz while any other request is refused. Every refusal the clients saw is counted
under its reason in /metrics, exactly. And a 10,000-character path is answered with the
API's JSON error document (400), not aiohttp's plain text.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd
from tests.serving import new_serve
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

_PEER_503 = b"--max-connections-per-peer"
_FULL_503 = b"the service has its maximum of open connections"


class Flood:
    """Silent sockets from `addresses`, each re-opened as soon as the server closes it;
    `seen` counts how each one ended: a 503 per peer, a 503 when full, or closed
    without an answer (the head timeout)."""

    def __init__(self, port: int, addresses: Sequence[str], per_address: int) -> None:
        self.port = port
        self.addresses = addresses
        self.per_address = per_address
        self.seen: Counter[str] = Counter()
        self.holding = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _one(self, address: str) -> None:
        while not self._stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, local_addr=(address, 0)
                )
            except OSError:
                self.seen["connect_failed"] += 1
                await asyncio.sleep(0.05)
                continue
            self.holding += 1
            try:
                answer = await reader.read()
            except ConnectionResetError:
                answer = b""
            finally:
                self.holding -= 1
                writer.close()
            if _PEER_503 in answer:
                self.seen["too_many_from_peer"] += 1
            elif _FULL_503 in answer:
                self.seen["too_many_connections"] += 1
            elif not answer:
                self.seen["head_timeout"] += 1
            else:
                self.seen["other"] += 1
            await asyncio.sleep(0.01)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._one(address))
            for address in self.addresses
            for _ in range(self.per_address)
        ]

    async def stop(self) -> None:
        """Stop re-opening; let every socket end on the server's side (counted)."""
        self._stop.set()
        await asyncio.wait_for(asyncio.gather(*self._tasks), timeout=30)


def _get(url: str) -> tuple[int, bytes, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read(), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.monotonic() - started
    except (ConnectionError, http.client.RemoteDisconnected):  # refused before the answer
        return 0, b"", time.monotonic() - started


def _refusals(base: str) -> dict[str, float]:
    _, body, _ = _get(f"{base}/metrics")
    found = re.findall(rb'l0gc_watermark_http_refusals_total\{reason="(\w+)"\} ([0-9.e+]+)', body)
    return {reason.decode(): float(value) for reason, value in found}


async def _probe_while(flood: Flood, base: str, paths: Sequence[str], rounds: int) -> float:
    """Call each path `rounds` times while the flood holds; the slowest answer (s)."""
    slowest = 0.0
    for _ in range(rounds):
        for path in paths:
            status, _, took = await asyncio.to_thread(_get, base + path)
            assert status == 200, (path, status, flood.seen)
            slowest = max(slowest, took)
        await asyncio.sleep(0.1)
    return slowest


async def test_probes_and_writers_are_answered_under_a_connection_flood(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    serve = new_serve(etcd_server, namespace, tmp_path / "solo.log", "--register",
                      "--max-connections", "400", "--max-connections-per-peer", "150",
                      "--http-head-timeout", "1s", "--publish-interval", "0.2",
                      "--drain-timeout", "0.5", partitions=("p/0",),
                      owner="solo").start()  # fmt: skip
    port, base = serve.port, serve.url
    try:
        await asyncio.to_thread(serve.wait_ready)
        assert set(_refusals(base).values()) == {0.0}

        # One address, 1,500 sockets: 150 held (until the head timeout), the rest refused.
        flood = Flood(port, ["127.0.0.2"], 1500)
        flood.start()
        await wait_until(
            lambda: flood.seen["too_many_from_peer"] >= 1000 and flood.seen["head_timeout"] >= 150,
            timeout_s=20, what="the one-address flood held and refused",
            detail=lambda: str(flood.seen),
        )  # fmt: skip
        slowest = await _probe_while(
            flood, base, ["/healthz", "/readyz", "/v1/partitions/p%2F0"], rounds=5
        )
        assert slowest < 2.0, slowest  # measured: 0.02-0.4 s (a 503 before the fix)
        await flood.stop()
        assert flood.seen["other"] == flood.seen["connect_failed"] == 0, flood.seen
        counted = _refusals(base)
        assert counted["too_many_from_peer"] == flood.seen["too_many_from_peer"]
        assert counted["head_timeout"] == flood.seen["head_timeout"]
        assert counted["too_many_connections"] == 0

        # Four addresses fill --max-connections: /healthz is answered from the reserve,
        # anything else is refused until the flood ends.
        flood = Flood(port, ["127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"], 150)
        flood.start()
        await wait_until(lambda: flood.seen["too_many_connections"] >= 200, timeout_s=20,
                         what="four addresses filled --max-connections",
                         detail=lambda: str(flood.seen))  # fmt: skip
        slowest = await _probe_while(flood, base, ["/healthz", "/readyz"], rounds=5)
        assert slowest < 2.0, slowest  # measured: 0.02-0.4 s (a 503 before the fix)
        refused_mine = 0
        for _ in range(20):  # between two waves of head timeouts the pool may have room
            status, body, _ = await asyncio.to_thread(_get, f"{base}/v1/partitions/p%2F0")
            if status != 200:
                refused_mine += 1
                assert status in (0, 503), (status, body)
                if status == 503:
                    assert json.loads(body)["error"] == "too_many_connections"
                    break
        assert refused_mine >= 1
        await flood.stop()
        counted_before, counted = counted, _refusals(base)
        assert counted["too_many_connections"] == (
            flood.seen["too_many_connections"] + refused_mine
        )
        assert counted["head_timeout"] == (
            counted_before["head_timeout"] + flood.seen["head_timeout"]
        )
        assert flood.seen["other"] == 0, flood.seen

        # A 10,000-character path: the API's JSON error document, counted as bad_request.
        status, body, _ = await asyncio.to_thread(_get, f"{base}/v1/partitions/{'x' * 10_000}")
        assert status == 400
        doc = json.loads(body)
        assert doc["error"] == "bad_request", doc
        assert "8190 bytes" in doc["message"], doc
        assert _refusals(base)["bad_request"] == 1
    finally:
        serve.stop(15.0)
