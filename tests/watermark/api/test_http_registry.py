"""Partitions registered and deregistered over HTTP (issue 42), and a typo'd partition
answered ``not_registered`` (stop) instead of ``not_hosted`` (retry): a real socket on
127.0.0.1, the store on an in-memory etcd."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from yarl import URL

from l0gc.auth import parse_token_file
from l0gc.contract.kv import Delete
from l0gc.etcd.store import WatermarkStore
from tests.publishing import api_on_loopback, new_publishing
from watermark.api.http_api import create_app
from watermark.api.http_registry import REGISTRY, Registry
from watermark.api.openapi_errors import ERROR_CODES
from watermark.service.publisher import Publisher
from watermark.service.replicas import ReplicaSet, ReplicaSettings

WRITER = "writer-token-0123456789abcdef"
REGISTRAR = "registrar-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
TOKENS = f"writer:{WRITER}\nregistrar:{REGISTRAR}\nadmin:{ADMIN}\n"


@dataclass
class Api:
    base: str
    session: aiohttp.ClientSession
    publisher: Publisher
    store: WatermarkStore

    async def call(
        self, method: str, path: str, body: Any = None, *, token: str = ADMIN
    ) -> tuple[int, Any]:
        """(status, JSON body) of one request with bearer `token`."""
        url = URL(self.base + path, encoded=True)
        headers = {"Authorization": f"Bearer {token}"}
        async with self.session.request(method, url, json=body, headers=headers) as response:
            return response.status, await response.json()


async def _serve(replicated: tuple[str, ...] | None = None) -> AsyncIterator[Api]:
    """A publisher hosting 'orders/0' ('spare' registered, not hosted) behind the API with
    writer, registrar and admin tokens; a forced deregister waits 0.05 s, not 5 s. With
    `replicated`, it is a replica whose --partitions list is that."""
    async with AsyncExitStack() as stack:
        world = await new_publishing(namespace="/l0gc/registry", registered=("orders/0", "spare"))
        store = world.store
        publisher = await world.adopting("pub-a", "orders/0")
        tokens = parse_token_file(TOKENS)
        app = create_app(publisher, tokens=lambda: tokens)
        check = None
        if replicated is not None:
            settings = ReplicaSettings("pub-a", "http://pub-a.test:8080", replicated)
            check = ReplicaSet(store, store.kv, publisher, settings).check_served
        app[REGISTRY] = Registry(
            publisher, replicated=replicated is not None, revoke_wait_s=0.05, check_served=check
        )
        _, port = await api_on_loopback(stack, app, metrics=publisher.metrics)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        yield Api(f"http://127.0.0.1:{port}", session, publisher, store)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    """See `_serve`: one publisher, no replicas."""
    async for served in _serve():
        yield served


@pytest.fixture
async def replica_api() -> AsyncIterator[Api]:
    """See `_serve`: a replica whose list is orders/0 and orders/1."""
    async for served in _serve(("orders/0", "orders/1")):
        yield served


async def test_a_typo_is_not_registered_and_a_registered_unhosted_one_is_not_hosted(
    api: Api,
) -> None:
    """fence, state, owner and a fence batch entry of a partition etcd has no record of
    answer 404 not_registered with action stop; 'spare' (registered, hosted elsewhere
    or nowhere) stays not_hosted (retry)."""
    assert ERROR_CODES["not_registered"].action == "stop"
    for method, path, body in (
        ("POST", "/v1/partitions/ordrs%2F0/fence", {"epoch": 5}),
        ("GET", "/v1/partitions/ordrs%2F0", None),
        ("GET", "/v1/partitions/ordrs%2F0/owner", None),
    ):
        status, doc = await api.call(method, path, body, token=WRITER)
        assert (status, doc["error"]) == (404, "not_registered"), path
        assert "'ordrs/0' is not registered" in doc["message"]
    status, doc = await api.call("POST", "/v1/partitions/spare/fence", {"epoch": 5}, token=WRITER)
    assert (status, doc["error"]) == (404, "not_hosted")
    batch = {
        "fences": [
            {"partition": "ordrs/0", "epoch": 5},
            {"partition": "spare", "epoch": 5},
            {"partition": "orders/0", "epoch": 5},
        ]
    }
    _, doc = await api.call("POST", "/v1/fences", batch, token=WRITER)
    assert [r.get("error") for r in doc["results"]] == ["not_registered", "not_hosted", None]


async def test_a_commit_after_the_record_is_gone_is_not_registered(api: Api) -> None:
    """A fence whose partition was deregistered and dropped meanwhile: its commit is 410
    fence_expired (refence), and the fence again is not_registered (stop), not a retry
    loop."""
    _, granted = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5}, token=WRITER
    )
    assert await api.store.deregister_partition("orders/0")
    api.publisher.drop("orders/0", "test: record deleted")
    status, doc = await api.call(
        "POST", f"/v1/fences/{granted['token']}/commit", {"offset": 0}, token=WRITER
    )
    assert (status, doc["error"]) == (410, "fence_expired"), doc
    status, doc = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5}, token=WRITER
    )
    assert (status, doc["error"]) == (404, "not_registered")


async def test_a_registrar_registers_and_the_writer_fences_at_once(api: Api) -> None:
    """register creates the record (M = epoch - 1) and hosts it here; a repeat changes
    nothing; a writer may not register; the new partition is fenced straight away."""
    status, doc = await api.call("POST", "/v1/partitions/orders%2F7/register", token=WRITER)
    assert (status, doc["error"]) == (403, "forbidden")
    status, doc = await api.call("POST", "/v1/partitions/orders%2F7/register", token=REGISTRAR)
    assert status == 200, doc
    assert (doc["partition"], doc["registered"], doc["hosted"]) == ("orders/7", True, True)
    assert (doc["record"]["watermark"], doc["record"]["created_epoch"]) == (4, 5)
    record = await api.store.get_partition("orders/7")
    assert record is not None
    assert record.owner == "pub-a"
    status, again = await api.call("POST", "/v1/partitions/orders%2F7/register", token=REGISTRAR)
    assert (status, again["registered"], again["hosted"]) == (200, False, True)
    status, fence = await api.call(
        "POST", "/v1/partitions/orders%2F7/fence", {"epoch": 5}, token=WRITER
    )
    assert status == 200, fence
    status, doc = await api.call("POST", "/v1/partitions/bad%01name/register", token=REGISTRAR)
    assert (status, doc["error"]) == (400, "bad_request")
    assert "'bad\\x01name' is not valid" in doc["message"]
    status, doc = await api.call("POST", "/v1/partitions/orders%2F..%2F7/register", token=REGISTRAR)
    assert (status, doc["error"]) == (400, "bad_request"), doc
    assert "'.' or '..' segment" in doc["message"]


async def test_register_leaves_a_partition_another_publisher_owns(api: Api) -> None:
    """A registered partition owned by someone else is not taken over (hosted false)."""
    await api.store.acquire_ownership("spare", "pub-b")
    status, doc = await api.call("POST", "/v1/partitions/spare/register", token=REGISTRAR)
    assert (status, doc["registered"], doc["hosted"]) == (200, False, False)
    record = await api.store.get_partition("spare")
    assert record is not None
    assert (record.owner, record.owner_epoch) == ("pub-b", 1)


async def test_deregister_keeps_the_live_owner_rule(api: Api) -> None:
    """An unowned partition is deregistered (then absent: false); the hosted one is
    refused 409 live_owner (stop) without force; force is admin-only, and revokes the
    owner before the record is deleted."""
    status, doc = await api.call("POST", "/v1/partitions/spare/deregister", token=REGISTRAR)
    assert (status, doc["deregistered"]) == (200, True)
    assert await api.store.get_partition("spare") is None
    status, doc = await api.call("POST", "/v1/partitions/spare/deregister", {}, token=REGISTRAR)
    assert (status, doc["deregistered"]) == (200, False)
    status, doc = await api.call("POST", "/v1/partitions/orders%2F0/deregister", token=REGISTRAR)
    assert (status, doc["error"]) == (409, "live_owner")
    assert ERROR_CODES["live_owner"].action == "stop"
    assert "owner 'pub-a'" in doc["message"]
    assert await api.store.get_partition("orders/0") is not None
    forced = {"force": True, "reason": "topic deleted"}
    status, doc = await api.call(
        "POST", "/v1/partitions/orders%2F0/deregister", forced, token=REGISTRAR
    )
    assert (status, doc["error"]) == (403, "forbidden")
    status, doc = await api.call(
        "POST", "/v1/partitions/orders%2F0/deregister", forced, token=WRITER
    )
    assert status == 403
    started = time.monotonic()
    status, doc = await api.call("POST", "/v1/partitions/orders%2F0/deregister", forced)
    assert (status, doc["deregistered"]) == (200, True), doc
    assert time.monotonic() - started >= 0.05  # the revoke wait was honoured
    assert await api.store.get_partition("orders/0") is None
    await api.publisher.check_records()  # the owner's round: it sees its record gone
    status, doc = await api.call(
        "POST", "/v1/partitions/orders%2F0/fence", {"epoch": 5}, token=WRITER
    )
    assert (status, doc["error"]) == (404, "not_registered")


async def test_a_register_that_adopts_between_deregisters_check_and_delete_wins(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51 (3): a deregister checked 'spare' (no owner), then a register hosted it
    here before the delete. The delete used to re-read and delete the now-owned record
    (7 of 40 real races: a fence and a commit answered 200 on a partition whose record
    was gone, and the next sweep deleted the committed object). Now the delete is
    compared against the record that was checked, the changed record is checked again,
    and the deregister is refused 409 live_owner: the record stays, the writer commits."""
    kv = api.store.kv
    real_txn = kv.txn
    raced: list[str] = []

    async def register_lands_first(compares: Any, ops: Any) -> Any:
        if any(isinstance(op, Delete) for op in ops) and not raced:
            raced.append("adopted")
            await api.publisher.adopt("spare")  # what the register's adopt does
        return await real_txn(compares, ops)

    monkeypatch.setattr(kv, "txn", register_lands_first)
    status, doc = await api.call("POST", "/v1/partitions/spare/deregister", token=REGISTRAR)
    assert raced == ["adopted"]
    assert (status, doc["error"]) == (409, "live_owner"), doc
    record = await api.store.get_partition("spare")
    assert record is not None
    assert record.owner == "pub-a"
    status, fence = await api.call("POST", "/v1/partitions/spare/fence", {"epoch": 5}, token=WRITER)
    assert status == 200, fence
    status, doc = await api.call(
        "POST", f"/v1/fences/{fence['token']}/commit", {"offset": 0}, token=WRITER
    )
    assert status == 200, doc
    assert await api.store.get_partition("spare") is not None


