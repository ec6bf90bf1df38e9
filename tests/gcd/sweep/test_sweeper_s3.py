"""Sweeper rounds against a real S3 server (moto over HTTP) and a real etcd."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.utils import parse_timestamp
from structlog.testing import capture_logs

from gcd.observe.report import PlanWriter
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import DeleteResult, ListPage
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.storage.s3.wire import parse_s3_timestamp
from gcd.sweep.brake import PauseBrake
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.errors import StorageError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.faultproxy import FaultConfig, FaultProxy
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.gcd.storage.s3.test_client_servers import mixed_keys

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
SAFE = 5
CLUSTER = 8
OLD = datetime.now(UTC) - timedelta(hours=2)


async def setup_watermarks(store: WatermarkStore, safe: int = SAFE, cluster: int = CLUSTER) -> None:
    """Cluster epoch `cluster`, one partition publishing M(p) = `safe`."""
    await store.init_cluster_epoch(1)
    await store.register_partition("topic/0")
    owned = await store.acquire_ownership("topic/0", "publisher-1")
    for _ in range(cluster - 1):
        await store.advance_cluster_epoch()
    await store.publish_one(Publication("topic/0", "publisher-1", owned.owner_epoch, safe))


@pytest.fixture
async def watermarks(etcd_server: LocalEtcd, namespace: str) -> AsyncIterator[WatermarkStore]:
    """A WatermarkStore on the real etcd with M = SAFE and cluster epoch CLUSTER."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    store = WatermarkStore(kv, namespace)
    await setup_watermarks(store)
    try:
        yield store
    finally:
        await kv.close()


def seed_mixed(s3: LocalS3, bucket: str) -> set[str]:
    """`mixed_keys()` two hours old, plus young garbage; returns the deletable keys."""
    keys, deletable = mixed_keys()
    s3.seed(bucket, keys, last_modified=OLD)
    s3.seed(
        bucket,
        [LAYOUT.format(p, 1, "young.log") for p in (2, 417)],
        last_modified=datetime.now(UTC),
    )
    return deletable


def fast_retrier(seed: int = 0) -> Retrier:
    return Retrier(Backoff(base_s=0.01, cap_s=0.2, max_attempts=10), rng=random.Random(seed))


async def sweep_once(
    s3: LocalS3 | str,
    bucket: str,
    source: WatermarkStore | None,
    *,
    override: int | None = None,
    plan: PlanWriter | None = None,
    **config: object,
) -> tuple[Sweeper, object]:
    endpoint = s3 if isinstance(s3, str) else s3.endpoint_url
    options: dict[str, object] = {"layout": LAYOUT, "grace_s": 60.0}
    options.update(config)
    async with S3ObjectStore.open(S3Settings(bucket, endpoint, "us-east-1")) as store:
        sweeper = Sweeper(
            store,
            RoundConfig(**options),
            plan=plan,  # type: ignore[arg-type]
            retrier=fast_retrier(),
        )
        result = await run_round(sweeper, SafetyGate(), source, override=override)
    return sweeper, result


