"""The publisher's HTTP API over a real socket on 127.0.0.1 (store on an in-memory etcd)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from yarl import URL

from tests.waiting import wait_until
from watermark.http_api import ApiServer, FenceTable, UnknownFence, create_app
from watermark.memory_kv import MemoryKV
from watermark.publisher import Publisher
from watermark.store import WatermarkStore


@dataclass
class Api:
    """A running API server and a client session pointed at it."""

    base: str
    session: aiohttp.ClientSession
    publisher: Publisher
    store: WatermarkStore

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Send a request (path used as already encoded) and return (status, JSON body)."""
        url = URL(self.base + path, encoded=True)
        async with self.session.request(method, url, json=body) as response:
            return response.status, await response.json()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    """Publisher hosting 'orders/0' (epoch 5), served on a free loopback port."""
    store = WatermarkStore(MemoryKV(), "/l0gc/http")
    await store.init_cluster_epoch(5)
    await store.register_partition("orders/0")
    await store.register_partition("spare")
    publisher = Publisher(store, "pub-a", fence_timeout_s=5)
    await publisher.adopt("orders/0")
    server = ApiServer(create_app(publisher))
    port = await server.start("127.0.0.1", 0)
    async with aiohttp.ClientSession() as session:
        yield Api(f"http://127.0.0.1:{port}", session, publisher, store)
    await server.stop()


async def test_fence_commit_reconciled_round_trip(api: Api) -> None:
    """A writer fences, commits and reports reconciled over HTTP; state shows each step."""
    status, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    assert status == 200
    assert fence["window"] == [5, 5]
    assert fence["expires_in_s"] > 0
    status, state = await api.call("POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0})
    assert status == 200
    assert state["last_applied_offset"] == 0
    assert state["inflight_fences"] == 0
    _, fence = await api.call("POST", "/v1/partitions/orders/0/fence", {"epoch": 6})
    assert fence["slid"] is True
    await api.call("POST", f"/v1/fences/{fence['token']}/commit", {"offset": 1})
    status, state = await api.call("POST", "/v1/partitions/orders/0/reconciled", {"offset": 1})
    assert status == 200
    assert state["reconciled_offset"] == 1
    status, shown = await api.call("GET", "/v1/partitions/orders%2F0")
    assert status == 200
    assert shown["window"] == [5, 6]
    assert shown["watermark"] == 4


async def test_stale_epoch_is_409_with_the_window(api: Api) -> None:
    """An epoch below the window is refused with 409 stale_epoch and the window."""
    for epoch in (6, 7):
        _, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": epoch})
        await api.call("POST", f"/v1/fences/{fence['token']}/abort")
    status, body = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    assert status == 409
    assert body["error"] == "stale_epoch"
    assert body["window"] == [6, 7]


async def test_unknown_partition_is_404(api: Api) -> None:
    """Fencing or reading a partition this process does not host is 404 not_hosted."""
    status, body = await api.call("POST", "/v1/partitions/nope/fence", {"epoch": 5})
    assert (status, body["error"]) == (404, "not_hosted")
    status, body = await api.call("GET", "/v1/partitions/nope")
    assert (status, body["error"]) == (404, "not_hosted")


async def test_fence_timeout_is_503(api: Api) -> None:
    """A slide that cannot drain in-flight writes before timeout_s answers 503."""
    holder = await api.publisher.acquire("orders/0", 5, 5)
    status, body = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 6, "timeout_s": 0.05}
    )
    assert (status, body["error"]) == (503, "fence_timeout")
    assert api.publisher.abort(holder)


