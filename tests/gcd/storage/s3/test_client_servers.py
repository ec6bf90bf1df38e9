"""The sweeper on each real S3 server: moto (an emulator) and SeaweedFS (a real store).

Every test runs once per server (`s3_any`) with a real etcd. Objects cannot be back-dated
on SeaweedFS, so objects are aged by the sweeper's clock (`OLD_CLOCK`: two hours ahead).
The last tests pin down SeaweedFS's deviations from AWS (see l0lab/testing/local_seaweedfs.py) and
show that none of them makes the sweeper delete a key it must keep.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gcd.observe.report import PlanWriter, RoundResult
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0gc.contract.namespace import Publication
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.faultproxy import FaultConfig, FaultProxy
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalEtcd, LocalS3

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
SAFE = 5
CLUSTER = 8
GRACE_S = 600.0
S3Server = LocalS3 | LocalSeaweedFS


def old_clock() -> float:
    """The sweeper's clock two hours ahead: everything just written is past the grace."""
    return time.time() + 7200


@pytest.fixture
async def watermarks(etcd_server: LocalEtcd, namespace: str) -> AsyncIterator[WatermarkStore]:
    """M = SAFE (one partition), cluster epoch CLUSTER, on the real etcd."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    store = WatermarkStore(kv, namespace)
    await store.init_cluster_epoch(1)
    await store.register_partition("topic/0")
    owned = await store.acquire_ownership("topic/0", "publisher-1")
    for _ in range(CLUSTER - 1):
        await store.advance_cluster_epoch()
    await store.publish_one(Publication("topic/0", "publisher-1", owned.owner_epoch, SAFE))
    try:
        yield store
    finally:
        await kv.close()


def mixed_keys() -> tuple[list[str], set[str]]:
    """Epochs below/at/above M and keys the layout does not produce, and the deletable
    ones among them (shared with tests/gcd/sweep/test_sweeper_s3.py)."""
    deletable: set[str] = set()
    keys: list[str] = []
    for prefix in (0, 1, 250, 417, 500, 998, 999):
        for epoch in (0, 3, SAFE):
            key = LAYOUT.format(prefix, epoch, f"seg-{epoch}.log")
            keys.append(key)
            deletable.add(key)
        keys += [LAYOUT.format(prefix, epoch, "live.log") for epoch in (SAFE + 1, CLUSTER, 99)]
    keys += [
        f"{ROOT}/417/{3:018d}",  # no name
        f"{ROOT}/417/3/short-epoch",
        f"{ROOT}/4x7/{3:018d}/x",
        f"{ROOT}/README",
        f"other/417/{3:018d}/x",
        f"level_zero/data-old/417/{3:018d}/x",
        f"level_zero/{3:018d}/x",
        f"{ROOT}/417/-{3:017d}/x",
    ]
    return keys, deletable


def seed_mixed(server: S3Server, bucket: str) -> set[str]:
    """Seed `mixed_keys()` (all just written); return the deletable ones."""
    keys, deletable = mixed_keys()
    server.seed(bucket, keys)
    return deletable


async def sweep(
    endpoint: str,
    bucket: str,
    source: WatermarkStore | None,
    *,
    override: int | None = None,
    clock: object = old_clock,
    plan: PlanWriter | None = None,
    **config: object,
) -> RoundResult:
    """One round of a sweeper with a fast retrier."""
    options: dict[str, object] = {"layout": LAYOUT, "grace_s": GRACE_S}
    options.update(config)
    retrier = Retrier(Backoff(base_s=0.01, cap_s=0.2, max_attempts=10), rng=random.Random(0))
    async with S3ObjectStore.open(S3Settings(bucket, endpoint, "us-east-1")) as store:
        sweeper = Sweeper(
            store,
            RoundConfig(**options),
            plan=plan,
            retrier=retrier,  # type: ignore[arg-type]
            clock=clock,
        )  # type: ignore[arg-type]
        return await run_round(sweeper, SafetyGate(), source, override=override)


async def test_exactly_the_right_keys_are_deleted(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore
) -> None:
    """At or below M and old enough: deleted; everything else kept."""
    deletable = seed_mixed(s3_any, any_bucket)
    before = s3_any.keys(any_bucket)
    result = await sweep(s3_any.endpoint_url, any_bucket, watermarks)
    assert before - s3_any.keys(any_bucket) == deletable
    assert result.summary.deleted == len(deletable)
    assert result.summary.errors == 0


async def test_objects_younger_than_the_grace_are_kept(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore
) -> None:
    """The server's own LastModified holds garbage back until the grace has passed."""
    garbage = [LAYOUT.format(12, epoch, "g") for epoch in range(1, SAFE + 1)]
    s3_any.seed(any_bucket, garbage)
    young = await sweep(s3_any.endpoint_url, any_bucket, watermarks, clock=time.time)
    assert s3_any.keys(any_bucket) == set(garbage)
    assert young.summary.skipped_young == len(garbage)
    await sweep(s3_any.endpoint_url, any_bucket, watermarks)
    assert s3_any.keys(any_bucket) == set()


