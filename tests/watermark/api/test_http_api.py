"""The publisher's HTTP API over a real socket on 127.0.0.1 (store on an in-memory etcd):
routes, tokens and roles, strict bodies, slow and excess clients, TLS and mutual TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from l0gc.auth import parse_token_file
from l0gc.errors import ConfigError
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.pki import issue
from tests.publishing import Publishing, api_on_loopback, new_publishing
from tests.waiting import wait_until
from watermark.api.http_api import create_app
from watermark.api.http_errors import UnknownFence
from watermark.api.http_fences import FenceTable
from watermark.api.http_server import ApiServer, server_ssl_context
from watermark.api.limits import HttpLimits
from watermark.service.publisher import Publisher

WRITER = "writer-token-0123456789abcdef"
RECONCILER = "reconciler-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
BARE = "bare-token-is-admin-0123456789"
TOKEN_FILE = f"""# roles of the test callers
writer:{WRITER}
reconciler:{RECONCILER}

admin:{ADMIN}
{BARE}
"""


@dataclass
class Api:
    """A running API server and a client session pointed at it."""

    base: str
    session: aiohttp.ClientSession
    publisher: Publisher
    store: WatermarkStore
    server: ApiServer

    async def call(
        self, method: str, path: str, body: Any = None, *, token: str | None = None
    ) -> tuple[int, Any]:
        """Send a request (path used as already encoded, bearer `token` if given) and
        return (status, JSON body)."""
        url = URL(self.base + path, encoded=True)
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with self.session.request(method, url, json=body, headers=headers) as response:
            return response.status, await response.json()

    async def send(self, path: str, data: bytes, *, token: str | None = None) -> tuple[int, Any]:
        """POST raw bytes as the body and return (status, JSON body)."""
        url = URL(self.base + path, encoded=True)
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.post(url, data=data, headers=headers) as response:
            return response.status, await response.json()


Serve = Callable[..., Awaitable[Api]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start publishers hosting 'orders/0' (registered at epoch 5, cluster epoch now 9)
    behind the API on free loopback ports; options: tokens (token file text), limits,
    ssl_context, client_ssl."""
    async with AsyncExitStack() as stack:

        async def start(
            *,
            tokens: str | None = None,
            limits: HttpLimits | None = None,
            ssl_context: ssl.SSLContext | None = None,
            client_ssl: ssl.SSLContext | None = None,
        ) -> Api:
            world = await new_publishing(
                namespace="/l0gc/http", registered=("orders/0", "spare"), advanced=4
            )
            publisher = await world.adopting("pub-a", "orders/0", fence_timeout_s=5)
            token_set = None if tokens is None else parse_token_file(tokens)
            app = create_app(publisher, tokens=lambda: token_set, limits=limits)
            server, port = await api_on_loopback(
                stack, app, ssl_context=ssl_context, metrics=publisher.metrics
            )
            connector = aiohttp.TCPConnector(ssl=client_ssl) if client_ssl else None
            session = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
            scheme = "https" if ssl_context is not None else "http"
            return Api(f"{scheme}://127.0.0.1:{port}", session, publisher, world.store, server)

        yield start


@pytest.fixture
async def api(serve: Serve) -> Api:
    """The API without tokens (as on loopback) and with the default limits."""
    return await serve()


@pytest.fixture
async def secured(serve: Serve) -> Api:
    """The API with the test token file (writer, reconciler, admin, and a bare token)."""
    return await serve(tokens=TOKEN_FILE)


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
    """Fencing or reading a registered partition this process does not host is 404
    not_hosted; one etcd has no record of is 404 not_registered."""
    status, body = await api.call("POST", "/v1/partitions/spare/fence", {"epoch": 5})
    assert (status, body["error"]) == (404, "not_hosted")
    status, body = await api.call("GET", "/v1/partitions/spare")
    assert (status, body["error"]) == (404, "not_hosted")
    status, body = await api.call("POST", "/v1/partitions/nope/fence", {"epoch": 5})
    assert (status, body["error"]) == (404, "not_registered")


async def test_fence_timeout_is_503(api: Api) -> None:
    """A slide that cannot drain in-flight writes before timeout_s answers 503."""
    holder = await api.publisher.acquire("orders/0", 5, 5)
    status, body = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 6, "timeout_s": 0.05}
    )
    assert (status, body["error"]) == (503, "fence_timeout")
    assert api.publisher.abort(holder)


