"""A delete task that fails after deleting, and is retried by Spark, leaves a complete
record: every deleted key is in decisions/ and summary.json's counters are exact.

The run is the real `gcd spark-sweep` in a child process on `local[2,2]` (two task
threads, a failed task tried twice), listing the bucket in ONE listing task. When the
S3 server has carried out the third DeleteObjects request, the test kills the Python
worker that sent it (found by its socket, among the child processes of the gcd run,
by PID), as an out-of-memory kill would: its task fails after deleting keys, and
Spark runs it again. Before the delete stage read its rows from a shuffle, the retry
re-listed the bucket and never saw the keys the failed attempt had deleted.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pandas as pd
import pytest

from l0gc import exitcodes
from l0lab.testing.local_servers import LocalS3
from tests.gcd.spark.s3tap import S3Tap, client_process

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SAFE_EPOCH = 10
BATCH = 5


def key(prefix: int, epoch: int) -> str:
    """A key of the default layout."""
    return f"level_zero/data/{prefix:03d}/{epoch:018d}/obj"


JOURNAL = "l0gc-audit/journal"


def _journal_keys(s3_server: LocalS3, bucket: str) -> set[str]:
    return {k for k in s3_server.keys(bucket) if k.startswith(JOURNAL + "/")}


def _befores(s3_server: LocalS3, bucket: str) -> dict[tuple[str, int], list[str]]:
    """(chain, request) -> keys of every before record in the journal's segments."""
    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    found: dict[tuple[str, int], list[str]] = {}
    for name in sorted(_journal_keys(s3_server, bucket)):
        if not name.endswith(".jsonl"):
            continue
        body = client.get_object(Bucket=bucket, Key=name)["Body"].read()
        for line in body.splitlines():
            doc = json.loads(line)
            if doc["type"] == "before":
                assert (doc["sweeper"], doc["request"]) not in found, doc
                found[(doc["sweeper"], doc["request"])] = doc["keys"]
    return found


def gcd_command() -> Path:
    """The `gcd` console script of this interpreter."""
    return Path(sys.executable).parent / "gcd"


def test_a_retried_delete_task_keeps_decisions_and_counters_exact(
    s3_server: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """After one task failure and its retry: exit 0, every eligible key deleted and in
    the decisions as deleted, summary deleted == eligible, delete_requests counts the
    successful attempts only (fewer than the server saw), and the journal has a before
    record for every request the server saw, in one chain per attempt."""
    eligible = {key(prefix, epoch) for prefix in range(0, 40, 2) for epoch in (3, 9)}
    live = {key(prefix, 20) for prefix in range(0, 40, 4)}
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, sorted(eligible | live), last_modified=old)
    out = tmp_path / "out"
    argv = [
        str(gcd_command()),
        "spark-sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
        "--list",
        "--list-tasks",
        "1",
        "--safe-epoch",
        str(SAFE_EPOCH),
        "--batch-size",
        str(BATCH),
        "--delete-concurrency",
        "2",
        "--master",
        "local[2,2]",
        "--conf",
        "spark.sql.execution.arrow.maxRecordsPerBatch=5",
        "--conf",
        "spark.ui.enabled=false",
        "--output",
        str(out),
        "--json",
        "--journal-prefix",
        JOURNAL,
    ]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    killed: list[int] = []
    runs: list[subprocess.Popen[str]] = []

    def kill_the_third_sender(number: int, environ: dict[str, object]) -> None:
        if number == 3:
            pid = client_process(environ, runs[0].pid)
            assert pid is not None, "no process of the gcd run sent DeleteObjects #3"
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    with S3Tap(s3_server, bucket, on_delete=kill_the_third_sender) as tap:
        runs.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
        try:
            stdout, stderr = runs[0].communicate(timeout=280)
        finally:
            if runs[0].poll() is None:
                runs[0].kill()
                runs[0].wait(timeout=30)
    assert runs[0].returncode == exitcodes.OK, stderr[-4000:]
    assert len(killed) == 1
    assert json.loads(stdout)["deleted"] == len(eligible)
    assert s3_server.keys(bucket) - _journal_keys(s3_server, bucket) == live
    summary = json.loads((out / "summary.json").read_text())
    counted = (summary["eligible"], summary["deleted"], summary["errors"])
    assert counted == (len(eligible), len(eligible), 0)
    assert summary["skipped_not_eligible"] == len(live)
    frame = pd.read_parquet(out / "decisions")
    actions = dict(zip(frame["key"], frame["action"], strict=True))
    assert {k for k, a in actions.items() if a == "deleted"} == eligible
    assert len(frame) == len(eligible | live)
    fewest = math.ceil(len(eligible) / BATCH)
    assert fewest <= summary["delete_requests"] < len(tap.deletes)
    assert summary["delete_tasks"] == 2
    # The journal: each attempt its own chain (the killed one, its retry, the other
    # task), every request the server saw has its before record, stored first (the
    # killed worker may have stored one more it never sent), and none is written twice.
    befores = _befores(s3_server, bucket)
    assert len({chain for chain, _ in befores}) == 3
    assert len(tap.deletes) <= len(befores) <= len(tap.deletes) + 1
    assert eligible <= {key for keys in befores.values() for key in keys}
