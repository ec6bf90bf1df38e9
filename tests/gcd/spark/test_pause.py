"""`gcd pause` reaches a running `gcd spark-sweep`: executors ask the driver's brake
before each delete batch (`gcd.spark.brake`), so the job stops within the batches
already under way, ends with exit 3, and its summary says where it stopped. While it
runs, the job holds the namespace (`gcd.spark.announce`): `gcd status` shows it and a
second job refuses."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gcd.spark.brake import BrakeClient, DriverBrake
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0gc.contract.spark_job import spark_job_key
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.waiting import wait_until

from .test_sweep import etcd_args, gcd, gcd_args

pytestmark = [pytest.mark.spark, pytest.mark.integration]

CLAIM = claim_key("level_zero/data")
KEYS = [f"level_zero/data/{p:03d}/{5:018d}/k{i:03d}" for p in range(40) for i in range(50)]
"""2,000 eligible keys (epoch 5 <= M 10)."""
TASKS, BATCH, RATE = 2, 50, 200.0


async def test_gcd_pause_stops_a_running_job_within_the_requests_under_way(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Any,
    watermark_store: WatermarkStore,
    tmp_path: Path,
) -> None:
    """Paused once deleting has begun, the job sends no request it had not already
    started: what is deleted after the pause is bounded by the requests under way and
    one brake read, every other eligible key is kept and reported `skipped_paused`."""
    s3_server.seed(bucket, KEYS, last_modified=datetime.now(UTC) - timedelta(hours=2))
    await set_safe_epoch(10, 20)
    out = tmp_path / "out"
    argv = gcd_args(s3_server, bucket, out, "--list", "--batch-size", str(BATCH))
    argv += ["--delete-tasks", str(TASKS), "--delete-concurrency", str(TASKS)]
    argv += ["--max-deletes-per-second", str(RATE), *etcd_args(etcd_server, namespace)]
    job = asyncio.ensure_future(gcd(argv))

    def left() -> int:
        return len(s3_server.keys(bucket) - {CLAIM})

    # From before its Spark session starts, the job holds the namespace: gcd status
    # shows it, and a second job refuses.
    key = spark_job_key(namespace)
    await wait_until(lambda: watermark_store.kv.get(key), timeout_s=120, what="announced")
    status = await status_json(etcd_server, namespace)
    assert status["spark_job"]["command"] == "spark-sweep"
    assert status["spark_job"]["max_deletes_per_second"] == RATE
    second = gcd_args(s3_server, bucket, tmp_path / "second", "--list")
    assert await gcd([*second, *etcd_args(etcd_server, namespace)]) == exitcodes.BLOCKED
    refused = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert "a Spark job is sweeping this namespace" in refused["blocked_reason"]
    assert status["spark_job"]["job_id"] in refused["blocked_reason"]
    await wait_until(lambda: left() <= len(KEYS) - 2 * BATCH, timeout_s=180, what="deleting")
    pause = ["pause", "--reason", "a wrong M(p)", *etcd_args(etcd_server, namespace)]
    assert await gcd(pause) == exitcodes.OK
    at_pause = left()
    code = await asyncio.wait_for(job, 300)
    assert code == exitcodes.BLOCKED
    kept = left()
    # Under way at the pause: one request per task sent and one pacing; then the time
    # the pause takes to reach the executors (the driver reads it every 0.2 s; 2 s
    # allowed on a loaded machine) at the job's rate: 600 of the 1,900 keys left.
    assert at_pause - kept <= TASKS * 2 * BATCH + RATE * 2.0
    assert kept >= len(KEYS) // 2  # without the brake, the job would have deleted them all
    done = json.loads((out / "summary.json").read_text())
    assert done["stopped"]["reason"] == "paused during the round: a wrong M(p)"
    assert "gcd resume" in done["stopped"]["resume"]
    assert done["blocked_reason"] == done["stopped"]["reason"]
    assert (done["skipped_paused"], done["deleted"]) == (kept, len(KEYS) - kept)
    assert done["eligible"] == len(KEYS)
    assert (await status_json(etcd_server, namespace))["spark_job"] is None  # gone with it
    frame = pd.read_parquet(out / "decisions")
    actions = dict(zip(frame["key"], frame["action"], strict=True))
    assert {k for k, a in actions.items() if a == "skipped_paused"} == s3_server.keys(bucket) - {
        CLAIM
    }


async def status_json(etcd_server: LocalEtcd, namespace: str) -> dict[str, Any]:
    """`gcd status --json` of the namespace, run as the operator runs it."""
    argv = ["status", "--json", *etcd_args(etcd_server, namespace)]
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "gcd", *argv], capture_output=True, timeout=120
    )
    assert done.returncode in (exitcodes.OK, exitcodes.BLOCKED), done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def test_an_executor_stops_when_the_driver_does_not_answer() -> None:
    """Fail closed: a brake that cannot be reached, or answers nonsense, stops the task,
    and the stop is final even once the driver answers again."""
    brake = DriverBrake()
    url = brake.serve("127.0.0.1")
    client = BrakeClient(url, timeout_s=2.0)
    try:
        assert client.check() is None
        wrong = BrakeClient(url + "-not-the-token", timeout_s=2.0)
        assert (wrong.check() or "").startswith("pause state unknown: the driver's brake")
        assert brake.stop("paused during the round: x")
        assert not brake.stop("another reason")  # the first reason stands
        assert client.check() == "paused during the round: x"
    finally:
        brake.close()
    gone = BrakeClient(url, timeout_s=2.0)
    assert (gone.check() or "").startswith("pause state unknown: the driver's brake did not")
    assert client.check() == "paused during the round: x"
