"""The writer clients against a live `watermark serve` with a real etcd, and against a
forged redirect on loopback (a replica record pointing at an attacker, issue 25 #3);
references named by both clients and by the Node example (examples/node-writer).

Named by behaviour, not module: both writer clients (client.aio, client.sync) alike."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from l0lab.testing.local_servers import LocalEtcd, LocalS3
from l0lab.testing.procs import child_env
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
WRITER_JS = Path(__file__).resolve().parents[3] / "examples" / "node-writer" / "writer.mjs"
NODE = shutil.which("node")


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


def level_zero_key(epoch: int, name: str) -> str:
    """An object key of the default layout (~70 bytes, as writers name them)."""
    return f"level_zero/data/{zlib.crc32(name.encode()) % 1000:03d}/{epoch:018d}/{name}"


def test_the_sync_client_names_references_and_a_partial_report_keeps_the_rest(
    serve: Serve,
) -> None:
    """Commits name their objects (single and batched, with an entry that names none); the
    state counts the keys held; a report through offset 1 naming only some keys leaves
    the unnamed one of a passed entry held (the second opinion); a report without
    objects then releases every entry it passes. A client that never names any sees
    ``references`` null."""
    with WriterClient([serve.url], token=ADMIN, retry=FAST) as admin:
        assert admin.register("refs/0")["hosted"] is True
    with WriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        assert writer.state("refs/0")["references"] is None
        epoch = writer.epoch().stamp(["refs/0"])
        a0, b0, a1 = (level_zero_key(epoch, f"seg-{n}") for n in ("a0", "b0", "a1"))
        first = writer.commit(writer.fence("refs/0", epoch), 0, [a0, b0])
        assert (first["last_applied_offset"], first["references"]) == (0, 2)
        second, third = writer.fence("refs/0", epoch), writer.fence("refs/0", epoch)
        done = writer.commits([(second, 1, [a1]), (third, 2)])
        assert [d["status"] if isinstance(d, dict) else d for d in done] == [200, 200]
        assert writer.state("refs/0")["references"] == 3
        assert writer.state("orders/1")["references"] is None  # never named: as before
    with WriterClient([serve.url], token=RECONCILER, retry=FAST) as reconciler:
        partial = reconciler.reconciled("refs/0", 1, objects=[a0, a1])
        assert (partial["reconciled_offset"], partial["references"]) == (1, 1)  # b0 held
        assert reconciler.reconciled("refs/0", 1, objects=[])["references"] == 1
        full = reconciler.reconciled("refs/0", 2)
        assert (full["reconciled_offset"], full["references"]) == (2, 0)


def test_a_batch_names_its_objects_once_for_every_entry_that_names_none(serve: Serve) -> None:
    """One L0 object holding data of two partitions: the batch names its key once, both
    entries hold it; an entry naming its own objects holds those instead; a report of
    one partition releases only its own reference."""
    with WriterClient([serve.url], token=ADMIN, retry=FAST) as admin:
        for name in ("refs/b0", "refs/b1", "refs/b2"):
            admin.register(name)
    with WriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        epoch = writer.epoch().stamp(["refs/b0", "refs/b1", "refs/b2"])
        shared, own = level_zero_key(epoch, "batch"), level_zero_key(epoch, "own")
        fences = [writer.fence(name, epoch) for name in ("refs/b0", "refs/b1", "refs/b2")]
        done = writer.commits([(fences[0], 0), (fences[1], 0), (fences[2], 0, [own])], [shared])
        assert [d["status"] if isinstance(d, dict) else d for d in done] == [200, 200, 200]
        assert [writer.state(n)["references"] for n in ("refs/b0", "refs/b1", "refs/b2")] == [
            1,
            1,
            1,
        ]
    with WriterClient([serve.url], token=RECONCILER, retry=FAST) as reconciler:
        assert reconciler.reconciled("refs/b2", 0, objects=[shared])["references"] == 1  # own
        assert reconciler.reconciled("refs/b0", 0, objects=[shared])["references"] == 0
        assert reconciler.state("refs/b1")["references"] == 1
    with (
        WriterClient([serve.url], token=WRITER, retry=FAST) as writer,
        pytest.raises(ValueError, match="wrap a single key in a list"),
    ):
        writer.commits([(fences[1], 1)], shared)


def test_a_commit_past_the_cap_is_references_full_and_its_fence_waits(serve: Serve) -> None:
    """Past 512 KiB of held keys a commit raises ApiError references_full (429, action
    retry) once the retries are spent; nothing changed and its fence is still held, so
    the same commit succeeds after the reconciler released the earlier entries."""
    with WriterClient([serve.url], token=ADMIN, retry=FAST) as admin:
        admin.register("refs/2")
    with WriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        epoch = writer.epoch().stamp(["refs/2"])

        def keys(offset: int) -> list[str]:  # 1,000 keys of 76 bytes: 76,000 bytes a commit
            return [
                level_zero_key(epoch, f"{offset:04d}-{uuid.UUID(int=n).hex}") for n in range(1000)
            ]

        assert 6 * 76_000 <= 512 * 1024 < 7 * 76_000
        assert {len(key) for key in keys(0)} == {76}
        for offset in range(6):
            writer.commit(writer.fence("refs/2", epoch), offset, keys(offset))
        fence = writer.fence("refs/2", epoch)
        with pytest.raises(ApiError) as full:
            writer.commit(fence, 6, keys(6))
        assert (full.value.status, full.value.code, full.value.action) == (
            429,
            "references_full",
            "retry",
        )
        held = writer.state("refs/2")
        assert (held["last_applied_offset"], held["references"]) == (5, 6000)
    with WriterClient([serve.url], token=RECONCILER, retry=FAST) as reconciler:
        assert reconciler.reconciled("refs/2", 5)["references"] == 0
    with WriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        later = writer.commit(fence, 6, keys(6))
        assert (later["repeat"], later["last_applied_offset"], later["references"]) == (
            False,
            6,
            1000,
        )


async def test_the_async_client_names_references_alike(serve: Serve) -> None:
    """The asyncio client: objects on commit, in a batch, and a report naming some."""
    async with AsyncWriterClient([serve.url], token=ADMIN, retry=FAST) as admin:
        await admin.register("refs/1")
    async with AsyncWriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        epoch = (await writer.epoch()).stamp(["refs/1"])
        keys = [level_zero_key(epoch, f"aio-{n}") for n in range(4)]
        state = await writer.commit(await writer.fence("refs/1", epoch), 0, keys[:2])
        assert state["references"] == 2
        (done,) = await writer.commits([(await writer.fence("refs/1", epoch), 1, keys[2:])])
        assert isinstance(done, dict)
        assert done["status"] == 200
    async with AsyncWriterClient([serve.url], token=RECONCILER, retry=FAST) as reconciler:
        report = await reconciler.reconciled("refs/1", 1, objects=keys[1:])
        assert (report["reconciled_offset"], report["references"]) == (1, 1)  # keys[0] held
        assert (await reconciler.state("refs/1"))["references"] == 1


def test_the_node_writer_names_its_objects_and_what_its_reconciler_lifted(
    serve: Serve, s3_server: LocalS3, bucket: str
) -> None:
    """examples/node-writer: each commit names the object it wrote; `reconcile 1
    --objects KEY` releases only that key (the other entry's object stays referenced);
    `reconcile 1` without --objects releases every key through offset 1."""
    assert NODE is not None, "node (20) is on every machine of this project: install it"
    with WriterClient([serve.url], token=ADMIN, retry=FAST) as admin:
        admin.register("refs/node")
    env = {
        **child_env(),
        "L0GC_PUBLISHERS": serve.url,
        "L0GC_TOKEN": WRITER,
        "L0GC_RECONCILER_TOKEN": RECONCILER,
        "L0GC_PARTITION": "refs/node",
        "S3_ENDPOINT": s3_server.endpoint_url,
        "S3_BUCKET": bucket,
        "PATH": os.environ.get("PATH", ""),
    }

    def node(*args: str) -> list[dict[str, Any]]:
        done = subprocess.run(
            [NODE, str(WRITER_JS), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    written = node("write", "2")
    assert [(w["offset"], w["references"]) for w in written] == [(0, 1), (1, 2)]
    assert {w["key"] for w in written} <= s3_server.keys(bucket)
    (partial,) = node("reconcile", "1", "--objects", written[1]["key"])
    assert (partial["reconciled_offset"], partial["references"]) == (1, 1)
    # A log end with the key of each entry (the publisher, which knows its log end, takes
    # the body as valid and ignores both: it did not ask).
    entries = [f"{w['offset']}={w['key']}" for w in reversed(written)]
    (told,) = node("reconcile", "1", "1", "--entries", *entries, "--objects", written[1]["key"])
    assert (told["references"], told["references_from"]) == (1, None)
    with WriterClient([serve.url], token=WRITER, retry=FAST) as writer:
        assert writer.state("refs/node")["references"] == 1  # written[0]'s object, held
    (full,) = node("reconcile", "1")
    assert full["references"] == 0