async def test_abort_releases_and_an_aborted_token_cannot_commit(api: Api) -> None:
    """Abort frees the fence (200 aborted: true); a commit under it is 410 fence_expired
    naming the abort, a second abort is 200 aborted: false; an unknown token is 404."""
    _, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    status, body = await api.call("POST", f"/v1/fences/{fence['token']}/abort")
    assert (status, body) == (200, {"aborted": True, "outcome": "aborted"})
    status, body = await api.call("POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0})
    assert (status, body["error"]) == (410, "fence_expired")
    assert "it was aborted" in body["message"]
    status, body = await api.call("POST", f"/v1/fences/{fence['token']}/abort")
    assert (status, body) == (200, {"aborted": False, "outcome": "aborted"})
    status, body = await api.call("POST", "/v1/fences/never-granted/abort")
    assert (status, body["error"]) == (404, "unknown_fence")
    assert api.publisher.state("orders/0")["last_applied_offset"] is None


async def test_a_commit_refused_for_good_releases_its_fence(api: Api) -> None:
    """A commit whose offset does not increase is 409 illegal_offset and releases the
    fence at once: a slide is granted without waiting for the hold TTL, and the token
    cannot commit any more (410, naming the refusal). Issue 25 finding 7: before, the
    fence stayed held and the next slide got 503 fence_timeout for up to 30 s."""
    _, first = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    await api.call("POST", f"/v1/fences/{first['token']}/commit", {"offset": 3})
    _, second = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    status, body = await api.call("POST", f"/v1/fences/{second['token']}/commit", {"offset": 3})
    assert (status, body["error"]) == (409, "illegal_offset")
    assert api.publisher.state("orders/0")["inflight_fences"] == 0
    status, slid = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 6, "timeout_s": 0.5}
    )
    assert (status, slid["slid"]) == (200, True)
    status, body = await api.call("POST", f"/v1/fences/{second['token']}/commit", {"offset": 4})
    assert (status, body["error"]) == (410, "fence_expired")
    assert "refused" in body["message"]
    status, body = await api.call("POST", f"/v1/fences/{second['token']}/abort")
    assert (status, body) == (200, {"aborted": False, "outcome": "refused"})


async def test_a_repeated_commit_answers_success_once_more(api: Api) -> None:
    """A commit repeated with the same token and offset (its answer was lost) is 200 with
    repeat: true and changes nothing; another offset under that token is 409
    already_committed; abort after it answers 200 aborted: false, outcome committed."""
    _, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5})
    path = f"/v1/fences/{fence['token']}/commit"
    status, first = await api.call("POST", path, {"offset": 7})
    assert (status, first["repeat"], first["last_applied_offset"]) == (200, False, 7)
    status, again = await api.call("POST", path, {"offset": 7})
    assert (status, again["repeat"], again["last_applied_offset"]) == (200, True, 7)
    status, body = await api.call("POST", path, {"offset": 8})
    assert (status, body["error"], body["committed_offset"]) == (409, "already_committed", 7)
    status, body = await api.call("POST", f"/v1/fences/{fence['token']}/abort")
    assert (status, body) == (200, {"aborted": False, "outcome": "committed"})
    assert api.publisher.state("orders/0")["last_applied_offset"] == 7


async def test_fence_timeout_names_the_held_fence_and_its_age(api: Api) -> None:
    """The 503 fence_timeout answer names the fence in the way and how long it is held."""
    holder = await api.publisher.acquire("orders/0", 5, 5)
    status, body = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 6, "timeout_s": 0.05}
    )
    assert (status, body["error"], body["held_epoch"]) == (503, "fence_timeout", 5)
    assert body["held_for_s"] >= 0.05
    assert "a fence for epoch 5 granted" in body["message"]
    assert "in-flight writes did not drain" not in body["message"]
    assert api.publisher.abort(holder)


async def test_epoch_route_answers_the_cluster_epoch_read_now(api: Api) -> None:
    """GET /v1/epoch: the cluster epoch as etcd has it now (also right after an advance),
    and each hosted partition's created_epoch and window."""
    status, body = await api.call("GET", "/v1/epoch")
    assert status == 200
    assert body == {
        "version": 1,
        "epoch": 9,
        "partitions": [{"partition": "orders/0", "created_epoch": 5, "window": [5, 5]}],
    }
    await api.store.advance_cluster_epoch()
    answers = await asyncio.gather(*(api.call("GET", "/v1/epoch") for _ in range(20)))
    assert {body["epoch"] for _, body in answers} == {10}


async def test_epoch_route_is_open_to_every_role(secured: Api) -> None:
    """Every role may read the epoch; no token is 401."""
    for token in (WRITER, RECONCILER, ADMIN):
        status, body = await secured.call("GET", "/v1/epoch", token=token)
        assert (status, body["epoch"]) == (200, 9)
    status, body = await secured.call("GET", "/v1/epoch")
    assert (status, body["error"]) == (401, "unauthorized")


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