async def test_deregister_bodies_are_strict(api: Api) -> None:
    """force must be a boolean, reason a short string, and nothing else is taken."""
    for body in ({"force": "yes"}, {"reason": 3}, {"reason": "x" * 1001}, {"other": 1}):
        status, doc = await api.call("POST", "/v1/partitions/spare/deregister", body)
        assert (status, doc["error"]) == (400, "bad_request"), body
    assert await api.store.get_partition("spare") is not None


async def test_hosted_partitions_are_listed_as_numbers(api: Api) -> None:
    """GET /v1/partitions lists orders/2 before orders/10 (natural order)."""
    for name in ("orders/10", "orders/2"):
        status, _ = await api.call("POST", f"/v1/partitions/{name.replace('/', '%2F')}/register")
        assert status == 200
    _, listing = await api.call("GET", "/v1/partitions")
    assert [p["partition"] for p in listing["partitions"]] == ["orders/0", "orders/2", "orders/10"]


async def test_replicas_refuse_a_name_outside_their_list_and_register_one_inside(
    replica_api: Api,
) -> None:
    """Issue 55: among replicas (which host only their --partitions list), registering
    any other name is 409 not_served, naming the list, and writes no record (a record
    nobody hosts would hold GC back); a name of the list is registered, for the replicas
    to claim."""
    api = replica_api
    status, doc = await api.call("POST", "/v1/partitions/payments%2F0/register", token=REGISTRAR)
    assert (status, doc["error"]) == (409, "not_served"), doc
    assert "'payments/0' is not among the partitions" in doc["message"]
    assert "(orders/0, orders/1)" in doc["message"]
    assert await api.store.get_partition("payments/0") is None
    status, doc = await api.call("POST", "/v1/partitions/orders%2F1/register", token=REGISTRAR)
    assert (status, doc["registered"], doc["hosted"]) == (200, True, False), doc
    assert await api.store.get_partition("orders/1") is not None
