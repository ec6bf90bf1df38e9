"""Throughput of `gcd spark-sweep --storage azure --list` on Azurite: keys per second.

Starts Azurite on loopback (`l0lab.testing.local_azurite`), and for each run seeds a
fresh container with `--keys` garbage blobs (epochs 1-10, M = 10) spread over the 1000
prefixes plus one live blob per prefix (epoch 20), then runs, on one local SparkSession
(default local[2]; its start-up excluded):

- `gcd spark-sweep --dry-run --list` (executors list with List Blobs and skip-ahead);
- `gcd spark-sweep --list` (the same, then Blob Batch deletes of 256 from the executors).

Every deleting run must leave exactly the live blobs (checked). Prints JSON: median
seconds and keys/s per command over `--runs` runs, and the load average (the machine
is shared: the numbers move with it). Azurite stamps its own Last-Modified, so `--grace 0`.

    .venv/bin/python -m bench.spark_azure [--keys 3000] [--runs 3] [--master local[2]]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

from azure.storage.blob import BlobServiceClient  # noqa: E402

from gcd.cli.main import main  # noqa: E402
from gcd.spark.session import spark_session  # noqa: E402
from l0lab.testing.local_azurite import LocalAzurite  # noqa: E402

SAFE_EPOCH = 10


def _key(prefix: int, epoch: int, index: int) -> str:
    return f"level_zero/data/{prefix:03d}/{epoch:018d}/b{index:06d}"


def seed(service: BlobServiceClient, keys: int) -> tuple[str, set[str]]:
    """A fresh container with `keys` garbage blobs and 1000 live ones; (name, live)."""
    name = f"bench-{uuid.uuid4().hex[:10]}"
    client = service.create_container(name)
    garbage = [_key(i % 1000, 1 + i % SAFE_EPOCH, i) for i in range(keys)]
    live = {_key(p, 20, 0) for p in range(1000)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.upload_blob(k, b"x", overwrite=True),
                      [*garbage, *live]))  # fmt: skip
    return name, live


def timed(argv: list[str]) -> float:
    """Seconds one gcd invocation takes; it must exit 0."""
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        started = time.perf_counter()
        code = main(argv)
        elapsed = time.perf_counter() - started
    finally:
        sys.stdout = saved
    if code != 0:
        raise SystemExit(f"{argv[0]} exited {code}")
    return elapsed


def main_bench() -> None:
    """Start Azurite, seed, run, check, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="l0gc-bench-spark-azure-"))
    azurite = LocalAzurite().start()
    results: dict[str, object] = {}
    try:
        conn = azurite.write_connection_string(work / "conn")
        service = BlobServiceClient.from_connection_string(azurite.connection_string)
        conf = {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}
        with spark_session(args.master, app_name="l0gc-bench", conf=conf):
            for label, extra in (("spark-sweep --dry-run --list", ["--dry-run"]),
                                 ("spark-sweep --list", [])):  # fmt: skip
                runs = []
                for run in range(args.runs):
                    name, live = seed(service, args.keys)
                    argv = ["spark-sweep", "--storage", "azure", "--account-url",
                            azurite.account_url, "--container", name,
                            "--azure-connection-string-file", str(conn), "--list",
                            "--safe-epoch", str(SAFE_EPOCH), "--grace", "0", "--master",
                            args.master, "--log-level", "error", "--json", "--output",
                            str(work / f"out-{run}"), *extra]  # fmt: skip
                    runs.append(timed(argv))
                    left = {b.name for b in service.get_container_client(name).list_blobs()}
                    expected = len(live) + (args.keys if extra else 0)
                    if len(left) != expected or not live <= left:
                        raise SystemExit(f"{label}: {len(left)} blobs left, expected {expected}")
                    service.delete_container(name)
                median = statistics.median(runs)
                results[label] = {"median_s": round(median, 2),
                                  "keys_per_s": round(args.keys / median, 1),
                                  "runs_s": [round(r, 2) for r in runs]}  # fmt: skip
    finally:
        azurite.stop()
    document = {
        "benchmark": "spark_azure", "garbage_keys": args.keys, "live_keys": 1000,
        "master": args.master, "cpus": os.cpu_count(), "runs": args.runs,
        "load_average_1m_after": round(os.getloadavg()[0], 1), "results": results,
    }  # fmt: skip
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main_bench()