async def test_a_log_end_comes_with_the_keys_of_the_entries_it_adds(api: Api) -> None:
    """After a crash between a commit and its publish the record lacks the entry: adopt
    with the log end alone is 400 naming `log_references` and the offset to send from,
    malformed ones are 400 naming the field, and with them the entry's key is held."""
    crashed = await Publishing(api.store).adopting("pub-b", "spare", log_end_offset=-1)
    for offset, key in enumerate(("k/a", "k/b")):
        async with crashed.fence("spare", 9, timeout_s=5) as fence:
            crashed.commit(fence.token, offset, [key])
        if offset == 0:
            await crashed.publish_now()  # offset 1 is in the log, in no record
    path = "/v1/partitions/spare/adopt"
    status, body = await api.call("POST", path, {"log_end_offset": 1})
    assert (status, body["error"]) == (400, "bad_request")
    assert "log_references, the object keys each log entry from offset 1" in body["message"]
    for bad in ({"offsets": [1]}, {"offsets": [1], "keys": ["a\nb"]}, ["k/b"]):
        status, body = await api.call("POST", path, {"log_end_offset": 1, "log_references": bad})
        assert (status, body["error"]) == (400, "bad_request"), body
        assert "'log_references'" in body["message"]
    alone = {"log_references": {"offsets": [1], "keys": ["k/b"]}}
    status, body = await api.call("POST", path, alone)
    assert (status, "goes with 'log_end_offset'" in body["message"]) == (400, True)
    assert api.publisher.state("spare")["log_end_known"] is False
    told = {"log_end_offset": 1, "log_references": {"offsets": [0, 1], "keys": ["k/a", "k/b"]}}
    status, state = await api.call("POST", path, told)
    assert (status, state["log_end_known"], state["references"]) == (200, True, 2)


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
        timeout_s=30,
        what="the HTTP fence to queue as a waiting slide",
    )
    api.publisher.abort_waiters()
    status, body = await request
    assert (status, body["error"]) == (503, "guard_closed")
    api.publisher.commit(holder, 0)


async def test_fence_table_forgets_ended_fences_after_the_horizon(api: Api) -> None:
    """Fences released behind the table's back are swept to the ended ones as the table
    grows, remembered for the horizon (a repeat is still answered), then forgotten."""
    now = [0.0]
    table = FenceTable(lambda: now[0], horizon_s=10.0)
    gone = []
    for _ in range(128):
        token = await api.publisher.acquire("orders/0", 5, 5)
        table.add(token)
        api.publisher.abort(token)  # released behind the table's back
        gone.append(token)
    live = await api.publisher.acquire("orders/0", 5, 5)
    table.add(live)
    assert table.get(gone[0].token) is gone[0]  # ended, within the horizon
    now[0] = 11.0
    with pytest.raises(UnknownFence):
        table.get(gone[0].token)
    assert table.get(live.token) is live


# -- tokens and roles ------------------------------------------------------------------


async def test_anonymous_reconciled_is_401_and_leaves_m_unchanged(secured: Api) -> None:
    """Without a token, or with an unknown one, reconciled is 401 with a Bearer challenge
    and M(p) and the reconciled offset do not move."""
    _, fence = await secured.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 9}, token=WRITER
    )
    await secured.call("POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0}, token=WRITER)
    before = secured.publisher.state("orders/0")
    url = URL(secured.base + "/v1/partitions/orders%2F0/reconciled", encoded=True)
    for headers in (
        {},
        {"Authorization": "Bearer not-a-token-0123456789"},
        {"Authorization": ADMIN},
    ):
        async with secured.session.post(url, json={"offset": 0}, headers=headers) as response:
            body = await response.json()
            assert (response.status, body["error"]) == (401, "unauthorized")
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert ADMIN not in body["message"]
    after = secured.publisher.state("orders/0")
    assert (after["watermark"], after["reconciled_offset"]) == (before["watermark"], None)


async def test_writer_token_on_reconciled_is_403(secured: Api) -> None:
    """A writer may fence and commit but not report reconciled (403); a reconciler may."""
    _, fence = await secured.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 9}, token=WRITER
    )
    status, _ = await secured.call(
        "POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0}, token=WRITER
    )
    assert status == 200
    status, body = await secured.call(
        "POST", "/v1/partitions/orders%2F0/reconciled", {"offset": 0}, token=WRITER
    )
    assert (status, body["error"]) == (403, "forbidden")
    assert "reconciler or admin" in body["message"]
    assert secured.publisher.state("orders/0")["reconciled_offset"] is None
    status, state = await secured.call(
        "POST", "/v1/partitions/orders%2F0/reconciled", {"offset": 0}, token=RECONCILER
    )
    assert (status, state["reconciled_offset"]) == (200, 0)
    status, body = await secured.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 9}, token=RECONCILER
    )
    assert (status, body["error"]) == (403, "forbidden")


