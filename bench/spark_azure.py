"""Throughput of `gcd spark-sweep --storage azure` on Azurite (listings: keys per second)
and from an Azure Blob Inventory report (rows per second).

Listing mode (default). Starts Azurite on loopback (`l0lab.testing.local_azurite`), and
for each run seeds a fresh container with `--keys` garbage blobs (epochs 1-10, M = 10)
spread over the 1000 prefixes plus one live blob per prefix (epoch 20), then runs, on
one local SparkSession (default local[2]; its start-up excluded):

- `gcd spark-sweep --dry-run --list` (executors list with List Blobs and skip-ahead);
- `gcd spark-sweep --list` (the same, then Blob Batch deletes of 256 from the executors).

Every deleting run must leave exactly the live blobs (checked). Azurite stamps its own
Last-Modified, so `--grace 0`.

Inventory mode (`--inventory`). Writes a Blob Inventory rule's run as Azure does
(https://learn.microsoft.com/azure/storage/blobs/blob-inventory: ``{rule}-manifest.json``
and `--files` CSV (or `--format parquet`) files under ``YYYY/MM/DD/HH-MM-SS/{rule}/``;
Name is ``container/blob``; Last-Modified as .NET round-trip text, or Parquet
millisecond timestamps) of `--rows` blobs: 1000 prefixes, epochs 1-200 (M = 150), 0.1%
unparsable names, 0.1% rows of another container, sizes 1 KiB-8 MiB, Last-Modified
over the last 10 days. Then `gcd spark-report` and `gcd spark-sweep --dry-run` read it
`--runs` times each after an untimed warm-up, with an account URL nobody answers at and
no credentials (a dry run or report from an inventory makes no Azure call). With
`--delete-keys K` (> 0), Azurite is started and each of `--runs` runs seeds K garbage
blobs and 1000 live ones, writes their inventory and times the deleting
`gcd spark-sweep --inventory` (claim probes, then Blob Batch deletes), checking that
exactly the live blobs are left.

Prints JSON: median seconds and keys/s or rows/s per command, and the load average (the
machine is shared: the numbers move with it).

    .venv/bin/python -m bench.spark_azure [--keys 3000] [--runs 3] [--master local[2]]
    .venv/bin/python -m bench.spark_azure --inventory [--rows 1000000] [--files 8]
        [--format csv] [--delete-keys 0] [--runs 3] [--master local[2]]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

from azure.storage.blob import BlobServiceClient  # noqa: E402

from gcd.cli.main import main  # noqa: E402
from gcd.spark.session import spark_session  # noqa: E402
from l0lab.testing.azinventory import Blob, container_blobs, write_blob_inventory  # noqa: E402
from l0lab.testing.local_azurite import LocalAzurite  # noqa: E402

SAFE_EPOCH = 10
INVENTORY_SAFE_EPOCH = 150
FIELDS = ("Name", "Creation-Time", "Last-Modified", "Content-Length", "BlobType", "AccessTier")
"""The benchmark rule's schema fields (the reader's three plus three Azure always has)."""
NOWHERE = "http://127.0.0.1:1/devstoreaccount1"  # nothing listens on port 1


def _key(prefix: int, epoch: int, index: int) -> str:
    return f"level_zero/data/{prefix:03d}/{epoch:018d}/b{index:06d}"


def seed(service: BlobServiceClient, keys: int) -> tuple[str, set[str]]:
    """A fresh container with `keys` garbage blobs and 1000 live ones; (name, live)."""
    name = f"bench-{uuid.uuid4().hex[:10]}"
    client = service.create_container(name)
    garbage = [_key(i % 1000, 1 + i % SAFE_EPOCH, i) for i in range(keys)]
    live = {_key(p, 20, 0) for p in range(1000)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.upload_blob(k, b"x", overwrite=True), [*garbage, *live]))
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


def synthetic_rows(container: str, rows: int, seed: int = 7) -> list[Blob]:
    """`rows` inventory rows of the module docs' mix."""
    rng = random.Random(seed)
    now = time.time()
    out = []
    for index in range(rows):
        roll = rng.random()
        where = container
        if roll < 0.001:
            name = f"level_zero/data/{index % 1000:03d}/notanepoch/u{index}"
        elif roll < 0.002:
            where, name = "other-container", f"level_zero/data/{index % 1000:03d}/{1:018d}/o{index}"
        else:
            name = f"level_zero/data/{index % 1000:03d}/{rng.randint(1, 200):018d}/b{index:08d}"
        size = rng.randint(1024, 8 << 20)
        modified = datetime.fromtimestamp(now - rng.uniform(0, 10 * 86400), UTC)
        out.append(Blob(where, name, size, modified))
    return out


def _timed_runs(argv: list[str], runs: int) -> list[float]:
    timed(argv)  # warm-up, untimed: the first job pays for code generation and caches
    return [timed(argv) for _ in range(runs)]