async def test_dry_run_plan_equals_real_run(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore, tmp_path: Path
) -> None:
    """The dry run deletes nothing; its plan is exactly what the real run deletes."""
    seed_mixed(s3_any, any_bucket)
    before = s3_any.keys(any_bucket)
    plan_path = tmp_path / "plan.jsonl"
    with PlanWriter(plan_path) as plan:
        await sweep(s3_any.endpoint_url, any_bucket, watermarks, dry_run=True, plan=plan)
    assert s3_any.keys(any_bucket) == before
    planned = {json.loads(line)["key"] for line in plan_path.read_text().splitlines()}
    await sweep(s3_any.endpoint_url, any_bucket, watermarks)
    assert before - s3_any.keys(any_bucket) == planned


async def test_list_requests_follow_the_garbage(s3_any: S3Server, any_bucket: str) -> None:
    """30 live objects per garbage object: skip-ahead lists a few pages per prefix, not
    the whole bucket, and deletes every garbage key."""
    prefixes = (3, 555, 999)
    garbage, live = [], []
    for prefix in prefixes:
        garbage += [LAYOUT.format(prefix, epoch, f"g{epoch}") for epoch in range(1, 21)]
        live += [LAYOUT.format(prefix, 1000 + i, "live") for i in range(600)]
    s3_any.seed(any_bucket, garbage + live)
    async with FaultProxy(s3_any.endpoint_url) as proxy:
        result = await sweep(
            proxy.endpoint_url, any_bucket, None, override=20, page_size=100, list_concurrency=1
        )
        server_lists = proxy.requests["list"]
        retried = proxy.server_errors["list"]  # the server's own 500s are retried
    summary = result.summary
    assert s3_any.keys(any_bucket) == set(live)
    full_listing = (len(garbage) + len(live)) // 100 + 1
    assert summary.list_requests == server_lists
    assert summary.list_requests <= 2 * len(prefixes) + 2 + retried, (
        summary.list_requests,
        full_listing,
    )


async def test_slowdown_and_500_are_survived(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore
) -> None:
    """25 % injected SlowDown/500 answers on LIST and DELETE lose nothing."""
    deletable = seed_mixed(s3_any, any_bucket)
    before = s3_any.keys(any_bucket)
    faults = FaultConfig(share=0.25, seed=3, codes=("SlowDown", "InternalError"))
    async with FaultProxy(s3_any.endpoint_url, faults) as proxy:
        result = await sweep(proxy.endpoint_url, any_bucket, watermarks, batch_size=4)
        injected = sum(proxy.faults.values())
    assert injected > 0
    assert before - s3_any.keys(any_bucket) == deletable
    assert result.summary.errors == 0