async def test_abort_releases_and_a_finished_token_is_404(api: Api) -> None:
    """Abort frees the fence; committing an aborted token is 404 unknown_fence."""
    _, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    status, body = await api.call("POST", f"/v1/fences/{fence['token']}/abort")
    assert (status, body) == (200, {"aborted": True})
    status, body = await api.call("POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0})
    assert (status, body["error"]) == (404, "unknown_fence")


async def test_repeated_offset_is_409_and_keeps_the_fence(api: Api) -> None:
    """A commit whose offset does not increase is 409 illegal_offset; the token stays usable."""
    _, first = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    await api.call("POST", f"/v1/fences/{first['token']}/commit", {"offset": 3})
    _, second = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    status, body = await api.call("POST", f"/v1/fences/{second['token']}/commit", {"offset": 3})
    assert (status, body["error"]) == (409, "illegal_offset")
    status, _ = await api.call("POST", f"/v1/fences/{second['token']}/commit", {"offset": 4})
    assert status == 200


@pytest.mark.parametrize(
    "body",
    [{}, {"epoch": "5"}, {"epoch": True}, {"epoch": -1}, {"epoch": 5, "timeout_s": 0}, [5]],
)
async def test_malformed_fence_request_is_400(api: Api, body: Any) -> None:
    """A fence body without a valid epoch or timeout is 400 bad_request."""
    status, answer = await api.call("POST", "/v1/partitions/orders%2F0/fence", body)
    assert (status, answer["error"]) == (400, "bad_request")


async def test_body_that_is_not_json_is_400(api: Api) -> None:
    """Garbage instead of JSON is 400, not a server error."""
    url = URL(api.base + "/v1/partitions/orders%2F0/fence", encoded=True)
    async with api.session.post(url, data=b"{not json") as response:
        assert response.status == 400
        assert (await response.json())["error"] == "bad_request"


async def test_adopt_over_http_and_unregistered_is_404(api: Api) -> None:
    """Adopt hosts a registered partition; an unregistered one is 404 not_registered."""
    status, state = await api.call("POST", "/v1/partitions/spare/adopt")
    assert status == 200
    assert state["owner_epoch"] == 1
    status, body = await api.call("POST", "/v1/partitions/ghost/adopt")
    assert (status, body["error"]) == (404, "not_registered")
    status, listing = await api.call("GET", "/v1/partitions")
    assert status == 200
    assert [p["partition"] for p in listing["partitions"]] == ["orders/0", "spare"]
    assert listing["version"] == 1


async def test_adopt_takes_the_log_end_offset(api: Api) -> None:
    """adopt with log_end_offset records the log end; a bad value is 400, one below the
    applied log is 409 illegal_offset, and the partition stays hosted."""
    status, state = await api.call("POST", "/v1/partitions/spare/adopt", {"log_end_offset": 7})
    assert status == 200
    assert (state["last_applied_offset"], state["log_end_known"]) == (7, True)
    status, body = await api.call("POST", "/v1/partitions/spare/adopt", {"log_end_offset": "7"})
    assert (status, body["error"]) == (400, "bad_request")
    assert "log_end_offset" in body["message"]
    status, body = await api.call("POST", "/v1/partitions/spare/adopt", {"log_end_offset": 3})
    assert (status, body["error"]) == (409, "illegal_offset")
    assert "log end offset 3" in body["message"]
    status, state = await api.call("GET", "/v1/partitions/spare")
    assert (status, state["last_applied_offset"]) == (200, 7)


async def test_health_readiness_and_metrics(api: Api) -> None:
    """healthz answers at once, readyz after the first publish, /metrics exposes counters."""
    status, _ = await api.call("GET", "/healthz")
    assert status == 200
    status, body = await api.call("GET", "/readyz")
    assert (status, body["status"]) == (503, "not_ready")
    await api.publisher.publish_now()
    status, _ = await api.call("GET", "/readyz")
    assert status == 200
    status, _ = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    assert status == 200
    async with api.session.get(api.base + "/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    assert 'l0gc_watermark_fences_total{result="inside"} 1.0' in text
    assert "l0gc_watermark_inflight_fences 1.0" in text
    assert 'l0gc_watermark_publishes_total{outcome="ok"} 1.0' in text


async def test_waiter_blocked_on_a_slide_gets_503_when_the_guard_closes(api: Api) -> None:
    """Closing the publisher's guards (shutdown) answers queued HTTP fences with 503."""
    holder = await api.publisher.acquire("orders/0", 5, 5)
    request = asyncio.create_task(
        api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 6, "timeout_s": 30})
    )
    await wait_until(
        lambda: api.publisher.state("orders/0")["waiting_slides"] == 1,
        timeout_s=5,
        what="the HTTP fence to queue as a waiting slide",
    )
    api.publisher.abort_waiters()
    status, body = await request
    assert (status, body["error"]) == (503, "guard_closed")
    api.publisher.commit(holder, 0)


async def test_fence_table_forgets_fences_that_can_no_longer_commit(api: Api) -> None:
    """Tokens whose fences were reclaimed or released elsewhere are swept as the table grows."""
    table = FenceTable(api.publisher)
    gone = []
    for _ in range(128):
        token = await api.publisher.acquire("orders/0", 5, 5)
        table.add(token)
        api.publisher.abort(token)  # released behind the table's back
        gone.append(token)
    live = await api.publisher.acquire("orders/0", 5, 5)
    table.add(live)
    with pytest.raises(UnknownFence):
        table.get(gone[0].token)
    assert table.get(live.token) is live
