"""Every path that reads partition records turns a hostile one into a block, never a crash.

The hostile record is 100 000 nested arrays (json.loads raised RecursionError on it):
the daemon, `gcd sweep`, the admission spark jobs share, and a publisher's adopt, all
against a real etcd (and a real S3 server where objects are swept).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from gcd.cli.main import main
from gcd.rules.admission import SafetyGate
from gcd.rules.layout import KeyLayout
from gcd.service.daemon import Daemon, DaemonConfig
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.safety import read_admission
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0gc import exitcodes
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.errors import InvalidRecord
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.publishing import Publishing

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
DEEP = b"[" * 100_000
CONFIG = DaemonConfig(interval_s=1, idle_interval_s=1, max_interval_s=1, full_pass_interval_s=1)


async def prepare(etcd: LocalEtcd, namespace: str) -> None:
    """Cluster epoch 10, partition 'p' owned by 'owner' at M(p) 5, and 't/deep' = DEEP."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    store = WatermarkStore(kv, namespace)
    try:
        await store.init_cluster_epoch(1)
        await store.register_partition("p")
        owned = await store.acquire_ownership("p", "owner")
        for _ in range(9):
            await store.advance_cluster_epoch()
        await store.publish_one(Publication("p", "owner", owned.owner_epoch, 5))
        await kv.txn([], [Put(store.partition_key("t/deep"), DEEP)])
    finally:
        await kv.close()


@pytest.fixture
async def watermarks(etcd_server: LocalEtcd, namespace: str) -> AsyncIterator[WatermarkStore]:
    """A store on the `prepare`d namespace."""
    await prepare(etcd_server, namespace)
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    try:
        yield WatermarkStore(kv, namespace)
    finally:
        await kv.close()


def seed_garbage(s3: LocalS3, bucket: str) -> set[str]:
    """Old objects at epochs 1-5 (garbage once M is 5) and 6-9 (live); returns the garbage."""
    garbage = {LAYOUT.format(p, e, "g") for p in (1, 700) for e in range(1, 6)}
    live = [LAYOUT.format(p, e, "live") for p in (1, 700) for e in range(6, 10)]
    s3.seed(bucket, [*garbage, *live], last_modified=datetime.now(UTC) - timedelta(hours=2))
    return garbage


async def test_the_daemon_reports_blocked_stays_up_and_sweeps_once_fixed(
    s3_server: LocalS3, bucket: str, watermarks: WatermarkStore
) -> None:
    """A 100k-deep record: run_once reports blocked naming it; fixed, the next one sweeps."""
    garbage = seed_garbage(s3_server, bucket)
    before = s3_server.keys(bucket)
    settings = S3Settings(bucket=bucket, endpoint_url=s3_server.endpoint_url, region="us-east-1")
    async with S3ObjectStore.open(settings) as objects:
        sweeper = Sweeper(objects, RoundConfig(layout=LAYOUT, grace_s=60))
        daemon = Daemon(sweeper, watermarks, CONFIG, rng=random.Random(0))
        await daemon.run_once()
        assert daemon.admission is not None
        reason = str(daemon.admission.blocked_reason)
        assert "partition 't/deep'" in reason
        assert "nested more than 16 levels" in reason
        assert daemon.metrics.blocked._value.get() == 1
        ready, why = daemon.readiness()
        assert not ready
        assert "t/deep" in why
        assert s3_server.keys(bucket) == before
        # The fix: the broken record is replaced by a freshly registered one (M(p) 9).
        assert await watermarks.deregister_partition("t/deep")
        assert (await watermarks.register_partition("t/deep")).watermark == 9
        await daemon.run_once()
        assert daemon.admission.allowed
        assert daemon.readiness() == (True, "ok")
    assert before - s3_server.keys(bucket) == garbage


def test_sweep_exits_blocked_and_deletes_nothing(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gcd sweep` with a 100k-deep record: exit 3, the partition named, every key kept."""
    asyncio.run(prepare(etcd_server, namespace))
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    seed_garbage(s3_server, bucket)
    before = s3_server.keys(bucket)
    argv = [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
        "--root",
        ROOT,
        "--grace",
        "1m",
        "--json",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
    ]
    code = main(argv)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == exitcodes.BLOCKED
    assert "partition 't/deep'" in summary["blocked_reason"]
    assert summary["deleted"] == 0
    assert s3_server.keys(bucket) == before


async def test_the_spark_admission_and_a_publisher_adopt_refuse_cleanly(
    watermarks: WatermarkStore,
) -> None:
    """read_admission (spark's and sweep's) is blocked; adopt raises InvalidRecord, then works."""
    admission = await read_admission(SafetyGate(), watermarks)
    assert not admission.allowed
    assert "partition 't/deep'" in str(admission.blocked_reason)
    publisher = Publishing(watermarks).publisher("pub-a")
    try:
        with pytest.raises(InvalidRecord, match=r"partition 't/deep'.*nested more than 16"):
            await publisher.adopt("t/deep")
        assert publisher.partitions == []
        await publisher.adopt("p")
        assert publisher.partitions == ["p"]
    finally:
        await publisher.shutdown()