async def test_adopt_needs_admin_and_a_bare_token_is_admin(secured: Api) -> None:
    """adopt is 403 for writer and reconciler tokens; admin and bare tokens may adopt."""
    for token in (WRITER, RECONCILER):
        status, body = await secured.call("POST", "/v1/partitions/spare/adopt", token=token)
        assert (status, body["error"]) == (403, "forbidden")
    assert secured.publisher.partitions == ["orders/0"]
    status, state = await secured.call("POST", "/v1/partitions/spare/adopt", token=BARE)
    assert (status, state["owner_epoch"]) == (200, 1)
    status, _ = await secured.call("POST", "/v1/partitions/spare/adopt", token=ADMIN)
    assert status == 200


async def test_partition_state_needs_any_token_and_health_and_metrics_stay_open(
    secured: Api,
) -> None:
    """GET of partition state (and unknown paths) is 401 without a token and 200 with any
    role's; /healthz, /readyz and /metrics answer without one and count the refusals."""
    for path in ("/v1/partitions", "/v1/partitions/orders%2F0", "/nowhere"):
        status, _ = await secured.call("GET", path)
        assert status == 401
    for token in (WRITER, RECONCILER, ADMIN):
        status, listing = await secured.call("GET", "/v1/partitions", token=token)
        assert (status, len(listing["partitions"])) == (200, 1)
    status, _ = await secured.call("GET", "/nowhere", token=WRITER)
    assert status == 404
    assert (await secured.call("GET", "/healthz"))[0] == 200
    assert (await secured.call("GET", "/readyz"))[0] == 503  # no publish yet, but it answers
    async with secured.session.get(secured.base + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    assert 'l0gc_watermark_http_refusals_total{reason="unauthorized"} 3.0' in text


# -- the fence's epoch -------------------------------------------------------------------


async def test_minus_zero_is_not_an_epoch_nor_an_offset(api: Api) -> None:
    """``{"epoch": -0}`` and ``{"offset": -0}`` are 400 naming -0 (they were taken as 0)."""
    for path, body in (
        ("/v1/partitions/orders%2F0/fence", b'{"epoch": -0}'),
        ("/v1/partitions/orders%2F0/reconciled", b'{"offset": -0}'),
    ):
        status, doc = await api.send(path, body, token=ADMIN)
        assert status == 400, doc
        assert "-0" in doc["message"], doc
    assert api.publisher.state("orders/0")["window"] == [5, 5]


async def test_fence_far_above_the_cluster_epoch_is_409_and_wedges_nothing(api: Api) -> None:
    """Epoch 10**17 is 409 epoch_ahead with the cluster epoch; the window does not move and
    the real writer's next fence and commit work; a value past int64 is 400."""
    status, body = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 10**17})
    assert (status, body["error"], body["cluster_epoch"]) == (409, "epoch_ahead", 9)
    assert api.publisher.state("orders/0")["window"] == [5, 5]
    status, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 9})
    assert (status, fence["window"]) == (200, [5, 9])
    status, state = await api.call("POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0})
    assert (status, state["last_applied_offset"]) == (200, 0)
    status, body = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 2**64})
    assert (status, body["error"]) == (400, "bad_request")


async def test_a_writer_that_saw_the_ticker_advance_is_not_refused(api: Api) -> None:
    """The publisher re-reads the cluster epoch before refusing: a fence at an epoch the
    publisher has not read yet is granted."""
    assert await api.publisher.read_cluster_epoch() == 9
    await api.store.advance_cluster_epoch()
    status, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 10})
    assert (status, fence["epoch"]) == (200, 10)


# -- bodies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested"),  # just under the 64 KiB limit
        (b'{"epoch": ' + b"[" * 50 + b"]" * 50 + b"}", "nested"),
        (b'{"epoch": 9, "epoch": 10}', "more than once"),
        (b'{"epoch": NaN}', "NaN"),
        (b'{"epoch": 1e400}', "too large"),
        (b'{"epoch": 9.0}', "JSON integer"),
        (b'{"epoch": 9, "timout_s": 1}', "'timout_s' is not taken"),
        (b'{"epoch": 9', "not JSON"),
        (b"\xff\xfe{}", "UTF-8"),
    ],
)
async def test_hostile_fence_bodies_are_400_not_500(api: Api, body: bytes, says: str) -> None:
    """Deep nesting, duplicate keys, NaN, overflowing or non-integer numbers, unknown
    fields and broken bytes are 400 bad_request saying why; the window does not move."""
    status, answer = await api.send("/v1/partitions/orders%2F0/fence", body)
    assert (status, answer["error"]) == (400, "bad_request")
    assert says in answer["message"]
    assert api.publisher.state("orders/0")["inflight_fences"] == 0


