"""A namespace bound to its bucket and root: binding, the claim, and sweepers refusing
anything else (real etcd and a real S3 server, as an operator would run them)."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from gcd.cli.spark import admitted
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import ListPage, ObjectInfo
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.binding import BindingConflict, bind_namespace
from gcd.sweep.shards import ShardAnnouncement, announced
from l0gc import exitcodes
from l0gc.contract.binding import CLAIM_NAME, StorageTarget, claim_key
from l0gc.contract.namespace import Publication
from l0gc.errors import LISTING_BROKEN, StorageError
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from l0lab.testing.memory import MemoryObjectStore
from tests.binding import bind, bind_sync
from tests.clirun import Cli

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
OLD = datetime.now(UTC) - timedelta(hours=2)
pytestmark = pytest.mark.integration


def cluster(etcd: LocalEtcd, namespace: str, *, safe: int = 5, epoch: int = 8) -> None:
    """Cluster epoch `epoch` and one partition at M(p) = `safe`."""

    async def setup() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(1)
            await store.register_partition("t/0")
            owned = await store.acquire_ownership("t/0", "p")
            for _ in range(epoch - 1):
                await store.advance_cluster_epoch()
            await store.publish_one(Publication("t/0", "p", owned.owner_epoch, safe))
        finally:
            await kv.close()

    asyncio.run(setup())


def objects(s3: LocalS3, bucket: str) -> set[str]:
    """Garbage (epochs 1-5) and live (9) objects of one cluster; returns every key."""
    keys = {LAYOUT.format(p, e, "o") for p in (1, 500) for e in (1, 5, 9)}
    s3.seed(bucket, sorted(keys), last_modified=OLD)
    return keys


def sweep_args(s3: LocalS3, bucket: str, etcd: LocalEtcd, namespace: str, *extra: str) -> list[str]:
    """`gcd sweep --json` against `bucket` with `namespace`."""
    return [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3.endpoint_url,
        "--region",
        "us-east-1",
        "--grace",
        "1m",
        "--json",
        "--etcd",
        etcd.endpoint,
        "--namespace",
        namespace,
        *extra,
    ]


def namespace_args(etcd: LocalEtcd, namespace: str, *args: str) -> list[str]:
    """`gcd namespace ARGS --json` on `namespace`."""
    return ["namespace", *args, "--json", "--etcd", etcd.endpoint, "--namespace", namespace]


def test_sweeper_of_one_namespace_pointed_at_another_bucket_deletes_nothing(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Finding 2: cluster A's namespace with cluster B's bucket exits 3 naming both sides."""
    ns_a, ns_b = f"{namespace}-a", f"{namespace}-b"
    bucket_a, bucket_b = f"{bucket}-a", bucket
    cluster(etcd_server, ns_a, safe=7)  # A's M would delete B's epoch-5 objects
    cluster(etcd_server, ns_b, safe=2)
    s3_server.create_bucket(bucket_a)
    keys_b = objects(s3_server, bucket_b)
    bind_sync(etcd_server.endpoint, ns_a, s3_server.endpoint_url, bucket_a)
    bind_sync(etcd_server.endpoint, ns_b, s3_server.endpoint_url, bucket_b)
    try:
        run = cli("gcd", *sweep_args(s3_server, bucket_b, etcd_server, ns_a))
        code, summary = run.code, run.json
        assert code == exitcodes.BLOCKED
        reason = str(summary["blocked_reason"])
        assert f"s3://{bucket_a}/" in reason, reason
        assert f"s3://{bucket_b}/" in reason, reason
        assert summary["deleted"] == 0
        assert keys_b <= s3_server.keys(bucket_b)
        run = cli("gcd", *sweep_args(s3_server, bucket_b, etcd_server, ns_b))
        code, summary = run.code, run.json
        assert (code, summary["deleted"]) == (exitcodes.OK, 2)  # B's own epoch-1 objects
    finally:
        s3_server.delete_bucket_contents(bucket_a)