async def test_exactly_the_right_keys_are_deleted(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """Only old, parsable keys under the root with epoch <= M are deleted."""
    deletable = seed_mixed(s3_server, bucket)
    before = s3_server.keys(bucket)
    _, result = await sweep_once(s3_server, bucket, watermarks)
    summary = result.summary  # type: ignore[attr-defined]
    assert before - s3_server.keys(bucket) == deletable
    assert summary.safe_epoch == SAFE
    assert summary.cluster_epoch == CLUSTER
    assert summary.deleted == len(deletable)
    assert summary.skipped_young == 2
    assert summary.errors == 0


async def test_malformed_partition_record_fails_closed(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """A malformed partition record blocks the round; nothing is listed or deleted."""
    seed_mixed(s3_server, bucket)
    before = s3_server.keys(bucket)
    await watermarks._kv.txn([], [Put(watermarks.partition_key("topic/bad"), b'{"version": 1}')])
    _, result = await sweep_once(s3_server, bucket, watermarks)
    summary = result.summary  # type: ignore[attr-defined]
    assert s3_server.keys(bucket) == before
    assert summary.outcome == "blocked"
    assert "topic/bad" in summary.blocked_reason
    assert summary.list_requests == 0


async def test_dry_run_plan_equals_real_run(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore, tmp_path: Path
) -> None:
    """The dry run deletes nothing and its plan is exactly what the real run deletes."""
    seed_mixed(s3_server, bucket)
    before = s3_server.keys(bucket)
    plan_path = tmp_path / "plan.jsonl"
    with PlanWriter(plan_path) as plan:
        await sweep_once(s3_server, bucket, watermarks, dry_run=True, plan=plan)
    assert s3_server.keys(bucket) == before
    planned = {json.loads(line)["key"] for line in plan_path.read_text().splitlines()}
    await sweep_once(s3_server, bucket, watermarks)
    assert before - s3_server.keys(bucket) == planned


async def test_two_shards_delete_what_one_sweeper_would(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """Shards 0 and 1 of 2 together delete exactly the single sweeper's set, disjointly."""
    deletable = seed_mixed(s3_server, bucket)
    before = s3_server.keys(bucket)
    per_shard = []
    for index in (0, 1):
        snapshot = s3_server.keys(bucket)
        await sweep_once(s3_server, bucket, watermarks, shard_index=index, shard_count=2)
        per_shard.append(snapshot - s3_server.keys(bucket))
    assert per_shard[0]
    assert per_shard[1]
    assert per_shard[0].isdisjoint(per_shard[1])
    assert per_shard[0] | per_shard[1] == deletable == before - s3_server.keys(bucket)


@pytest.mark.parametrize("list_concurrency", [1, 4])
async def test_list_requests_follow_the_garbage(
    s3_server: LocalS3, bucket: str, list_concurrency: int
) -> None:
    """With 100x more live than garbage objects, LISTs ~ garbage/1000 + prefixes touched."""
    prefixes = (3, 140, 555, 720, 999)
    garbage, live = [], []
    for prefix in prefixes:
        garbage += [LAYOUT.format(prefix, epoch, f"g{epoch}") for epoch in range(1, 41)]
        live += [LAYOUT.format(prefix, 1000 + i, "live") for i in range(4000)]
    s3_server.seed(bucket, garbage + live, last_modified=OLD)
    async with FaultProxy(s3_server.endpoint_url) as proxy:
        with capture_logs() as logs:
            _, result = await sweep_once(
                proxy.endpoint_url, bucket, None, override=40, list_concurrency=list_concurrency
            )
        server_lists = proxy.requests["list"]
        retried = proxy.server_errors["list"]  # moto answers 500 now and then: retried
    summary = result.summary  # type: ignore[attr-defined]
    assert s3_server.keys(bucket) == set(live)
    full_listing_pages = (len(garbage) + len(live)) // 1000 + 1  # 21
    listing_prefixes = 1 if list_concurrency == 1 else 10
    # a lister started late (the deleters waited on the listing) may take the back half
    # of a running lister's range: each range given away costs its own LIST at most, and
    # the giver's LIST sent ahead for the rest may be dropped. How many is timing.
    (listers,) = [e for e in logs if e["event"] == "sweep.listers"]
    given = listers["ranges_given"]
    if list_concurrency == 1:
        assert given == 0
    # each directory's 40 garbage keys take a probe of 32 keys and one of 128 (which
    # crosses into the live keys and skips), so pages carry few live keys
    bound = 2 * len(prefixes) + listing_prefixes + 1 + retried + 2 * given
    print(
        f"list_concurrency={list_concurrency}: LIST requests {summary.list_requests} "
        f"(server saw {server_lists}, ranges given away {given}), a full listing needs "
        f"{full_listing_pages}; deleted {summary.deleted} "
        f"in {summary.duration_s:.2f}s"
    )
    assert summary.list_requests == server_lists
    assert summary.list_requests <= bound
    if list_concurrency == 1:  # ten listing prefixes cost ten LISTs, most of them empty
        assert summary.list_requests < full_listing_pages
    assert summary.listed < len(live) / 10
    assert summary.listed <= 2 * len(garbage)  # examined: the garbage and a few live keys


async def test_slowdown_and_500_are_survived(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """25 % injected SlowDown/500 answers on LIST and DELETE lose nothing."""
    deletable = seed_mixed(s3_server, bucket)
    bulk = [LAYOUT.format(p, e, "bulk") for p in range(300, 340) for e in range(SAFE + 1)]
    s3_server.seed(bucket, bulk, last_modified=OLD)
    deletable |= set(bulk)
    before = s3_server.keys(bucket)
    faults = FaultConfig(share=0.25, codes=("SlowDown", "InternalError"), seed=5)
    async with FaultProxy(s3_server.endpoint_url, faults) as proxy:
        sweeper, result = await sweep_once(proxy.endpoint_url, bucket, watermarks, batch_size=20)
    summary = result.summary  # type: ignore[attr-defined]
    assert before - s3_server.keys(bucket) == deletable
    assert summary.errors == 0
    assert proxy.faults["SlowDown"] > 0
    assert proxy.faults["InternalError"] > 0
    # Which requests the seeded faults hit depends on arrival order: if a SlowDown answered
    # any DeleteObjects, the limiter must have cut its rate.
    slowed = proxy.faults_on["SlowDown", "delete"]
    assert sweeper.deleter.limiter.cuts >= min(slowed, 1)


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-22T03:12:50.000Z",
        "2026-11-22T03:12:50Z",
        "2026-11-22T03:12:50.123456789Z",
        "2026-11-22T03:12:50+01:00",
        "Sun, 22 Nov 2026 03:12:50 GMT",
        "1763780000",
        1763780000,
        "2026-13-40T00:00:00Z",
    ],
)
def test_s3_timestamp_parser_agrees_with_botocore(value: object) -> None:
    """The fast LastModified parser gives botocore's instant (or botocore's error) for any form."""
    try:
        expected = parse_timestamp(value)
    except ValueError:
        with pytest.raises(ValueError):
            parse_s3_timestamp(value)
        return
    parsed = parse_s3_timestamp(value)
    assert parsed.tzinfo is not None
    assert parsed.timestamp() == expected.timestamp()


async def test_listing_reads_last_modified_through_the_fast_parser(
    s3_server: LocalS3, bucket: str
) -> None:
    """ListObjectsV2 through S3ObjectStore gives each key's LastModified to the second."""
    stamped = datetime(2026, 11, 22, 3, 12, 50, tzinfo=UTC)
    keys = [LAYOUT.format(7, epoch, "seg.log") for epoch in range(3)]
    s3_server.seed(bucket, keys, last_modified=stamped)
    async with S3ObjectStore.open(S3Settings(bucket, s3_server.endpoint_url, "us-east-1")) as store:
        page = await store.list_page(ROOT + "/")
    assert [obj.key for obj in page.objects] == sorted(keys)
    assert {obj.last_modified_s for obj in page.objects} == {stamped.timestamp()}


class AfterFirstDelete:
    """An S3 store that runs `hook` once the first DeleteObjects request was answered."""

    def __init__(self, inner: S3ObjectStore, hook: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self.hook = hook
        self.deleted_by_request: list[int] = []

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        return await self.inner.list_page(prefix, **options)

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        result = await self.inner.delete_batch(keys)
        self.deleted_by_request.append(len(result.deleted))
        if len(self.deleted_by_request) == 1:
            await self.hook()
        return result


async def test_a_pause_stops_a_round_within_one_batch(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """Issue 13: 3,000 eligible objects, paused once the first batch is acknowledged: at most
    one more batch goes, the rest stays in the bucket and is reported as skipped."""
    keys = [
        LAYOUT.format(p, e, f"n{i}")
        for p in range(0, 1000, 10)
        for e in range(1, SAFE + 1)
        for i in range(6)
    ]
    assert len(keys) == 3000
    s3_server.seed(bucket, keys, last_modified=OLD)
    config = RoundConfig(
        layout=LAYOUT, grace_s=60.0, batch_size=100, concurrency=1, max_deletes_per_second=200
    )

    async def pause() -> None:
        await watermarks.set_paused("issue 13 finding 4")

    settings = S3Settings(bucket, s3_server.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as s3:
        store = AfterFirstDelete(s3, pause)
        sweeper = Sweeper(store, config, retrier=fast_retrier(), brake=PauseBrake(watermarks))
        result = await run_round(sweeper, SafetyGate(), watermarks)
    summary = result.summary
    left = s3_server.keys(bucket)
    deleted_after_pause = sum(store.deleted_by_request[1:])
    print(
        f"deleted {summary.deleted} ({store.deleted_by_request}), skipped_paused "
        f"{summary.skipped_paused}, left {len(left)}"
    )
    assert store.deleted_by_request[0] == 100
    assert deleted_after_pause <= 100
    assert len(left) == 3000 - summary.deleted
    assert summary.skipped_paused == summary.eligible - summary.deleted > 0
    assert summary.blocked_reason == "paused during the round: issue 13 finding 4"
    assert summary.outcome == "paused"
    assert summary.errors == 0


async def test_poison_keys_are_kept_and_every_other_key_deleted(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """Issue 13: keys with XML-invalid characters are never sent (moto fails the whole batch
    on them), every other key of their batch is deleted, and each is reported."""
    good = [LAYOUT.format(7, e, f"g{i}") for e in range(1, SAFE + 1) for i in range(200)]
    poison = [LAYOUT.format(7, 2, "bad\x01name"), LAYOUT.format(7, 3, "cr\rname")]
    s3_server.seed(bucket, good + poison, last_modified=OLD)
    async with FaultProxy(s3_server.endpoint_url) as proxy:
        _, result = await sweep_once(proxy.endpoint_url, bucket, watermarks)
        delete_requests = proxy.requests["delete"]
    summary = result.summary  # type: ignore[attr-defined]
    assert s3_server.keys(bucket) == set(poison)
    assert summary.deleted == len(good)
    assert summary.unsafe_keys == len(poison)
    assert summary.errors == 0
    # One request per batch, no retry: two full ones, plus the partial batch each shared
    # listing range sends as it ends (4 listers: issue 36, batches go as a range ends).
    assert delete_requests == summary.delete_requests <= 2 + 3


class RefusesOneKey:
    """Real S3, except that a request naming `bad` fails as a whole with MalformedXML, as
    S3 answers a body it cannot parse (moto answers 500 to those)."""

    def __init__(self, inner: S3ObjectStore, bad: set[str]) -> None:
        self.inner = inner
        self.bad = bad
        self.requests = 0

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        return await self.inner.list_page(prefix, **options)

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        self.requests += 1
        if self.bad & set(keys):
            raise StorageError(
                "The XML you provided was not well-formed or did not validate",
                code="MalformedXML",
                retryable=False,
            )
        return await self.inner.delete_batch(keys)


async def test_a_batch_failing_as_a_whole_is_bisected(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """A whole-batch MalformedXML is split until the bad key is alone: 999 keys deleted."""
    keys = [LAYOUT.format(9, e, f"k{i:03d}") for e in range(1, SAFE + 1) for i in range(200)]
    bad = {keys[421]}
    s3_server.seed(bucket, keys, last_modified=OLD)
    settings = S3Settings(bucket, s3_server.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as s3:
        store = RefusesOneKey(s3, bad)
        sweeper = Sweeper(store, RoundConfig(layout=LAYOUT, grace_s=60.0), retrier=fast_retrier())
        result = await run_round(sweeper, SafetyGate(), watermarks)
    summary = result.summary
    assert s3_server.keys(bucket) == bad
    assert summary.deleted == len(keys) - 1
    assert summary.unsafe_keys == 1
    assert summary.errors == 0
    assert store.requests <= 2 + 2 * 10  # the batches cut (a range's end sends its own), halves