async def test_a_float_offset_is_400(api: Api) -> None:
    """A commit offset of 1.0 is not an integer: 400, and the fence stays held."""
    _, fence = await api.call("POST", "/v1/partitions/orders%2F0/fence", {"epoch": 9})
    status, body = await api.send(f"/v1/fences/{fence['token']}/commit", b'{"offset": 1.0}')
    assert (status, body["error"]) == (400, "bad_request")
    assert api.publisher.state("orders/0")["inflight_fences"] == 1


async def test_an_oversized_body_is_413(serve: Serve) -> None:
    """A body over the limit is 413 body_too_large, declared or chunked."""
    api = await serve(limits=HttpLimits(max_body_bytes=1024))
    padding = b" " * 2048
    status, body = await api.send("/v1/partitions/orders%2F0/fence", b'{"epoch": 9}' + padding)
    assert (status, body["error"]) == (413, "body_too_large")

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"epoch": 9}'
        yield padding

    url = URL(api.base + "/v1/partitions/orders%2F0/fence", encoded=True)
    async with api.session.post(url, data=chunks()) as response:
        assert response.status == 413


async def test_an_exception_in_a_handler_is_a_json_500_without_details(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a handler answers JSON 500 internal_error; neither the exception's text
    nor a traceback reaches the client, and the server keeps serving."""

    def broken(partition: str) -> dict[str, Any]:
        raise RuntimeError("secret detail of a bug")

    monkeypatch.setattr(api.publisher, "state", broken)
    url = URL(api.base + "/v1/partitions/orders%2F0", encoded=True)
    async with api.session.get(url) as response:
        assert response.status == 500
        assert response.content_type == "application/json"
        text = await response.text()
    assert '"internal_error"' in text
    assert "secret" not in text
    assert "Traceback" not in text
    monkeypatch.undo()
    assert (await api.call("GET", "/v1/partitions/orders%2F0"))[0] == 200


# -- slow and excess clients ---------------------------------------------------------------


async def open_slow(
    api: Api, count: int
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """Open `count` connections that each send part of a request head, then nothing."""
    port = URL(api.base).port
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for start in range(0, count, 100):
        batch = await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in range(min(100, count - start)))
        )
        for _, writer in batch:
            writer.write(b"POST /v1/partitions/orders%2F0/reconciled HTTP/1.1\r\nHost: x\r\n")
        slow.extend(batch)
    return slow


def close_all(slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    """Close the client side of every slow connection."""
    for _, writer in slow:
        writer.close()


async def test_slowloris_connections_are_closed_within_the_read_timeout(serve: Serve) -> None:
    """Clients that never finish their request head are closed by the server once the
    read timeout passes; a legitimate client is served meanwhile."""
    api = await serve(limits=HttpLimits(read_timeout_s=0.5))
    slow = await open_slow(api, 50)
    try:
        assert (await api.call("GET", "/v1/partitions/orders%2F0"))[0] == 200
        async with asyncio.timeout(5):  # the 0.5 s head timeout (docs/operations.md), 10x
            for reader, _ in slow:
                assert await reader.read() == b""  # EOF: the server closed it
    finally:
        close_all(slow)


async def test_a_trickled_body_is_408_and_closed(serve: Serve) -> None:
    """A client that sends its head but not its whole body gets 408 within the read
    timeout and the connection is closed after at most as long again (docs/operations.md,
    --http-read-timeout): 1 s here, 10 s allowed to a loaded machine."""
    api = await serve(limits=HttpLimits(read_timeout_s=0.5))
    reader, writer = await asyncio.open_connection("127.0.0.1", URL(api.base).port)
    try:
        writer.write(
            b"POST /v1/partitions/orders%2F0/fence HTTP/1.1\r\nHost: x\r\n"
            b'Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{"epoch": '
        )
        async with asyncio.timeout(10):
            answer = await reader.read()
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert b'"request_timeout"' in answer


async def test_1500_slow_sockets_do_not_starve_a_legitimate_client(serve: Serve) -> None:
    """With 1,500 connections holding partial request heads open, a legitimate client
    is served while they hold them: not after the server gave up on them (their head
    timeout, 120 s, is far beyond this test; none is counted as timed out)."""
    api = await serve(
        limits=HttpLimits(
            max_connections=2000,
            read_timeout_s=120,
            max_connections_per_peer=2000,
            head_timeout_s=120,
        )
    )
    slow = await open_slow(api, 1500)
    try:
        await wait_until(
            lambda: api.server.open_connections >= 1500,
            timeout_s=30,
            what="the server to hold the 1,500 slow connections",
        )
        status, state = await api.call("GET", "/v1/partitions/orders%2F0")
        assert (status, state["partition"]) == (200, "orders/0")
        assert api.server.open_connections >= 1500  # the slow ones still held
        timed_out = api.publisher.metrics.http_refusals.labels(reason="head_timeout")
        assert timed_out._value.get() == 0
    finally:
        close_all(slow)


async def test_connections_over_the_cap_are_refused_at_once(serve: Serve) -> None:
    """With max_connections open, a new connection gets 503 and is closed at once, while
    the slow ones still hold their places (the refusal is counted); once they go,
    legitimate clients are served again. The slow ones' head timeout (120 s) is far
    beyond this test: none of them is closed by the server meanwhile."""
    api = await serve(
        limits=HttpLimits(
            max_connections=10, read_timeout_s=120, head_timeout_s=120, probe_reserve=0
        )
    )
    slow = await open_slow(api, 10)
    try:
        await wait_until(
            lambda: api.server.open_connections == 10,
            timeout_s=30,
            what="the server to hold the 10 slow connections",
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", URL(api.base).port)
        async with asyncio.timeout(60):  # a hang guard: one admitted would wait 120 s
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"too_many_connections" in answer
        assert api.server.open_connections == 10  # refused without waiting for a place
    finally:
        close_all(slow)
    await wait_until(
        lambda: api.server.open_connections == 0,
        timeout_s=30,
        what="the server to see the slow connections closed",
    )
    assert (await api.call("GET", "/v1/partitions/orders%2F0"))[0] == 200
    refused = api.publisher.metrics.http_refusals.labels(reason="too_many_connections")
    assert refused._value.get() == 1


# -- TLS -------------------------------------------------------------------------------------


@dataclass
class Pki:
    """PEM files of a CA, a server certificate for 127.0.0.1, a client certificate from
    that CA and one from another CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A CA with a server and a client certificate, and a client of a rogue CA."""
    ca = issue(tmp_path, "ca", None)
    issue(tmp_path, "server", ca)
    issue(tmp_path, "client", ca)
    issue(tmp_path, "rogue", issue(tmp_path, "rogue-ca", None))
    return Pki(
        *(tmp_path / f"{n}.pem" for n in ("ca", "server")),
        tmp_path / "server-key.pem",
        tmp_path / "client.pem",
        tmp_path / "client-key.pem",
        tmp_path / "rogue.pem",
        tmp_path / "rogue-key.pem",
    )


def client_context(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client context trusting the test CA, presenting `cert` if given."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


async def test_https_serves_the_api(serve: Serve, pki: Pki) -> None:
    """With a certificate and key the API speaks HTTPS; a plain HTTP client gets nothing."""
    context = server_ssl_context(str(pki.server_cert), str(pki.server_key), None)
    api = await serve(ssl_context=context, client_ssl=client_context(pki))
    status, state = await api.call("GET", "/v1/partitions/orders%2F0")
    assert (status, state["partition"]) == (200, "orders/0")
    plain = api.base.replace("https://", "http://")
    with pytest.raises(aiohttp.ClientError):
        async with api.session.get(plain + "/healthz") as response:
            await response.read()


async def test_mutual_tls_admits_only_clients_of_the_ca_as_admin(serve: Serve, pki: Pki) -> None:
    """With a client CA and no tokens, a client with a certificate from that CA is admin
    (it may adopt); without a certificate, or with one from another CA, the handshake fails."""
    context = server_ssl_context(str(pki.server_cert), str(pki.server_key), str(pki.ca))
    api = await serve(
        ssl_context=context, client_ssl=client_context(pki, pki.client_cert, pki.client_key)
    )
    status, state = await api.call("POST", "/v1/partitions/spare/adopt")
    assert (status, state["partition"]) == (200, "spare")
    for cert, key in ((None, None), (pki.rogue_cert, pki.rogue_key)):
        connector = aiohttp.TCPConnector(ssl=client_context(pki, cert, key))
        async with aiohttp.ClientSession(connector=connector) as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.get(api.base + "/v1/partitions") as response:
                    await response.read()


async def test_mutual_tls_with_tokens_lets_the_token_decide(serve: Serve, pki: Pki) -> None:
    """With a client CA and a token file, a verified client still needs a token, and its
    role decides: a writer token may not adopt."""
    context = server_ssl_context(str(pki.server_cert), str(pki.server_key), str(pki.ca))
    api = await serve(
        tokens=TOKEN_FILE,
        ssl_context=context,
        client_ssl=client_context(pki, pki.client_cert, pki.client_key),
    )
    assert (await api.call("POST", "/v1/partitions/spare/adopt"))[0] == 401
    assert (await api.call("POST", "/v1/partitions/spare/adopt", token=WRITER))[0] == 403
    assert (await api.call("POST", "/v1/partitions/spare/adopt", token=ADMIN))[0] == 200


def test_tls_files_are_checked_with_their_paths(pki: Pki, tmp_path: Path) -> None:
    """A missing or unreadable TLS file, a lone cert or key, or a client CA without a
    certificate is a ConfigError naming the flag and the path."""
    cert, key, ca = str(pki.server_cert), str(pki.server_key), str(pki.ca)
    missing = str(tmp_path / "nope.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        ((missing, key, None), f"--tls-cert-file {missing}"),
        ((cert, missing, None), f"--tls-key-file {missing}"),
        ((cert, key, missing), f"--tls-client-ca-file {missing}"),
        ((cert, None, None), "--tls-cert-file was given alone"),
        ((None, None, ca), f"--tls-client-ca-file {ca} needs --tls-cert-file"),
        ((str(garbage), key, None), f"--tls-cert-file {garbage}"),
        ((cert, key, str(garbage)), f"--tls-client-ca-file {garbage}"),
        ((cert, str(pki.client_key), None), "cannot load the certificate and key"),
    ]
    for files, says in cases:
        with pytest.raises(ConfigError, match=says):
            server_ssl_context(*files)
    assert server_ssl_context(None, None, None) is None
    context = server_ssl_context(cert, key, ca)
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED


# -- batches ------------------------------------------------------------------------------


async def hosting_three(api: Api) -> None:
    """orders/0 plus orders/1 and orders/2 hosted (all at cluster epoch 9)."""
    for name in ("orders/1", "orders/2"):
        await api.store.register_partition(name)
        await api.publisher.adopt(name)


async def test_one_request_fences_every_partition_and_one_commits_them(api: Api) -> None:
    """A batch fence answers per partition in order; a batch commit applies every entry;
    the partitions end exactly as after single requests."""
    await hosting_three(api)
    entries = [{"partition": p, "epoch": 9} for p in ("orders/2", "orders/0", "orders/1")]
    status, doc = await api.call("POST", "/v1/fences", {"fences": entries})
    assert status == 200
    results = doc["results"]
    assert [r["partition"] for r in results] == ["orders/2", "orders/0", "orders/1"]
    assert all(r["status"] == 200 and r["epoch"] == 9 and r["expires_in_s"] > 0 for r in results)
    commits = [{"token": r["token"], "offset": 0} for r in results]
    status, doc = await api.call("POST", "/v1/commits", {"commits": commits})
    assert status == 200
    assert doc["results"] == [
        {"status": 200, "partition": p, "offset": 0, "repeat": False}
        for p in ("orders/2", "orders/0", "orders/1")
    ]
    for name in ("orders/0", "orders/1", "orders/2"):
        state = api.publisher.state(name)
        assert (state["last_applied_offset"], state["inflight_fences"]) == (0, 0)


async def test_each_batch_entry_gets_the_single_routes_answer(api: Api) -> None:
    """Mixed outcomes in one batch: granted, stale_epoch (with window and floor),
    epoch_ahead, not_registered; commits: ok, a repeat, another offset, illegal_offset (fence
    released), unknown_fence."""
    await hosting_three(api)
    await api.call("POST", "/v1/partitions/orders%2F1/fence", {"epoch": 9})  # slides to [9, 9]
    fences = [
        {"partition": "orders/0", "epoch": 9},
        {"partition": "orders/1", "epoch": 5},
        {"partition": "orders/2", "epoch": 10},
        {"partition": "nowhere", "epoch": 9},
    ]
    _, doc = await api.call("POST", "/v1/fences", {"fences": fences})
    ok, stale, ahead, missing = doc["results"]
    single_status, single = await api.call("POST", "/v1/partitions/orders%2F1/fence", {"epoch": 5})
    assert ok["status"] == 200
    assert (
        (stale["status"], stale["error"])
        == (single_status, single["error"])
        == (409, "stale_epoch")
    )
    assert stale["window"] == single["window"]
    assert stale["floor"] == single["floor"]
    assert (ahead["status"], ahead["error"], ahead["cluster_epoch"]) == (409, "epoch_ahead", 9)
    assert (missing["status"], missing["error"], missing["partition"]) == (
        404,
        "not_registered",
        "nowhere",
    )
    commits = [
        {"token": ok["token"], "offset": 0},
        {"token": ok["token"], "offset": 0},  # a repeat: success again
        {"token": ok["token"], "offset": 1},  # another offset: refused
        {"token": "no-such-token", "offset": 1},
    ]
    _, doc = await api.call("POST", "/v1/commits", {"commits": commits})
    assert [r["status"] for r in doc["results"]] == [200, 200, 409, 404]
    assert [doc["results"][0]["repeat"], doc["results"][1]["repeat"]] == [False, True]
    assert doc["results"][2]["error"] == "already_committed"
    assert doc["results"][3]["error"] == "unknown_fence"
    _, again = await api.call("POST", "/v1/fences", {"fences": [fences[0]]})
    held = again["results"][0]["token"]
    _, doc = await api.call("POST", "/v1/commits", {"commits": [{"token": held, "offset": 0}]})
    assert (doc["results"][0]["status"], doc["results"][0]["error"]) == (409, "illegal_offset")
    assert api.publisher.state("orders/0")["inflight_fences"] == 0  # released
    _, doc = await api.call("POST", "/v1/commits", {"commits": [{"token": held, "offset": 1}]})
    assert (doc["results"][0]["status"], doc["results"][0]["error"]) == (410, "fence_expired")


async def test_batches_need_a_writer_token(secured: Api) -> None:
    """Both batch routes are writer routes: anonymous 401, reconciler 403, writer 200."""
    body = {"fences": [{"partition": "orders/0", "epoch": 9}]}
    assert (await secured.call("POST", "/v1/fences", body))[0] == 401
    assert (await secured.call("POST", "/v1/fences", body, token=RECONCILER))[0] == 403
    status, doc = await secured.call("POST", "/v1/fences", body, token=WRITER)
    assert status == 200
    commit = {"commits": [{"token": doc["results"][0]["token"], "offset": 0}]}
    assert (await secured.call("POST", "/v1/commits", commit, token=RECONCILER))[0] == 403
    assert (await secured.call("POST", "/v1/commits", commit, token=WRITER))[0] == 200
    assert secured.publisher.state("orders/0")["last_applied_offset"] == 0


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"fences": []}, "non-empty list"),
        ({"fences": {"partition": "orders/0"}}, "non-empty list"),
        ({"fences": [{"partition": "orders/0"}]}, "exactly the fields"),
        ({"fences": [{"partition": "orders/0", "epoch": 9, "x": 1}]}, "exactly the fields"),
        ({"fences": [{"partition": 7, "epoch": 9}]}, "non-empty string"),
        ({"fences": [{"partition": "orders/0", "epoch": -1}]}, "fences[0].'epoch'"),
        ({"fences": [{"partition": "orders/0", "epoch": True}]}, "JSON integer"),
        (
            {"fences": [{"partition": "p", "epoch": 9}, {"partition": "p", "epoch": 9}]},
            "appears twice",
        ),
        ({"fences": [{"partition": "orders/0", "epoch": 9}], "timeout_s": 0}, "timeout_s"),
        ({"commits": [{"token": "t", "offset": 1.0}]}, "JSON integer"),
        ({"commits": [{"token": "", "offset": 1}]}, "non-empty string"),
        ({"commits": [["t", 1]]}, "exactly the fields"),
    ],
)
async def test_a_malformed_batch_is_400_and_applies_nothing(
    api: Api, body: dict[str, Any], fragment: str
) -> None:
    """A hostile batch body is refused as a whole (400, naming what is wrong), never 500,
    and no entry of it takes effect."""
    path = "/v1/fences" if "fences" in body else "/v1/commits"
    status, doc = await api.call("POST", path, body)
    assert (status, doc["error"]) == (400, "bad_request"), doc
    assert fragment in doc["message"]
    assert api.publisher.state("orders/0")["inflight_fences"] == 0


async def test_a_batch_over_the_limits_is_413_naming_them(serve: Serve) -> None:
    """More entries than max_batch_entries, or more bytes than max_batch_body_bytes: 413."""
    api = await serve(limits=HttpLimits(max_batch_entries=3, max_batch_body_bytes=70_000))
    entries = [{"partition": f"p{i}", "epoch": 9} for i in range(4)]
    status, doc = await api.call("POST", "/v1/fences", {"fences": entries})
    assert (status, doc["error"]) == (413, "batch_too_large")
    assert "the limit is 3 per request" in doc["message"]
    padded = {"commits": [{"token": "x" * 80_000, "offset": 1}]}
    status, doc = await api.call("POST", "/v1/commits", padded)
    assert (status, doc["error"]) == (413, "body_too_large")
    status, doc = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 9, "timeout_s": 1, "x": "y" * 66_000}
    )
    assert (status, doc["error"]) == (413, "body_too_large")  # single routes keep 64 KiB