def test_namespace_holding_only_an_epoch_deletes_nothing(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Finding 2: one stray `epoch advance` in a fresh namespace gives no M to delete with."""

    async def stray_epoch() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        try:
            await WatermarkStore(kv, namespace).init_cluster_epoch(50)
        finally:
            await kv.close()

    asyncio.run(stray_epoch())
    keys = objects(s3_server, bucket)
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "not bound" in str(summary["blocked_reason"])
    assert s3_server.keys(bucket) == keys


def test_bind_is_idempotent_and_the_root_belongs_to_one_namespace(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Bind twice: one change; another namespace claiming the same root is refused (3)."""
    bind_args = (
        "bind",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
    )
    run = cli("gcd", *namespace_args(etcd_server, namespace, *bind_args))
    code, first = run.code, run.json
    assert (code, first["changed"], first["bound"]) == (exitcodes.OK, True, True)
    run = cli("gcd", *namespace_args(etcd_server, namespace, *bind_args))
    code, again = run.code, run.json
    assert (code, again["changed"]) == (exitcodes.OK, False)
    claim = json.loads(s3_server._backend().get_object(bucket, claim_key(ROOT)).value)
    assert (claim["namespace"], claim["binding_id"]) == (namespace, first["binding"]["binding_id"])  # type: ignore[index]
    run = cli("gcd", *namespace_args(etcd_server, f"{namespace}-other", *bind_args))
    code, other = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "already claimed" in str(other["problem"])
    assert namespace in str(other["problem"])
    run = cli(
        "watermark",
        "namespace",
        "show",
        "--json",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
    )
    code = run.code
    shown = run.json
    assert (code, shown["consistent"]) == (exitcodes.OK, True)  # `watermark namespace` too
    run = cli("gcd", *namespace_args(etcd_server, f"{namespace}-other", "show"))
    code, unbound = run.code, run.json
    assert (code, unbound["bound"]) == (exitcodes.BLOCKED, False)


def test_two_namespaces_binding_one_root_at_once_one_wins(
    s3_server: LocalS3, bucket: str, etcd_server: LocalEtcd, namespace: str
) -> None:
    """The claim is created only if absent (If-None-Match): concurrent binds, one winner."""

    async def race() -> list[object]:
        return await asyncio.gather(
            *(
                bind(etcd_server.endpoint, f"{namespace}-{i}", s3_server.endpoint_url, bucket)
                for i in range(4)
            ),
            return_exceptions=True,
        )

    outcomes = asyncio.run(race())
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, BindingConflict) for o in outcomes if o not in winners)


def test_moving_a_binding_needs_replace_and_a_deleted_claim_blocks(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Re-binding elsewhere is refused without --replace; a missing claim stops sweeps."""
    cluster(etcd_server, namespace)
    keys = objects(s3_server, bucket)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
    moved = (
        "bind",
        "--bucket",
        bucket,
        "--root",
        "other/root",
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
    )
    run = cli("gcd", *namespace_args(etcd_server, namespace, *moved))
    code, refused = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "--replace" in str(refused["problem"])
    s3_server._backend().get_bucket(bucket).keys.pop(claim_key(ROOT))
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "no claim" in str(summary["blocked_reason"])
    assert s3_server.keys(bucket) == keys
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)  # re-claims
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, summary = run.code, run.json
    assert (code, summary["deleted"], summary["unparsable"]) == (exitcodes.OK, 4, 0)
    assert s3_server.keys(bucket) - keys == {claim_key(ROOT)}
    run = cli("gcd", *namespace_args(etcd_server, namespace, *moved, "--replace"))
    code, replaced = run.code, run.json
    assert code == exitcodes.OK
    assert replaced["replaced"]["target"]["root"] == ROOT


def test_interrupted_bind_resumes_with_the_claims_binding() -> None:
    """A claim written but no etcd binding (crash between the two writes): bind finishes it."""

    async def scenario() -> None:
        kv, bucket = MemoryKV(), MemoryObjectStore()
        store = WatermarkStore(kv, "/l0gc/x")
        target = StorageTarget("b", ROOT)
        first = await bind_namespace(store, bucket, target)
        await store.delete_binding(expected_revision=(await store.get_binding())[1])
        again = await bind_namespace(store, bucket, target)
        assert again.binding.binding_id == first.binding.binding_id
        assert bucket.keys() == {f"{ROOT}/{CLAIM_NAME}"}

    asyncio.run(scenario())


def test_sweepers_disagreeing_on_shards_delete_nothing(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Finding 7: a running 0/2 sweeper blocks a 3-shard sweep and a second 0/2; 1/2 runs."""
    cluster(etcd_server, namespace)
    keys = objects(s3_server, bucket)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)

    settings = EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace)

    async def other_sweeper(lease: int | None) -> int:
        """Announce 0/2 like a running daemon (lease None), or withdraw it (its lease)."""
        kv = await open_kv(settings)
        try:
            if lease is not None:
                await kv.lease_revoke(lease)
                return lease
            lease = await kv.lease_grant(60)
            other = ShardAnnouncement("other-sweeper", 0, 2, 1.0)
            await WatermarkStore(kv, namespace).announce_sweeper(
                other.sweeper_id, other.encode(), lease
            )
            return lease
        finally:
            await kv.close()

    lease = asyncio.run(other_sweeper(None))
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace, "--shard-count", "3"))
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "shard counts disagree" in str(summary["blocked_reason"])
    assert "'other-sweeper'" in str(summary["blocked_reason"])
    assert s3_server.keys(bucket) - {claim_key(ROOT)} == keys
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace, "--shard-count", "2"))
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "run twice" in str(summary["blocked_reason"])
    run = cli(
        "gcd",
        *sweep_args(
            s3_server, bucket, etcd_server, namespace, "--shard-count", "2", "--shard-index", "1"
        ),
    )
    code, summary = run.code, run.json
    assert (code, summary["deleted"]) == (exitcodes.OK, 2)  # prefix 500's garbage only
    asyncio.run(other_sweeper(lease))
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace, "--shard-count", "3"))
    code, summary = run.code, run.json
    assert (code, summary["deleted"]) == (exitcodes.OK, 2)  # alone now: prefix 001's garbage


