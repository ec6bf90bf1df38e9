"""Writers reach every partition of a replicated fleet given one address and the fleet's
pattern (issue 36, item 5).

On Kubernetes the chart's publishers are a StatefulSet: every replica advertises its
stable name (``l0gc-publisher-N.l0gc-publisher-peers.NS.svc...:8080``) and writers are
pointed at the Service. The owner of a partition answers 307 with its own address, and
a client that only trusts its configured set refuses every partition the Service's pick
does not own. Here three real `watermark serve --replicated` replicas listen on one port
of 127.0.0.2, 127.0.0.3 and 127.0.0.4 (standing in for the pods' names), with
``--fleet-urls http://127.0.0.0/29:PORT`` as the chart passes its pattern; writers are
given replica 127.0.0.2 alone (the Service).

- Without the fleet, the clients refuse every partition owned elsewhere (the issue as
  reported: ``RedirectRefused`` on about 2/3 of them).
- With the fleet pattern, both clients fence and commit every partition, at its owner.
- A 307 to a member outside the pattern (127.0.0.9, on the same port) is still refused,
  and the listener there receives no request, no token.
- The Node example (``L0GC_FLEET``) does the same.

Named by behaviour, not module: both writer clients (client.aio, client.sync) alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from l0lab.testing.local_replicas import LocalReplicas
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from l0lab.testing.procs import child_env
from tests.waiting import wait_until
from watermark import ApiError, AsyncWriterClient, RedirectRefused, Retry, WriterClient

pytestmark = pytest.mark.integration

PARTITIONS = [f"orders/{n}" for n in range(16)]
HOSTS = {"r0": "127.0.0.2", "r1": "127.0.0.3", "r2": "127.0.0.4"}
FORGER, ATTACKER = "127.0.0.5", "127.0.0.9"
FAST = Retry(attempts=4, first_pause_s=0.05, max_pause_s=0.2)
WRITER_JS = Path(__file__).resolve().parents[3] / "examples" / "node-writer" / "writer.mjs"
NODE = shutil.which("node")


def _common_port() -> int:
    """A port free on every address the test listens on."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
            port = int(probe.getsockname()[1])
        try:
            for host in (*HOSTS.values(), FORGER, ATTACKER):
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on 127.0.0.2-9")


@pytest.fixture
async def fleet(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> AsyncIterator[tuple[LocalReplicas, int]]:
    """Three replicas on 127.0.0.2-4, one port, --fleet-urls http://127.0.0.0/29:PORT,
    each owning the partitions rendezvous hashing gives it."""
    for attempt in range(3):
        # The port was free when picked; another xdist worker's server may take it before
        # the replicas bind. Only that ("address already in use") is retried, on a new port.
        port = _common_port()
        run_dir = tmp_path / f"attempt-{attempt}"
        run_dir.mkdir()
        replicas = LocalReplicas(
            [etcd_server.endpoint],
            namespace,
            PARTITIONS,
            run_dir,
            tick_interval_s=3600,
            fleet_urls=f"http://127.0.0.0/29:{port}",
        )
        try:
            for name, host in HOSTS.items():
                await asyncio.to_thread(replicas.start, name, host=host, port=port)
            break
        except RuntimeError as exc:
            await asyncio.to_thread(replicas.stop_all, 15.0)
            if "address already in use" not in str(exc).lower() or attempt == 2:
                raise
    try:
        token = replicas.tokens["writer"]
        async with aiohttp.ClientSession() as session:
            expected = {p: [name] for p, name in replicas.assigned().items()}

            async def settled() -> bool:
                return await replicas.hosted(session, token) == expected

            await wait_until(
                settled, timeout_s=30, what="each replica to own its share", detail=replicas.logs
            )
        yield replicas, port
    finally:
        await asyncio.to_thread(replicas.stop_all, 15.0)


@pytest.fixture
async def forged(fleet: tuple[LocalReplicas, int]) -> AsyncIterator[tuple[dict[str, str], list]]:
    """A server on 127.0.0.5 answering every request with 307 to `targets["to"]`, and an
    attacker on 127.0.0.9 (same port as the replicas) recording what it is sent."""
    _, port = fleet
    targets = {"to": ""}
    seen: list[str | None] = []

    async def forge(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": "moved", "message": "owned elsewhere"},
            status=307,
            headers={"Location": targets["to"] + request.path_qs},
        )

    async def steal(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"token": "fake"})

    runners = []
    for host, handler in ((FORGER, forge), (ATTACKER, steal)):
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        runners.append(runner)
    try:
        yield targets, seen
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_a_writer_given_the_service_and_the_fleet_reaches_every_partition(
    fleet: tuple[LocalReplicas, int],
) -> None:
    replicas, port = fleet
    service = replicas.procs["r0"].url
    pattern = f"http://127.0.0.0/29:{port}"
    token = replicas.tokens["writer"]
    owners = {p: replicas.procs[name].url for p, name in replicas.assigned().items()}
    elsewhere = sorted(p for p, url in owners.items() if url != service)
    assert elsewhere
    assert len(set(owners.values())) == 3

    def without_fleet() -> list[str]:
        refused = []
        with WriterClient([service], token=token, retry=FAST) as plain:
            epoch = plain.epoch().stamp(PARTITIONS)
            for partition in PARTITIONS:
                try:
                    plain.abort(plain.fence(partition, epoch))
                except RedirectRefused:
                    refused.append(partition)
        return refused

    assert sorted(await asyncio.to_thread(without_fleet)) == elsewhere  # the issue as reported

    def with_fleet() -> dict[str, str]:
        with WriterClient([service], token=token, retry=FAST, fleet=pattern) as client:
            epoch = client.epoch().stamp(PARTITIONS)
            where = {}
            for partition in PARTITIONS:
                fence = client.fence(partition, epoch)
                assert client.commit(fence, 0)["last_applied_offset"] == 0
                where[partition] = fence.base
            return where

    assert await asyncio.to_thread(with_fleet) == owners

    async with AsyncWriterClient([service], token=token, retry=FAST, fleet=pattern) as aio:
        epoch = (await aio.epoch()).stamp(PARTITIONS)
        granted = await aio.fences([(p, epoch) for p in PARTITIONS])
        assert not [g for g in granted if isinstance(g, ApiError)], granted
        assert {g.partition: g.base for g in granted if not isinstance(g, ApiError)} == owners
        done = await aio.commits([(g, 1) for g in granted if not isinstance(g, ApiError)])
        assert [d["status"] if isinstance(d, dict) else d for d in done] == [200] * 16


