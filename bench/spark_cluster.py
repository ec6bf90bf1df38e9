"""The Spark pipeline on a standalone cluster beside local[2], on the same data.

Starts the in-process S3 server (moto) and a standalone master + one worker of
`--cores` cores on loopback (`l0lab.testing.spark_cluster`), executors on a venv with only
boto3, pandas and pyarrow (cached under .venv-spark-exec/) and l0gc shipped by
`gcd spark-package`. For each master (the cluster, then local[N] with N = --cores) it
seeds the same bucket (`--keys` eligible objects over the 1000 prefixes, a tenth as
many live ones) and times, as a user runs them (`gcd` in a child process, JVM start
included), `spark-report --list`, `spark-sweep --list --dry-run` and
`spark-sweep --list`. Then, on the cluster, a sweep with `--max-deletes-per-second`
`--rate` whose DeleteObjects are counted at the server (tests/gcd/spark/s3tap.py):
the bucket-wide rate measured against the limit. Prints JSON.

    .venv/bin/python -m bench.spark_cluster [--keys 20000] [--cores 2] [--rate 1000]

M comes from --safe-epoch (no etcd): the binding is the tests' business.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from gcd.spark.package import build_package  # noqa: E402
from l0lab.testing.local_servers import LocalS3  # noqa: E402
from l0lab.testing.spark_cluster import LocalSparkCluster, executor_python  # noqa: E402
from tests.gcd.spark.s3tap import S3Tap  # noqa: E402

BUCKET = "bench-spark-cluster"
SAFE_EPOCH = 10


def seed(s3: LocalS3, keys: int) -> set[str]:
    """`keys` eligible objects and keys // 10 live ones, two hours old; the eligible set."""
    s3.create_bucket(BUCKET)
    s3.delete_bucket_contents(BUCKET)
    eligible = {
        f"level_zero/data/{i % 1000:03d}/{1 + i % SAFE_EPOCH:018d}/{i:08d}" for i in range(keys)
    }
    live = {
        f"level_zero/data/{i % 1000:03d}/{SAFE_EPOCH + 5:018d}/{i:08d}" for i in range(keys // 10)
    }
    s3.seed(BUCKET, sorted(eligible | live), last_modified=datetime.now(UTC) - timedelta(hours=2))
    return eligible


def gcd(argv: list[str]) -> tuple[float, dict[str, Any]]:
    """Seconds and --json document of one `gcd` run in a child process (must exit 0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "gcd"), *argv, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"gcd {argv[0]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run both masters, then the rate run; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="l0gc-bench-spark-cluster-"))
    python = executor_python(REPO / ".venv-spark-exec", REPO / "constraints.txt")
    package = build_package(work / "l0gc-spark.zip")
    results: dict[str, Any] = {}
    with LocalS3() as s3, LocalSparkCluster(work / "cluster", cores=args.cores) as cluster:
        base = [
            "--bucket",
            BUCKET,
            "--endpoint-url",
            s3.endpoint_url,
            "--region",
            "us-east-1",
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--list",
            "--conf",
            "spark.ui.enabled=false",
            "--log-level",
            "error",
        ]
        masters = {
            "standalone": [
                "--master",
                cluster.master_url,
                "--py-files",
                str(package.path),
                "--conf",
                f"spark.pyspark.python={python}",
            ],
            f"local[{args.cores}]": ["--master", f"local[{args.cores}]"],
        }
        for name, master in masters.items():
            eligible = seed(s3, args.keys)
            out = work / name
            runs = {}
            for label, argv in (
                ("spark-report", ["spark-report", *base, *master, "--output", str(out / "r")]),
                (
                    "spark-sweep --dry-run",
                    [
                        "spark-sweep",
                        *base,
                        *master,
                        "--dry-run",
                        "--output",
                        str(out / "d"),
                        "--decisions-uri",
                        (out / "d" / "decisions").as_uri(),
                    ],
                ),
                (
                    "spark-sweep",
                    [
                        "spark-sweep",
                        *base,
                        *master,
                        "--output",
                        str(out / "s"),
                        "--decisions-uri",
                        (out / "s" / "decisions").as_uri(),
                    ],
                ),
            ):
                seconds, document = gcd(argv)
                runs[label] = round(seconds, 1)
            assert document["deleted"] == len(eligible), document
            results[name] = runs
        eligible = seed(s3, args.keys)
        with S3Tap(s3, BUCKET) as tap:
            seconds, document = gcd(
                [
                    "spark-sweep",
                    *base,
                    *masters["standalone"],
                    "--output",
                    str(work / "rate"),
                    "--decisions-uri",
                    (work / "rate" / "decisions").as_uri(),
                    "--max-deletes-per-second",
                    str(args.rate),
                    "--batch-size",
                    "100",
                ]
            )
        assert document["deleted"] == len(eligible), document
        results["rate"] = {
            "limit_keys_per_s": args.rate,
            "measured_keys_per_s": round(tap.keys_per_second(), 1),
            "most_keys_in_1s": tap.most_keys_within(1.0),
            "delete_requests_at_server": len(tap.deletes),
            "delete_tasks": document["delete_tasks"],
            "seconds": round(seconds, 1),
        }
    document = {
        "benchmark": "spark_cluster",
        "eligible_keys": args.keys,
        "live_keys": args.keys // 10,
        "worker_cores": args.cores,
        "cpus": os.cpu_count(),
        "load_average_1m_after": round(os.getloadavg()[0], 1),
        "seconds": results,
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
