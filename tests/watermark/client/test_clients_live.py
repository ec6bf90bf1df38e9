"""The writer clients against a live `watermark serve` with a real etcd, and against a
forged redirect on loopback (a replica record pointing at an attacker, issue 25 #3).

Named by behaviour, not module: both writer clients (client.aio, client.sync) alike."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web

from l0lab.testing.local_servers import LocalEtcd
from tests.serving import ADMIN, RECONCILER, WRITER, Serve, live_serve
from watermark import (
    ApiError,
    AsyncWriterClient,
    RedirectRefused,
    Retry,
    WriterClient,
)

pytestmark = pytest.mark.integration
FAST = Retry(attempts=3, first_pause_s=0.02, max_pause_s=0.1)


@pytest.fixture(scope="module")
def serve(etcd_server: LocalEtcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One serve for the module, hosting orders/0 and orders/1 at cluster epoch 3."""
    with live_serve(etcd_server, "/l0gc-test/clients", tmp_path_factory.mktemp("serve")) as live:
        yield live


def test_the_sync_client_writes_commits_idempotently_and_reports(serve: Serve) -> None:
    """epoch -> fence -> commit -> the same commit again (repeat) -> reconciled; a stale
    epoch raises ApiError with action reupload; batches answer per entry."""
    with WriterClient([serve.url], token=WRITER, retry=FAST) as client:
        info = client.epoch()
        epoch = info.stamp(["orders/0"])
        assert epoch == 3
        fence = client.fence("orders/0", epoch)
        assert (fence.partition, fence.epoch, fence.base) == ("orders/0", 3, serve.url)
        first = client.commit(fence, 0)
        again = client.commit(fence, 0)
        assert (first["repeat"], again["repeat"], again["last_applied_offset"]) == (False, True, 0)
        assert client.abort(fence) == {"aborted": False, "outcome": "committed"}
        with pytest.raises(ApiError) as stale:
            client.fence("orders/0", 0)
        assert (stale.value.code, stale.value.action) == ("stale_epoch", "reupload")
        granted = client.fences([("orders/0", 3), ("orders/1", 3), ("nowhere", 3)])
        assert [type(g).__name__ for g in granted] == ["Granted", "Granted", "ApiError"]
        missing = granted[2]
        assert isinstance(missing, ApiError)
        assert (missing.code, missing.action) == ("not_registered", "stop")  # a typo: no retry
        done = client.commits([(g, 1) for g in granted[:2] if not isinstance(g, ApiError)])
        assert [d["status"] if isinstance(d, dict) else d for d in done] == [200, 200]
        assert client.state("orders/1")["last_applied_offset"] == 1
    with WriterClient([serve.url], token=RECONCILER, retry=FAST) as reconciler:
        assert reconciler.reconciled("orders/0", 1)["reconciled_offset"] == 1


async def test_the_async_client_does_the_same(serve: Serve) -> None:
    """The asyncio client: the same routes and answers."""
    async with AsyncWriterClient([serve.url], token=WRITER, retry=FAST) as client:
        epoch = (await client.epoch()).stamp(["orders/1"])
        fence = await client.fence("orders/1", epoch)
        state = await client.commit(fence, 5)
        assert (state["last_applied_offset"], state["repeat"]) == (5, False)
        assert (await client.commit(fence, 5))["repeat"] is True
        with pytest.raises(ApiError) as other:
            await client.commit(fence, 6)
        assert (other.value.code, other.value.body["committed_offset"]) == ("already_committed", 5)
        spare = await client.fence("orders/1", epoch)
        assert await client.abort(spare) == {"aborted": True, "outcome": "aborted"}
        with pytest.raises(ApiError) as gone:
            await client.commit(spare, 6)
        assert (gone.value.code, gone.value.action) == ("fence_expired", "refence")


def test_both_clients_register_and_deregister_partitions(serve: Serve) -> None:
    """A writer in another process registers its new partition over HTTP and fences it at
    once (no restart, no etcd credentials); a typo is ApiError not_registered / stop
    after one request; deregistering the live partition is refused live_owner / stop."""
    with WriterClient([serve.url], token=ADMIN, retry=FAST) as admin:
        created = admin.register("events/3")
        assert (created["registered"], created["hosted"]) == (True, True)
        assert admin.register("events/3")["registered"] is False
        with pytest.raises(ApiError) as live:
            admin.deregister("events/3")
        assert (live.value.code, live.value.action) == ("live_owner", "stop")
    with WriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        epoch = writer.epoch().stamp(["events/3"])
        writer.commit(writer.fence("events/3", epoch), 0)
        with pytest.raises(ApiError) as typo:
            writer.fence("evnts/3", epoch)
        assert (typo.value.code, typo.value.action, typo.value.status) == (
            "not_registered",
            "stop",
            404,
        )

    async def unowned() -> tuple[dict[str, object], dict[str, object]]:
        async with AsyncWriterClient([serve.url], token=ADMIN, retry=FAST) as client:
            first = await client.deregister("never/registered")
            return first, await client.register("events/4")

    absent, registered = asyncio.run(unowned())
    assert absent["deregistered"] is False
    assert registered["registered"] is True


class Forger:
    """Two loopback servers: `forger` answers every request with 307 to `target`;
    `attacker` records the Authorization headers it receives."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self.target = ""
        self.urls: dict[str, str] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runners: list[web.AppRunner] = []

    def start(self) -> Forger:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        async def forge(request: web.Request) -> web.Response:
            return web.json_response(
                {"error": "moved", "message": "owned elsewhere", "owner": "x", "address": ""},
                status=307,
                headers={"Location": self.target + request.path_qs},
            )

        async def steal(request: web.Request) -> web.Response:
            self.seen.append(request.headers.get("Authorization"))
            return web.json_response(
                {
                    "token": "fake",
                    "partition": "orders/0",
                    "epoch": 3,
                    "window": [3, 3],
                    "slid": False,
                    "deadline": None,
                    "expires_in_s": None,
                }
            )

        for name, handler in (("forger", forge), ("attacker", steal)):
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handler)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            self.urls[name] = f"http://127.0.0.1:{port}"
            self._runners.append(runner)

    def stop(self) -> None:
        async def cleanup() -> None:
            for runner in self._runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def forger() -> Iterator[Forger]:
    servers = Forger().start()
    try:
        yield servers
    finally:
        servers.stop()


def test_a_forged_redirect_never_carries_the_token_outside_the_set(
    forger: Forger, serve: Serve
) -> None:
    """A 307 to a host outside the configured publishers raises RedirectRefused and the
    attacker receives nothing; a 307 to a configured publisher is followed (both clients)."""
    forger.target = forger.urls["attacker"]
    with (
        WriterClient([forger.urls["forger"]], token=WRITER, retry=FAST) as client,
        pytest.raises(RedirectRefused),
    ):
        client.fence("orders/0", 3)
    assert forger.seen == []

    async def run_async() -> None:
        async with AsyncWriterClient([forger.urls["forger"]], token=WRITER, retry=FAST) as aio:
            with pytest.raises(RedirectRefused):
                await aio.fence("orders/0", 3)

    asyncio.run(run_async())
    assert forger.seen == []
    forger.target = serve.url
    with WriterClient([forger.urls["forger"], serve.url], token=WRITER, retry=FAST) as client:
        fence = client.fence("orders/0", 3)
        assert fence.base == serve.url
        assert client.commit(fence, 50)["last_applied_offset"] == 50
        assert client.publishers.candidates("orders/0")[0] == serve.url