async def test_thousands_of_keys_in_full_batches(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore
) -> None:
    """2,500 garbage keys: 1,000-key DeleteObjects and LIST pages (the most S3 allows;
    SeaweedFS refuses a 1,001-key delete and does not cap MaxKeys, so the sweeper must
    never ask for more): all deleted, nothing failed. Three DeleteObjects requests when
    the listing took the keys in one range; up to three more when its (at most four)
    streams split them, since each range sends its partial batch as it ends (issue 36)."""
    keys = [LAYOUT.format(21, 1 + i % SAFE, f"k{i:05d}") for i in range(2500)]
    live = [LAYOUT.format(21, SAFE + 1, "live")]
    s3_any.seed(any_bucket, keys + live)
    async with FaultProxy(s3_any.endpoint_url) as proxy:
        result = await sweep(proxy.endpoint_url, any_bucket, watermarks)
        deletes = proxy.requests["delete"]
    assert s3_any.keys(any_bucket) == set(live)
    assert result.summary.deleted == 2500
    assert result.summary.errors == 0
    assert 3 <= deletes <= 6


@pytest.mark.parametrize("page_size", [1, 2, 3, 1000])
async def test_stray_names_sorting_out_of_byte_order_change_nothing(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore, page_size: int
) -> None:
    """Names that continue below '/' (`417-a`, `417.a`) list in byte order on moto, after
    the `417/...` keys on SeaweedFS (folder order): whatever the page boundaries, every
    garbage key is deleted and every stray and live key kept."""
    garbage = [LAYOUT.format(p, e, "g") for p in (417, 418) for e in (1, SAFE)]
    live = [LAYOUT.format(p, e, "live") for p in (417, 418) for e in (SAFE + 1, 50)]
    strays = [f"{ROOT}/417-a", f"{ROOT}/417.a", f"{ROOT}/417-z/{1:018d}/g", f"{ROOT}/4170"]
    s3_any.seed(any_bucket, garbage + live + strays)
    result = await sweep(s3_any.endpoint_url, any_bucket, watermarks, page_size=page_size)
    assert s3_any.keys(any_bucket) == set(live + strays)
    assert result.summary.deleted == len(garbage)


async def test_a_double_slash_key_is_judged_by_the_name_the_server_keeps(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore
) -> None:
    """moto keeps `a//b` as written: outside the layout, kept. SeaweedFS stores it as
    `a/b`: it is then an ordinary layout key, judged by its epoch like any other; the
    sweeper never deletes a key the listing did not return, nor one above M."""
    written = {
        "live": f"{ROOT}//418/{SAFE + 1:018d}/x",
        "garbage": f"{ROOT}/418//{SAFE:018d}/y",
    }
    s3_any.seed(any_bucket, list(written.values()))
    listed = s3_any.keys(any_bucket)
    await sweep(s3_any.endpoint_url, any_bucket, watermarks)
    left = s3_any.keys(any_bucket)
    if isinstance(s3_any, LocalSeaweedFS):
        assert listed == {LAYOUT.format(418, SAFE + 1, "x"), LAYOUT.format(418, SAFE, "y")}
        assert left == {LAYOUT.format(418, SAFE + 1, "x")}
    else:
        assert listed == set(written.values()) == left


async def test_keys_with_xml_special_and_unicode_characters_are_deleted_exactly(
    s3_any: S3Server, any_bucket: str, watermarks: WatermarkStore
) -> None:
    """The lean XML path (`gcd.storage.s3.wire`) lists and deletes keys with XML-special,
    unicode, '+', '%' and space characters as their exact names, on both servers; a key
    with a carriage return is kept and reported (XML cannot name it), as before."""
    names = [
        "a&b",
        "<tag>",
        "q\"u'o",
        "x+y",
        "50%25",
        "sp ace",
        "tab\tnl\nend",
        "é日本🎉",
        "amp&amp;",
        "~!@#$^*()=[]{}|;:,?",
    ]
    garbage = [LAYOUT.format(7, 1 + i % SAFE, name) for i, name in enumerate(names)]
    live = [LAYOUT.format(7, SAFE + 1, name) for name in names]
    unsafe = LAYOUT.format(7, 1, "cr\rhere")
    s3_any.seed(any_bucket, [*garbage, *live, unsafe])
    assert s3_any.keys(any_bucket) == {*garbage, *live, unsafe}  # stored as written
    result = await sweep(s3_any.endpoint_url, any_bucket, watermarks, page_size=3)
    assert s3_any.keys(any_bucket) == {*live, unsafe}
    assert result.summary.deleted == len(garbage)
    assert result.summary.unsafe_keys == 1
