"""Finding a partition's owner among replicas (l0lab.chaos.owners), against HTTP servers on
loopback that answer as `watermark serve --replicated` replicas do. Every request gets 30 s
and as much patience: an answer ends the wait, and what is checked is where the requests
went, never how long they took."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from l0lab.chaos.owners import Owners
from l0lab.testing.local_servers import free_port


class Replica:
    """A replica that owns `owned`, redirects the rest to `owner_of`, and can say no_owner."""

    def __init__(self) -> None:
        self.owned: set[str] = set()
        self.owner_of: dict[str, str] = {}
        self.moving: int = 0
        """Answer this many requests 503 no_owner first."""
        self.requests = 0
        self.url = ""
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        """POST /v1/partitions/{p}/fence."""
        self.requests += 1
        partition = request.match_info["p"]
        if self.moving:
            self.moving -= 1
            return web.json_response({"error": "no_owner"}, status=503)
        if partition in self.owned:
            body: dict[str, Any] = await request.json()
            return web.json_response({"token": f"t-{body['epoch']}", "at": self.url})
        location = f"{self.owner_of[partition]}{request.path}"
        return web.json_response({"error": "moved"}, status=307, headers={"Location": location})

    async def start(self) -> None:
        """Serve on a free loopback port."""
        app = web.Application()
        app.router.add_post("/v1/partitions/{p}/fence", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        """Stop serving (connections are refused from then on)."""
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def replicas() -> AsyncIterator[list[Replica]]:
    """Three replicas; b owns p0."""
    started = [Replica() for _ in range(3)]
    for replica in started:
        await replica.start()
    for replica in started:
        replica.owner_of["p0"] = started[1].url
    started[1].owned.add("p0")
    yield started
    for replica in started:
        if replica.runner is not None:
            await replica.stop()


async def test_a_307_is_followed_and_the_owner_remembered(replicas: list[Replica]) -> None:
    """The first request goes to the route, follows the 307; the next goes straight there."""
    a, b, _ = replicas
    owners = Owners(lambda p: a.url, {}, [r.url for r in replicas])
    async with aiohttp.ClientSession() as session:
        status, doc, base = await owners.request(
            session, "POST", "p0", "/fence", {"epoch": 4}, timeout_s=30, patience_s=30
        )
        assert (status, doc["token"], base) == (200, "t-4", b.url)
        assert (a.requests, b.requests) == (1, 1)
        await owners.request(
            session, "POST", "p0", "/fence", {"epoch": 5}, timeout_s=30, patience_s=30
        )
    assert (a.requests, b.requests) == (1, 2)


async def test_no_owner_is_waited_out_then_a_dead_owner_is_skipped(
    replicas: list[Replica],
) -> None:
    """503 no_owner is retried; a replica refusing connections is forgotten and the next
    one asked, which redirects to the new owner."""
    a, b, c = replicas
    owners = Owners(lambda p: b.url, {}, [r.url for r in replicas])
    async with aiohttp.ClientSession() as session:
        b.moving = 2
        status, _, base = await owners.request(
            session, "POST", "p0", "/fence", {"epoch": 1}, timeout_s=30, patience_s=30
        )
        assert (status, base, b.requests) == (200, b.url, 3)
        await b.stop()
        b.runner = None
        c.owned.add("p0")
        a.owner_of["p0"] = c.url
        status, doc, base = await owners.request(
            session, "POST", "p0", "/fence", {"epoch": 2}, timeout_s=30, patience_s=30
        )
    assert (status, doc["at"], base) == (200, c.url, c.url)


async def test_no_replica_answering_raises(replicas: list[Replica]) -> None:
    """With every replica gone the connection error reaches the caller (the writer counts
    the fence as unreachable)."""
    for replica in replicas:
        await replica.stop()
        replica.runner = None
    owners = Owners(lambda p: replicas[0].url, {}, [r.url for r in replicas])
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError):
            await owners.request(
                session, "POST", "p0", "/fence", {"epoch": 1}, timeout_s=30, patience_s=30
            )


async def test_a_new_route_wins_over_an_owner_seen_before(replicas: list[Replica]) -> None:
    """A controller moved the partition (its route changed): requests follow the new
    route, not the replica seen owning it under the old one (which may still run and
    grant fences as a stale owner)."""
    _, b, c = replicas
    route = {"p0": b.url}
    owners = Owners(lambda p: route[p], {}, [])
    async with aiohttp.ClientSession() as session:
        await owners.request(
            session, "POST", "p0", "/fence", {"epoch": 1}, timeout_s=30, patience_s=30
        )
        c.owned.add("p0")
        route["p0"] = c.url
        _, doc, base = await owners.request(
            session, "POST", "p0", "/fence", {"epoch": 2}, timeout_s=30, patience_s=30
        )
    assert (base, doc["at"], b.requests) == (c.url, c.url, 1)
