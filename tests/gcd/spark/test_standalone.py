"""`gcd spark-*` on a Spark standalone cluster whose executors do NOT have l0gc.

As a user runs it: a master and one 4-core worker from the pip pyspark on loopback
(`l0lab.testing.spark_cluster`, stopped by PID), executors on a virtualenv with only boto3,
pandas and pyarrow (`executor_python`, cached under .venv-spark-exec/ by constraints
hash), l0gc shipped as the `gcd spark-package` zip with --py-files, the executors'
Python named with --conf spark.pyspark.python. The driver is the `gcd` console script
in a child process, M comes from etcd through the namespace binding.

It runs spark-report, spark-sweep --dry-run and spark-sweep against the S3 server (and
a dry run and a sweep against the GCS emulator, `--storage gcs`) and
checks: the tasks ran on the executor (Spark's event log), exactly the eligible keys
were deleted, and --max-deletes-per-second held for the whole bucket (DeleteObjects
counted per second at the server: one executor of 4 cores used to get 4x the limit).
The rate is checked against what the token buckets allow whatever the scheduler does
(`most_keys_allowed`), not against what a run usually achieves.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from l0lab.testing.spark_cluster import LocalSparkCluster, executor_python
from tests.gcd.spark.s3tap import S3Tap

# A standalone master and worker JVM beside the session's Spark: minutes on a loaded
# 2-core machine (300 s was not enough with four pytest workers; one run beside other
# suites took 390 s, a single spark-report 127 s). Both limits only catch a hang.
# The deep tier: two clusters of JVMs cost ~7 minutes of the everyday tier's 15; every
# Spark code path they drive runs in the everyday tier on the local SparkSession.
pytestmark = [
    pytest.mark.deep,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.timeout(1800),
]
GCD_TIMEOUT_S = 600
"""The most one `gcd spark-*` command may take (a hang guard, ~5x a loaded run's)."""

ROOT = Path(__file__).resolve().parents[3]
SAFE_EPOCH, CLUSTER_EPOCH = 10, 20
CORES = 4
RATE = 100.0  # keys per second, for the whole job
BATCH = 10
DELETE_CONCURRENCY = 8  # --delete-concurrency (the default): requests in flight, whole job


JOURNAL = "l0gc-audit/journal"


def key(prefix: int, epoch: int) -> str:
    """A key of the default layout."""
    return f"level_zero/data/{prefix:03d}/{epoch:018d}/obj"


ELIGIBLE = {key(prefix, 1 + prefix % SAFE_EPOCH) for prefix in range(600)}
LIVE = {key(prefix, SAFE_EPOCH + 1 + prefix % 5) for prefix in range(0, 600, 10)}
YOUNG = {key(prefix, 2) for prefix in range(700, 710)}
UNPARSABLE = {f"level_zero/data/{prefix:03d}/not-an-epoch/obj" for prefix in range(800, 805)}


@pytest.fixture(scope="session")
def executor_venv_python() -> Path:
    """The executors' Python: boto3, pandas, pyarrow, and no l0gc."""
    python = executor_python(ROOT / ".venv-spark-exec", ROOT / "constraints.txt")
    # -I: no current directory (this checkout) and no PYTHON* variables on the path.
    has = subprocess.run(
        [str(python), "-I", "-c", "import boto3, pandas, pyarrow"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert has.returncode == 0, has.stderr
    lacks = subprocess.run(
        [str(python), "-I", "-c", "import gcd"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "No module named 'gcd'" in lacks.stderr
    return python


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    """A standalone master and one 4-core worker on loopback, stopped by PID after."""
    cluster = LocalSparkCluster(tmp_path_factory.mktemp("spark-standalone"), cores=CORES)
    with cluster:
        yield cluster


def gcd_command() -> str:
    """The `gcd` console script of this interpreter."""
    return str(Path(sys.executable).parent / "gcd")


async def gcd(*argv: str) -> tuple[int, dict[str, Any], float]:
    """Run `gcd argv --json` as a user would; (exit code, JSON document, seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    started = time.monotonic()
    done = await asyncio.to_thread(
        subprocess.run,
        [gcd_command(), *argv, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=GCD_TIMEOUT_S,
        check=False,
    )
    seconds = time.monotonic() - started
    assert done.stdout.strip(), done.stderr[-4000:]
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), seconds


def event_logs(events: Path) -> set[Path]:
    """Spark's event logs under `events` (one per application; a dot file is a checksum)."""
    return {path for path in events.rglob("*") if path.is_file() and not path.name.startswith(".")}


def executor_ids(events: Path) -> list[str]:
    """The executor of every finished task in Spark's event logs under `events`."""
    ran = []
    for log in event_logs(events):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                ran.append(str(event["Task Info"]["Executor ID"]))
    return ran


def writing_tasks(logs: set[Path]) -> dict[int, list[tuple[int, int]]]:
    """Per stage that wrote records (a sweep's delete stage: its tasks delete, then write
    the decisions), (launch, finish) in ms of each of its successful tasks."""
    ended = []
    for log in logs:
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                ended.append(event)
    writing = {
        event["Stage ID"]
        for event in ended
        if (event.get("Task Metrics") or {}).get("Output Metrics", {}).get("Records Written", 0) > 0
    }
    tasks: dict[int, list[tuple[int, int]]] = {stage: [] for stage in writing}
    for event in ended:
        if event["Stage ID"] in writing and event["Task End Reason"]["Reason"] == "Success":
            info = event["Task Info"]
            tasks[event["Stage ID"]].append((int(info["Launch Time"]), int(info["Finish Time"])))
    return tasks


def most_keys_allowed(window_s: float, tasks: int) -> float:
    """The most keys the token buckets let reach the server within any `window_s`, however
    the executors, the server and the machine are scheduled.

    Each of the `tasks` delete tasks paces its keys with a token bucket of RATE / tasks
    per second holding at most one second's worth (`burst`), reserved one request (at
    most BATCH keys) at a time by each of its `threads`, before it is sent. The keys
    whose wait ends within a window are at most rate x window plus the bucket's burst,
    or plus the one batch reserved before the window whose wait ends in it
    (`gcd.storage.ratelimit.TokenBucket`); a request whose wait ended BEFORE the window
    may reach the server inside it (sent late, the executor or the server paused): each
    thread has one such request at most, since it waits for the answer before it
    reserves again. So a pause bunches up at most a batch per thread, never a pause's
    worth of keys."""
    rate = RATE / tasks
    burst = max(1.0, rate)  # TokenBucket's default: one second's worth
    threads = max(1, DELETE_CONCURRENCY // tasks)  # DeleteSettings.for_job
    return RATE * window_s + tasks * (max(burst, BATCH) + threads * BATCH)


async def test_report_dry_run_and_sweep_run_on_executors_without_l0gc(
    standalone: LocalSparkCluster,
    executor_venv_python: Path,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    tmp_path: Path,
) -> None:
    """Report, dry run and sweep give the same eligible set; the sweep deletes exactly it,
    on the executor, at no more than --max-deletes-per-second for the whole bucket."""
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, sorted(ELIGIBLE | LIVE | UNPARSABLE), last_modified=old)
    s3_server.seed(bucket, sorted(YOUNG))
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)
    everything = s3_server.keys(bucket)
    code, package, _ = await gcd("spark-package", "--output", str(tmp_path / "l0gc-spark.zip"))
    assert code == exitcodes.OK
    events = tmp_path / "events"
    events.mkdir()
    common = [
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
        "--list",
        "--list-tasks",
        "8",
        "--master",
        standalone.master_url,
        "--py-files",
        package["path"],
        "--conf",
        f"spark.pyspark.python={executor_venv_python}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.executor.memory=1g",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir={events.as_uri()}",
        "--conf",
        "spark.eventLog.compress=false",
        "--conf",
        "spark.eventLog.rolling.enabled=false",
    ]

    code, report, report_s = await gcd("spark-report", *common, "--output", str(tmp_path / "r"))
    assert code == exitcodes.OK, report
    assert (report["eligible_objects"], report["in_grace_objects"]) == (len(ELIGIBLE), len(YOUNG))
    assert (report["live_objects"], report["unparsable_objects"]) == (len(LIVE), len(UNPARSABLE))

    code, dry, dry_s = await gcd(
        "spark-sweep",
        *common,
        "--dry-run",
        "--output",
        str(tmp_path / "dry"),
        "--decisions-uri",
        (tmp_path / "dry" / "decisions").as_uri(),
    )
    assert code == exitcodes.OK, dry
    assert (dry["would_delete"], dry["deleted"]) == (len(ELIGIBLE), 0)
    assert s3_server.keys(bucket) == everything

    before = event_logs(events)
    with S3Tap(s3_server, bucket) as tap:
        code, swept, sweep_s = await gcd(
            "spark-sweep",
            *common,
            "--output",
            str(tmp_path / "sweep"),
            "--decisions-uri",
            (tmp_path / "sweep" / "decisions").as_uri(),
            "--max-deletes-per-second",
            str(RATE),
            "--batch-size",
            str(BATCH),
            "--delete-concurrency",
            str(DELETE_CONCURRENCY),
            "--journal-prefix",
            JOURNAL,
        )
    assert code == exitcodes.OK, swept
    journaled = {k for k in s3_server.keys(bucket) if k.startswith(JOURNAL + "/")}
    assert s3_server.keys(bucket) - journaled == everything - ELIGIBLE
    # Every batch journaled on the executor before it was sent; the run verifies
    # against etcd (every chain anchored by the driver) as a sweeper's journal does.
    store = ["--bucket", bucket, "--endpoint-url", s3_server.endpoint_url, "--region", "us-east-1"]
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    code, verified, _ = await gcd("journal", "verify", *store, "--journal-prefix", JOURNAL, *etcd)
    assert (code, verified["verdict"]) == (exitcodes.OK, "OK"), verified
    assert claim_key("level_zero/data") in everything - ELIGIBLE
    assert (swept["eligible"], swept["deleted"], swept["errors"]) == (len(ELIGIBLE),) * 2 + (0,)
    # One executor holding all 4 cores: 4 delete tasks, each with a quarter of the rate.
    assert swept["delete_tasks"] == CORES
    assert sum(a.keys for a in tap.deletes) == len(ELIGIBLE)
    assert all(a.keys <= BATCH for a in tap.deletes)
    # The limit held, in every window, counted at the server: a pause (a loaded machine)
    # bunches requests up but cannot add keys beyond `most_keys_allowed`. 4x the rate
    # (each task with the whole of it) sends all 600 keys within ~1 s, 2x within ~2 s.
    arrivals = [a.at for a in tap.deletes]
    span = max(arrivals) - min(arrivals)
    for window in (0.5, 1.0, 2.0, 4.0, span):
        most, allowed = tap.most_keys_within(window), most_keys_allowed(window, CORES)
        assert most <= allowed, f"{most} keys within {window:.2f} s, allowed {allowed}"
    # Not starved: the job-wide rate is shared by exactly CORES tasks (RATE / CORES each,
    # tests/gcd/spark/test_cluster_options.py) and all of them deleted at the same time,
    # so their shares add up to the limit (tasks run one after another would get a
    # quarter of it). Their launch and end, not their speed: each paces ~150 keys at 25/s,
    # so it lasts >= 4 s whatever the machine does, and Spark launches the 4 on the 4
    # free cores at once.
    stages = writing_tasks(event_logs(events) - before)
    assert len(stages) == 1, stages  # the decisions, written as the keys are deleted
    (deleting,) = stages.values()
    assert len(deleting) == swept["delete_tasks"], deleting
    assert max(launch for launch, _ in deleting) < min(end for _, end in deleting), deleting
    ran = executor_ids(events)
    assert ran, "no task finished in the event logs"
    assert set(ran) == {"0"}  # the worker's one executor; never "driver"
    print(  # the numbers bench/RESULTS.md quotes (pytest -s)
        f"\nstandalone timings: report {report_s:.1f}s, dry run {dry_s:.1f}s, sweep "
        f"{sweep_s:.1f}s; delete rate {tap.keys_per_second():.1f} keys/s (limit {RATE}), "
        f"most in 2.0s: {tap.most_keys_within(2.0)} (allowed {most_keys_allowed(2.0, CORES)}); "
        f"delete tasks launched within {max(s for s, _ in deleting) - min(s for s, _ in deleting)}"
        f" ms, lasting {sorted(round((e - s) / 1000, 1) for s, e in deleting)} s"
    )


async def test_gcs_dry_run_and_sweep_run_on_executors_without_l0gc(
    standalone: LocalSparkCluster,
    executor_venv_python: Path,
    gcs_server: LocalGcs,
    gcs_bucket: str,
    tmp_path: Path,
) -> None:
    """--storage gcs on the same cluster: the executors (no l0gc, no google-auth: an
    anonymous emulator needs urllib3 only) list the bucket and delete exactly the
    eligible objects in JSON batches; a dry run first names the same set."""
    gcs_server.seed(gcs_bucket, sorted(ELIGIBLE | LIVE | UNPARSABLE))
    everything = gcs_server.keys(gcs_bucket)
    code, package, _ = await gcd("spark-package", "--output", str(tmp_path / "l0gc-spark.zip"))
    assert code == exitcodes.OK
    events = tmp_path / "events"
    events.mkdir()
    common = [
        "--storage",
        "gcs",
        "--gcs-anonymous",
        "--bucket",
        gcs_bucket,
        "--endpoint-url",
        gcs_server.endpoint_url,
        "--safe-epoch",
        str(SAFE_EPOCH),
        "--grace",
        "0s",
        "--list",
        "--list-tasks",
        "8",
        "--master",
        standalone.master_url,
        "--py-files",
        package["path"],
        "--conf",
        f"spark.pyspark.python={executor_venv_python}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.executor.memory=1g",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir={events.as_uri()}",
        "--conf",
        "spark.eventLog.compress=false",
        "--conf",
        "spark.eventLog.rolling.enabled=false",
    ]
    code, dry, _ = await gcd(
        "spark-sweep",
        *common,
        "--dry-run",
        "--output",
        str(tmp_path / "dry"),
        "--decisions-uri",
        (tmp_path / "dry" / "decisions").as_uri(),
    )
    assert code == exitcodes.OK, dry
    assert (dry["would_delete"], dry["deleted"]) == (len(ELIGIBLE), 0)
    assert gcs_server.keys(gcs_bucket) == everything
    code, swept, _ = await gcd(
        "spark-sweep",
        *common,
        "--output",
        str(tmp_path / "sweep"),
        "--decisions-uri",
        (tmp_path / "sweep" / "decisions").as_uri(),
        "--max-deletes-per-second",
        str(RATE * 5),
    )
    assert code == exitcodes.OK, swept
    assert gcs_server.keys(gcs_bucket) == everything - ELIGIBLE
    assert (swept["eligible"], swept["deleted"], swept["errors"]) == (len(ELIGIBLE),) * 2 + (0,)
    assert swept["delete_requests"] >= len(ELIGIBLE) // 100  # batches of at most 100
    ran = executor_ids(events)
    assert ran, "no task finished in the event logs"
    assert set(ran) == {"0"}  # the worker's one executor; never "driver"