def inventory_bench(args: argparse.Namespace, work: Path) -> dict[str, object]:
    """The inventory mode (module docs): results by command."""
    results: dict[str, object] = {}
    container = "bench-l0"
    manifest = write_blob_inventory(
        work / "inv",
        NOWHERE,
        synthetic_rows(container, args.rows),
        file_format=args.format,
        file_count=args.files,
        fields=FIELDS,
    )
    common = [
        "--storage",
        "azure",
        "--account-url",
        NOWHERE,
        "--container",
        container,
        "--inventory",
        str(manifest),
        "--safe-epoch",
        str(INVENTORY_SAFE_EPOCH),
        "--master",
        args.master,
        "--log-level",
        "error",
        "--json",
    ]
    for label, argv in (
        ("spark-report --inventory", ["spark-report", *common, "--output", str(work / "r")]),
        (
            "spark-sweep --dry-run --inventory",
            ["spark-sweep", *common, "--dry-run", "--output", str(work / "s")],
        ),
    ):
        runs = _timed_runs(argv, args.runs)
        median = statistics.median(runs)
        results[label] = {
            "median_s": round(median, 2),
            "rows_per_s": round(args.rows / median),
            "runs_s": [round(r, 2) for r in runs],
        }
    if args.delete_keys > 0:
        results["spark-sweep --inventory (deleting, Azurite)"] = _deleting_inventory(args, work)
    return results


def _deleting_inventory(args: argparse.Namespace, work: Path) -> dict[str, object]:
    azurite = LocalAzurite().start()
    try:
        conn = azurite.write_connection_string(work / "conn")
        service = BlobServiceClient.from_connection_string(azurite.connection_string)
        runs = []
        for run in range(args.runs):
            name, live = seed(service, args.delete_keys)
            client = service.get_container_client(name)
            manifest = write_blob_inventory(
                work / f"dinv-{run}",
                azurite.account_url,
                container_blobs(client),
                file_count=4,
                fields=FIELDS,
            )
            argv = [
                "spark-sweep",
                "--storage",
                "azure",
                "--account-url",
                azurite.account_url,
                "--container",
                name,
                "--azure-connection-string-file",
                str(conn),
                "--inventory",
                str(manifest),
                "--safe-epoch",
                str(SAFE_EPOCH),
                "--grace",
                "0",
                "--master",
                args.master,
                "--log-level",
                "error",
                "--json",
                "--output",
                str(work / f"dout-{run}"),
            ]
            runs.append(timed(argv))
            left = {b.name for b in client.list_blobs()}
            if left != live:
                raise SystemExit(f"inventory sweep: {len(left)} blobs left, expected {len(live)}")
            service.delete_container(name)
    finally:
        azurite.stop()
    median = statistics.median(runs)
    return {
        "median_s": round(median, 2),
        "keys_per_s": round(args.delete_keys / median, 1),
        "runs_s": [round(r, 2) for r in runs],
    }


def main_bench() -> None:
    """Start Azurite, seed, run, check, print JSON (or the inventory mode)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--inventory",
        action="store_true",
        help="time spark-report / spark-sweep --dry-run from a Blob Inventory",
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv")
    parser.add_argument(
        "--delete-keys",
        type=int,
        default=0,
        help="also time a deleting sweep from an inventory of K blobs",
    )
    args = parser.parse_args()
    if args.inventory:
        work = Path(tempfile.mkdtemp(prefix="l0gc-bench-spark-azinv-"))
        conf = {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}
        try:
            with spark_session(args.master, app_name="l0gc-bench", conf=conf):
                timings = inventory_bench(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        sys.stdout.write(
            json.dumps(
                {
                    "benchmark": "spark_azure --inventory",
                    "rows": args.rows,
                    "files": args.files,
                    "format": args.format,
                    "delete_keys": args.delete_keys,
                    "master": args.master,
                    "cpus": os.cpu_count(),
                    "runs": args.runs,
                    "load_average_1m_after": round(os.getloadavg()[0], 1),
                    "results": timings,
                },
                indent=2,
            )
            + "\n"
        )
        return
    work = Path(tempfile.mkdtemp(prefix="l0gc-bench-spark-azure-"))
    azurite = LocalAzurite().start()
    results: dict[str, object] = {}
    try:
        conn = azurite.write_connection_string(work / "conn")
        service = BlobServiceClient.from_connection_string(azurite.connection_string)
        conf = {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}
        with spark_session(args.master, app_name="l0gc-bench", conf=conf):
            for label, extra in (
                ("spark-sweep --dry-run --list", ["--dry-run"]),
                ("spark-sweep --list", []),
            ):
                runs = []
                for run in range(args.runs):
                    name, live = seed(service, args.keys)
                    argv = [
                        "spark-sweep",
                        "--storage",
                        "azure",
                        "--account-url",
                        azurite.account_url,
                        "--container",
                        name,
                        "--azure-connection-string-file",
                        str(conn),
                        "--list",
                        "--safe-epoch",
                        str(SAFE_EPOCH),
                        "--grace",
                        "0",
                        "--master",
                        args.master,
                        "--log-level",
                        "error",
                        "--json",
                        "--output",
                        str(work / f"out-{run}"),
                        *extra,
                    ]
                    runs.append(timed(argv))
                    left = {b.name for b in service.get_container_client(name).list_blobs()}
                    expected = len(live) + (args.keys if extra else 0)
                    if len(left) != expected or not live <= left:
                        raise SystemExit(f"{label}: {len(left)} blobs left, expected {expected}")
                    service.delete_container(name)
                median = statistics.median(runs)
                results[label] = {
                    "median_s": round(median, 2),
                    "keys_per_s": round(args.keys / median, 1),
                    "runs_s": [round(r, 2) for r in runs],
                }
    finally:
        azurite.stop()
        shutil.rmtree(work, ignore_errors=True)
    document = {
        "benchmark": "spark_azure",
        "garbage_keys": args.keys,
        "live_keys": 1000,
        "master": args.master,
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "load_average_1m_after": round(os.getloadavg()[0], 1),
        "results": results,
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main_bench()
