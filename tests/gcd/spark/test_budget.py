"""The namespace's delete rate budget (`gcd.spark.budget`): a Spark job takes over the
rate its daemons announce while it holds the namespace, never more."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gcd.spark.budget import RateBudget, read_budget
from gcd.sweep.shards import ShardAnnouncement
from l0gc import exitcodes
from l0gc.contract.kv import Put
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3

from .test_sweep import etcd_args, gcd, gcd_args, summary

KEYS = [f"level_zero/data/{p:03d}/{5:018d}/k{i}" for p in range(4) for i in range(5)]


def _daemon(name: str, rate: float | None) -> bytes:
    return ShardAnnouncement(name, 0, 1, 1.0, max_deletes_per_second=rate).encode()


def test_the_job_takes_the_daemons_budget_and_never_more() -> None:
    assert RateBudget(2, 30.0, None).rate == 30.0
    assert RateBudget(2, 30.0, 10.0).rate == 10.0
    assert RateBudget(2, 30.0, 50.0).rate == 30.0
    assert RateBudget(1, None, 50.0).rate == 50.0  # an unlimited daemon: no budget
    assert RateBudget(0, None, None).rate is None


async def test_the_budget_is_the_sum_unlimited_when_one_daemon_is() -> None:
    kv = MemoryKV()
    prefix = "/ns/sweepers/"
    assert await read_budget(kv, prefix, 5.0) == RateBudget(0, None, 5.0)
    await kv.txn([], [Put(prefix + "a", _daemon("a", 10.0)), Put(prefix + "b", _daemon("b", 20))])
    assert await read_budget(kv, prefix, None) == RateBudget(2, 30.0, None)
    await kv.txn([], [Put(prefix + "c", b"garbage")])  # unreadable: left out, logged
    assert await read_budget(kv, prefix, None) == RateBudget(2, 30.0, None)
    await kv.txn([], [Put(prefix + "d", _daemon("d", None))])
    assert await read_budget(kv, prefix, 7.0) == RateBudget(3, None, 7.0)


def test_an_announcement_carries_its_rate_and_refuses_a_bad_one() -> None:
    assert ShardAnnouncement.decode(_daemon("a", 12.5)).max_deletes_per_second == 12.5
    assert ShardAnnouncement.decode(_daemon("a", None)).max_deletes_per_second is None
    for bad in (b"0", b"-1", b"true", b'"5"'):
        raw = _daemon("a", 1.0).replace(
            b'"max_deletes_per_second":1.0', b'"max_deletes_per_second":' + bad
        )
        with pytest.raises(ValueError, match="max_deletes_per_second"):
            ShardAnnouncement.decode(raw)


@pytest.mark.spark
@pytest.mark.integration
async def test_a_spark_job_runs_at_the_budget_its_daemons_announce(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Any,
    watermark_store: WatermarkStore,
    tmp_path: Path,
) -> None:
    s3_server.seed(bucket, KEYS, last_modified=datetime.now(UTC) - timedelta(hours=2))
    await set_safe_epoch(10, 20)
    sweepers = watermark_store.sweepers_prefix
    await watermark_store.kv.txn(
        [], [Put(sweepers + "d1", _daemon("d1", 400.0)), Put(sweepers + "d2", _daemon("d2", 600))]
    )
    out = tmp_path / "out"
    argv = gcd_args(s3_server, bucket, out, "--list", "--max-deletes-per-second", "5000")
    assert await gcd([*argv, *etcd_args(etcd_server, namespace)]) == exitcodes.OK
    done = summary(out)
    assert done["rate"] == {
        "max_deletes_per_second": 1000.0,
        "namespace_budget": 1000.0,
        "daemons": 2,
        "flag": 5000.0,
    }
    assert done["deleted"] == len(KEYS)