def test_announcement_lives_while_the_sweeper_runs_and_leaves_with_it(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """`announced` writes under a lease while the block runs and revokes it on exit."""

    async def scenario() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        me = ShardAnnouncement("me", 1, 4, 1.0)
        try:
            async with announced(store, kv, me, ttl_s=5):
                view = await store.read_gc_view()
                assert ShardAnnouncement.decode(view.sweepers["me"]) == me
            assert (await store.read_gc_view()).sweepers == {}
        finally:
            await kv.close()

    asyncio.run(scenario())


def test_spark_and_daemon_read_through_the_binding(
    s3_server: LocalS3, bucket: str, etcd_server: LocalEtcd, namespace: str
) -> None:
    """`gcd spark-*` reads M through the same check: unbound, it is refused."""
    cluster(etcd_server, namespace)
    args = argparse.Namespace(
        etcd=etcd_server.endpoint,
        namespace=namespace,
        bucket=bucket,
        root=ROOT,
        endpoint_url=s3_server.endpoint_url,
        region="us-east-1",
        etcd_ca_file=None,
        etcd_cert_file=None,
        etcd_key_file=None,
        etcd_username=None,
        etcd_password_file=None,
        etcd_timeout=None,
    )

    async def admission() -> Any:
        async with admitted(args, None) as (read, _reader):
            return read

    refused = asyncio.run(admission())
    assert not refused.allowed
    assert "not bound" in str(refused.blocked_reason)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
    allowed = asyncio.run(admission())
    assert (allowed.allowed, allowed.safe_epoch) == (True, 5)


def test_claim_store_of_s3_reads_and_creates_only_if_absent(
    s3_server: LocalS3, bucket: str
) -> None:
    """get_object is None for a missing key; put_object(if_absent) refuses a second write."""

    async def scenario() -> None:
        settings = S3Settings(
            bucket=bucket, endpoint_url=s3_server.endpoint_url, region="us-east-1"
        )
        async with S3ObjectStore.open(settings) as store:
            assert await store.get_object("k", max_bytes=10) is None
            assert await store.put_object("k", b"one", if_absent=True)
            assert not await store.put_object("k", b"two", if_absent=True)
            assert await store.get_object("k", max_bytes=10) == b"one"

    asyncio.run(scenario())


def test_a_watermark_at_the_cluster_epoch_blocks_the_sweep_naming_the_partition(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Finding 4: M(p) >= the cluster epoch is not capped to epoch - 1: exit 3, nothing deleted."""
    cluster(etcd_server, namespace, safe=7, epoch=8)
    keys = objects(s3_server, bucket)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)

    async def publish_above() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            record = await store.get_partition("t/0")
            assert record is not None
            await store.publish_one(Publication("t/0", "p", record.owner_epoch, 8))
        finally:
            await kv.close()

    asyncio.run(publish_above())
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "partition 't/0' publishes M(p) = 8, at or above the cluster epoch 8" in str(
        summary["blocked_reason"]
    )
    assert s3_server.keys(bucket) - {claim_key(ROOT)} == keys


def test_a_bind_racing_a_nested_bind_takes_its_claim_back() -> None:
    """Red-team round 4, finding 13: two binds of nested roots at one instant both passed
    the nesting check (neither claim existed yet) and both kept their claims. Here the
    other namespace's claim of a root inside ours lands between our check and our
    write: the bind checks again after writing, refuses, and removes its own claim."""

    class RacingBucket(MemoryObjectStore):
        """Another bind's claim is written just before this bind's own."""

        racing: tuple[str, bytes] | None = None

        async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
            if self.racing is not None:
                other, self.racing = self.racing, None
                await super().put_object(other[0], other[1], if_absent=True)
            return await super().put_object(key, body, if_absent=if_absent)

    async def scenario() -> None:
        inner = StorageTarget("b", f"{ROOT}/inner")
        elsewhere = MemoryObjectStore()
        await bind_namespace(WatermarkStore(MemoryKV(), "/l0gc/inner"), elsewhere, inner)
        bucket = RacingBucket()
        bucket.racing = (claim_key(inner.root), elsewhere.bodies[claim_key(inner.root)])
        with pytest.raises(BindingConflict, match="same moment"):
            await bind_namespace(
                WatermarkStore(MemoryKV(), "/l0gc/outer"), bucket, StorageTarget("b", ROOT)
            )
        assert bucket.keys() == {claim_key(inner.root)}

    asyncio.run(scenario())


class RootListedBucket(MemoryObjectStore):
    """A bucket whose listings of a root (a prefix ending in "/") `root_page` answers;
    the one-key probes of claim keys are answered as usual."""

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        if not prefix.endswith("/"):
            return await super().list_page(
                prefix,
                start_after=start_after,
                continuation_token=continuation_token,
                max_keys=max_keys,
            )
        return await self.root_page(prefix, continuation_token)

    async def root_page(self, prefix: str, token: str | None) -> ListPage:
        raise NotImplementedError


def test_a_listing_that_never_ends_stops_the_bind_and_claims_nothing() -> None:
    """A store that pages the root's listing back to a token it gave before would keep
    `namespace bind` listing forever, looking busy: the bind stops with an error naming
    the root and writes neither side of the binding. A listing that moves on (many
    pages) still binds, and says how far it got."""

    class LoopingBucket(RootListedBucket):
        """Every listing of the root says there is more, at one of two tokens."""

        async def root_page(self, prefix: str, token: str | None) -> ListPage:
            token = "b" if token == "a" else "a"
            return ListPage((ObjectInfo(f"{prefix}x{token}", 1, 0.0),), token)

    class TallBucket(RootListedBucket):
        """The root's listing takes 250 pages of one key each."""

        async def root_page(self, prefix: str, token: str | None) -> ListPage:
            page = int(token or "0")
            more = str(page + 1) if page < 249 else None
            return ListPage((ObjectInfo(f"{prefix}{page:03d}/k", 1, 0.0),), more)

    async def scenario() -> None:
        looping, kv = LoopingBucket(), MemoryKV()
        store = WatermarkStore(kv, "/l0gc/loop")
        with pytest.raises(StorageError, match=f"listing {ROOT}/ .* already given") as caught:
            await bind_namespace(store, looping, StorageTarget("b", ROOT))
        assert caught.value.code == LISTING_BROKEN
        assert looping.keys() == set()
        assert await store.get_binding() == (None, 0)
        tall = TallBucket()
        with capture_logs() as logs:
            outcome = await bind_namespace(
                WatermarkStore(MemoryKV(), "/l0gc/tall"), tall, StorageTarget("b", ROOT)
            )
        assert outcome.changed
        progress = [(e["pages"], e["keys"]) for e in logs if e["event"] == "bind.listing"]
        assert progress[:2] == [(100, 100), (200, 200)]

    asyncio.run(scenario())


def test_a_listing_page_that_never_comes_stops_the_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that never finishes answering a LIST of the root (a dripping proxy): the
    bind gives up at the request deadline with a retryable Timeout, nothing written."""

    class SilentBucket(RootListedBucket):
        async def root_page(self, prefix: str, token: str | None) -> ListPage:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    monkeypatch.setattr("gcd.sweep.binding.REQUEST_DEADLINE_S", 0.2)

    async def scenario() -> None:
        bucket, store = SilentBucket(), WatermarkStore(MemoryKV(), "/l0gc/silent")
        with pytest.raises(StorageError, match=f"listing {ROOT}/ for nested claims") as caught:
            await bind_namespace(store, bucket, StorageTarget("b", ROOT))
        assert (caught.value.code, caught.value.retryable) == ("Timeout", True)
        assert bucket.keys() == set()
        assert await store.get_binding() == (None, 0)

    asyncio.run(scenario())
