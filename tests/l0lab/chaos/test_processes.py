"""The real pieces `gcd chaos` is built from, each against real servers and processes.

Named by behaviour, not module: the real pieces of several l0lab.chaos modules, as one suite."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc.errors import StorageError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.chaos.backends import HttpBackend
from l0lab.testing.faultproxy import FaultConfig, FaultProxy
from l0lab.testing.local_servers import LocalEtcd, LocalEtcdCluster, LocalS3
from l0lab.testing.procs import Child
from tests.binding import bind
from tests.serving import new_serve, token_file
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
TOKEN = "w" * 32


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client session."""
    async with aiohttp.ClientSession() as session:
        yield session


async def test_an_etcd_cluster_serves_through_a_killed_member(tmp_path: Path) -> None:
    """Three members: with one killed the others take writes; restarted, it has them too."""
    cluster = LocalEtcdCluster(base_dir=tmp_path)
    await asyncio.to_thread(cluster.start)
    try:
        kv = await open_kv(
            EtcdSettings(endpoints=cluster.endpoints, namespace="/c", timeout_s=30.0)
        )
        store = WatermarkStore(kv, "/c")
        await store.init_cluster_epoch(1)
        await asyncio.to_thread(cluster.members[0].stop, kill=True)
        assert await store.advance_cluster_epoch() == 2
        await asyncio.to_thread(cluster.members[0].start)
        await kv.close()
        alone = await open_kv(
            EtcdSettings(endpoints=(cluster.members[0].endpoint,), namespace="/c")
        )
        try:
            assert await WatermarkStore(alone, "/c").get_cluster_epoch() == 2
        finally:
            await alone.close()
    finally:
        await asyncio.to_thread(cluster.close)


async def test_the_fault_proxy_resets_connections(s3_server: LocalS3, bucket: str) -> None:
    """drop_share resets the connection: the sweeper's client sees a retryable error."""
    async with FaultProxy(s3_server.endpoint_url, FaultConfig(drop_share=1.0)) as proxy:
        settings = S3Settings(bucket=bucket, endpoint_url=proxy.endpoint_url, region="us-east-1")
        async with S3ObjectStore.open(settings) as store:
            with pytest.raises(StorageError) as failed:
                await store.list_page("level_zero/data/")
        assert failed.value.retryable
        assert proxy.faults["dropped"] >= 1


async def serve(etcd: LocalEtcd, namespace: str, tmp_path: Path, *build: str) -> tuple[Child, str]:
    """`watermark serve` (or a broken build of it) hosting orders/0; ready."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    store = WatermarkStore(kv, namespace)
    await store.init_cluster_epoch(1)
    tokens = token_file(tmp_path, writer=TOKEN)
    program = ("-m", "l0lab.chaos.broken_serve", *build) if build else ("-m", "watermark")
    started = new_serve(
        etcd,
        namespace,
        tmp_path / "serve.log",
        "--register",
        "--auth-token-file",
        str(tokens),
        "--no-idle-advance",
        "--fence-timeout",
        "1",
        partitions=("orders/0",),
        program=program,
    ).start()
    try:
        await asyncio.to_thread(started.wait_ready, 30)
    except BaseException:
        started.stop()
        raise
    for _ in range(3):  # registered at epoch 1 (M(p) = 0): epochs 2-4 may be fenced
        await store.advance_cluster_epoch()
    await kv.close()
    return started.child, started.url


async def test_a_lost_commit_answer_is_resolved_from_the_partition_state(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """A commit whose answer may be lost is resolved: applied (ok) or provably not (abort)."""
    child, url = await serve(etcd_server, namespace, tmp_path)
    try:
        backend = HttpBackend(http, lambda _p: url, TOKEN)
        token, _ = await backend.fence("orders/0", 2)
        assert token is not None
        assert await backend.commit("orders/0", token, 0) == ("ok", "")
        # A restarted writer sends it again: the token is forgotten, the state has offset 0.
        assert await backend.commit("orders/0", token, 0, resumed=True) == ("ok", "")
        later, _ = await backend.fence("orders/0", 3)
        assert later is not None
        await backend.abort(later, "orders/0")
        outcome = await backend.commit("orders/0", later, 1, resumed=True)
        assert outcome == ("abort", "fence_expired")  # the abort is remembered (issue 26)
        assert await backend.fence("orders/9", 3) == (None, "not_registered")
    finally:
        child.stop()
    assert child.wait(1) == 0


async def test_the_broken_build_slides_without_draining(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """The real serve makes a slide wait for a held fence; no-drain-slide does not, and the
    late commit is a fencing violation (what the chaos checker catches)."""
    for build in ((), ("no-drain-slide",)):
        child, url = await serve(etcd_server, f"{namespace}-{len(build)}", tmp_path, *build)
        try:
            backend = HttpBackend(http, lambda _p, u=url: u, TOKEN, fence_timeout_s=1.0)
            held, _ = await backend.fence("orders/0", 2)
            assert held is not None
            for epoch in (3, 4):
                token, _ = await backend.fence("orders/0", epoch)
                if token is not None:
                    await backend.commit("orders/0", token, epoch)
            outcome = await backend.commit("orders/0", held, 9)
        finally:
            child.stop()
        expected = ("abort", "fencing_violation") if build else ("ok", "")
        assert outcome == expected, f"build {build or 'real'}"


async def test_a_killed_sweeper_frees_its_shard_after_its_shard_ttl(
    etcd_server: LocalEtcd, s3_server: LocalS3, namespace: str, bucket: str, tmp_path: Path
) -> None:
    """--shard-ttl 2s: the announcement of a sweeper killed by SIGKILL is on a 2 s lease
    (read from etcd, not timed: the default is 15 s), and it goes once the lease expires."""
    await bind(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    store = WatermarkStore(kv, namespace)
    await store.init_cluster_epoch(1)
    daemon = Child(
        "daemon",
        [
            sys.executable,
            "-m",
            "gcd",
            "daemon",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
            "--shard-ttl",
            "2s",
            "--shard-index",
            "0",
            "--shard-count",
            "2",
            "--http-host",
            "127.0.0.1",
            "--http-port",
            "0",
        ],
        tmp_path / "daemon.log",
    ).start()

    async def announced() -> int:
        return len((await kv.range_prefix(store.sweepers_prefix)).items)

    ttl: list[int | None] = [None]

    async def lease_read() -> bool:
        """The announcement's lease has `ttl[0]` seconds left (refreshed, so its TTL)."""
        items = (await kv.range_prefix(store.sweepers_prefix)).items
        ttl[0] = await kv.lease_time_to_live(items[0].lease) if items else None
        return ttl[0] is not None

    try:
        await wait_until(
            lease_read, timeout_s=60, what="the shard announcement", detail=daemon.tail
        )
        assert ttl[0] is not None
        assert ttl[0] <= 2, ttl  # --shard-ttl, not the default 15 s
        daemon.kill()
        await wait_until(
            lambda: _gone(announced), timeout_s=60, what="the lease to expire", detail=daemon.tail
        )
    finally:
        daemon.stop()
        await kv.close()


async def _gone(count: object) -> bool:
    return await count() == 0  # type: ignore[operator,no-any-return]
