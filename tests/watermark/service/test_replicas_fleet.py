"""A forged member record cannot pull partitions away nor receive writers' tokens
(issue 25, finding 3): real etcd, two real `watermark serve --replicated` processes
with --fleet-urls, and a listener standing in for the attacker.

Before any replica starts, someone with write access to ``{ns}/replicas/`` announces a
member at ``http://127.0.0.2:PORT`` (outside the fleet, ``http://127.0.0.1:*``) on a
lease they keep alive, and claims two partitions on it. The replicas ignore the member
(logged, counted), remove its claims, and own every partition between themselves as
rendezvous hashing over the two of them says; no answer redirects to the forged
address, and the attacker's listener receives no request.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from l0gc.contract.kv import Put
from l0gc.contract.members import ClaimRecord, MemberRecord
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_replicas import LocalReplicas, OwnerClient
from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

PARTITIONS = [f"p/{n}" for n in range(6)]


@pytest.fixture
async def attacker() -> AsyncIterator[tuple[str, list[str]]]:
    """A server on 127.0.0.2 that grants anything and records the tokens it is sent."""
    seen: list[str] = []

    async def grant(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"token": "fake", "granted": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", grant)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.2", port)
    await site.start()
    try:
        yield f"http://127.0.0.2:{port}", seen
    finally:
        await runner.cleanup()


async def test_a_forged_member_gets_no_partition_and_no_redirect(
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    attacker: tuple[str, list[str]],
) -> None:
    forged_url, seen = attacker
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    stop = asyncio.Event()
    replicas = LocalReplicas(
        [etcd_server.endpoint], namespace, PARTITIONS, tmp_path, fleet_urls="http://127.0.0.1:*"
    )
    try:
        lease = await kv.lease_grant(5)

        async def keep_alive() -> None:
            while not stop.is_set():  # refresh the forged member's lease until told to stop
                await kv.lease_refresh(lease)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1)

        keeper = asyncio.create_task(keep_alive())
        forged = MemberRecord("zz-forged", forged_url, frozenset(PARTITIONS))
        prefix = f"{namespace}/replicas/"
        claim = ClaimRecord("zz-forged", lease).encode()
        await kv.txn(
            [],
            [
                Put(prefix + "members/zz-forged", forged.encode(time.time()), lease),
                Put(prefix + "claims/p/0", claim, lease),
                Put(prefix + "claims/p/1", claim, lease),
            ],
        )

        await asyncio.to_thread(replicas.start, "a")
        await asyncio.to_thread(replicas.start, "b")
        token = replicas.tokens["writer"]
        store = WatermarkStore(kv, namespace)
        async with aiohttp.ClientSession() as session:
            expected = {p: [name] for p, name in replicas.assigned().items()}

            async def settled() -> bool:
                return await replicas.hosted(session, token) == expected

            await wait_until(settled, timeout_s=30, what="the two replicas to own everything")
            left = {item.key for item in (await kv.range_prefix(prefix + "claims/")).items}
            assert left == {prefix + "claims/" + p for p in PARTITIONS}  # forged ones replaced
            epoch = await store.get_cluster_epoch()
            headers = {"Authorization": f"Bearer {token}"}
            for partition in PARTITIONS:
                for base in replicas.urls():
                    url = f"{base}/v1/partitions/{urllib.parse.quote(partition, safe='')}/fence"
                    async with session.post(
                        url, json={"epoch": epoch}, headers=headers, allow_redirects=False
                    ) as answer:
                        location = answer.headers.get("Location", "")
                        assert answer.status in (200, 307), await answer.text()
                        if answer.status == 307:
                            assert location.startswith(tuple(replicas.urls())), location
                        else:
                            fence = (await answer.json())["token"]
                            abort = f"{base}/v1/fences/{fence}/abort"
                            async with session.post(abort, headers=headers) as aborted:
                                assert aborted.status == 200
            client = OwnerClient(session, replicas.urls, token, rng=random.Random(7))
            for partition in PARTITIONS:
                found = await client.call(partition, "/fence", {"epoch": epoch})
                assert found.status == 200, found.trail
                assert found.base in replicas.urls()
                abort = f"/v1/fences/{found.doc['token']}/abort"
                assert (await client.at(found.base, abort, {})).status == 200
            assert client.refused_redirects == []
            assert seen == []  # no token ever reached the forged address
            for base in replicas.urls():
                async with session.get(f"{base}/metrics") as answer:
                    text = await answer.text()
                ignored = re.search(r"l0gc_watermark_members_ignored_total ([0-9.]+)", text)
                assert ignored is not None
                assert float(ignored.group(1)) >= 1
        assert "watermark.replica_member_ignored" in replicas.logs()
        stop.set()
        await keeper
    finally:
        stop.set()
        await asyncio.to_thread(replicas.stop_all, 15.0)
        await kv.close()