async def test_a_redirect_outside_the_fleet_pattern_is_still_refused(
    fleet: tuple[LocalReplicas, int], forged: tuple[dict[str, str], list]
) -> None:
    replicas, port = fleet
    targets, seen = forged
    pattern = f"http://127.0.0.0/29:{port}"
    token = replicas.tokens["writer"]
    forger = f"http://{FORGER}:{port}"
    targets["to"] = f"http://{ATTACKER}:{port}"  # same port, a host outside 127.0.0.0/29
    async with AsyncWriterClient([forger], token=token, retry=FAST, fleet=pattern) as aio:
        with pytest.raises(RedirectRefused) as refused:
            await aio.fence("orders/0", 1)
        assert f"http://{ATTACKER}:{port}" in str(refused.value)

    def sync_refused() -> None:
        with (
            WriterClient([forger], token=token, retry=FAST, fleet=pattern) as client,
            pytest.raises(RedirectRefused),
        ):
            client.fence("orders/0", 1)

    await asyncio.to_thread(sync_refused)
    assert seen == []  # no request, no token reached the address outside the fleet
    owner = replicas.procs[replicas.assigned()["orders/0"]].url
    targets["to"] = owner  # a replica of the fleet: followed
    async with AsyncWriterClient([forger], token=token, retry=FAST, fleet=pattern) as aio:
        info = await aio.state("orders/0")
        assert info["partition"] == "orders/0"
        assert aio.publishers.candidates("orders/0")[0] == owner


async def test_the_node_writer_follows_the_fleet_and_nothing_else(
    fleet: tuple[LocalReplicas, int],
    forged: tuple[dict[str, str], list],
    s3_server: LocalS3,
    bucket: str,
) -> None:
    """examples/node-writer with L0GC_FLEET: writes to partitions owned by the other two
    replicas through the Service's address; without L0GC_FLEET it refuses them; with it,
    a 307 outside the pattern is still refused."""
    replicas, port = fleet
    targets, seen = forged
    assert NODE is not None, "node (20) is on every machine of this project: install it"
    owned = replicas.assigned()
    others = [next(p for p in PARTITIONS if owned[p] == name) for name in ("r1", "r2")]
    base = {
        **child_env(),
        "L0GC_PUBLISHERS": replicas.procs["r0"].url,
        "L0GC_TOKEN": replicas.tokens["writer"],
        "S3_ENDPOINT": s3_server.endpoint_url,
        "S3_BUCKET": bucket,
        "PATH": os.environ.get("PATH", ""),
    }

    def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [NODE, str(WRITER_JS), "write", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )

    pattern = f"http://127.0.0.0/29:{port}"
    for partition in others:
        plain = await asyncio.to_thread(run, {**base, "L0GC_PARTITION": partition})
        assert plain.returncode == 1
        assert "refused: not a configured publisher nor in L0GC_FLEET" in plain.stderr
        done = await asyncio.to_thread(
            run, {**base, "L0GC_PARTITION": partition, "L0GC_FLEET": pattern}
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["offset"] == 0
    targets["to"] = f"http://{ATTACKER}:{port}"
    forged_run = await asyncio.to_thread(
        run,
        {
            **base,
            "L0GC_PARTITION": others[0],
            "L0GC_FLEET": pattern,
            "L0GC_PUBLISHERS": f"http://{FORGER}:{port}",
        },
    )
    assert forged_run.returncode == 1
    assert f"redirect to http://{ATTACKER}:{port} refused" in forged_run.stderr
    assert seen == []
    bad = await asyncio.to_thread(
        run, {**base, "L0GC_PARTITION": others[0], "L0GC_FLEET": "http://10.0.0.0/99:8080"}
    )
    assert bad.returncode == 1
    assert "is not an IPv4 CIDR network" in bad.stderr
