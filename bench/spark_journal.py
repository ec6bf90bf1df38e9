"""What the Spark deletion journal costs: `gcd spark-sweep` from a 1M-row S3 Inventory,
deleting, with `--journal-prefix` against without, on a cheap S3 server.

Generates the inventory of `bench.spark_inventory` (default 1,000,000 rows, ~75 % of
them eligible at M = 150), starts `rclone serve s3 :memory:` on loopback (the server must
not be the bound: SeaweedFS spends ~1 ms per deleted key, `--server seaweedfs`), and runs
the same deleting
`gcd spark-sweep` on one local SparkSession, alternating journal off / on (after one
untimed warm-up of each), `--runs` times each. The keys do not exist in the bucket: a
DeleteObjects of a missing key succeeds, so every run sends the same requests (one per
1,000 eligible rows), and with the journal one segment PUT more per request. Prints
JSON: the median wall of each side, rows/s, and the ratio.

    .venv/bin/python -m bench.spark_journal [--rows 1000000] [--runs 3] [--master local[2]]
        [--server rclone|seaweedfs]

`--batch-cost` measures the journal alone, without Spark: one task's `TaskJournal`
storing a segment per 1,000-key batch on rclone (60 batches, the first 5 dropped), against
the DeleteObjects of the same keys: the medians of wall and client CPU per batch.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.spark_inventory import BUCKET, SAFE_EPOCH, generate, timed  # noqa: E402
from gcd.spark.session import spark_session  # noqa: E402
from l0lab.testing.local_rclone import LocalRclone  # noqa: E402
from l0lab.testing.local_seaweedfs import LocalSeaweedFS  # noqa: E402

PREFIX = "l0gc-audit/journal"


def batch_cost(batches: int = 60) -> dict[str, float]:
    """Wall and client CPU (ms) of journaling one 1,000-key batch, and of its delete."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # rclone's --auth-key
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis  # noqa: PLC0415
    from gcd.spark.journal import SparkJournal  # noqa: PLC0415
    from gcd.storage.s3.executor import S3Target  # noqa: PLC0415

    keys = tuple(
        f"level_zero/data/{i % 1000:03d}/{i % 200:018d}/{i * 7919:032x}.parquet"
        for i in range(1000)
    )
    basis = DeleteBasis(150, 200, 12345, (("orders/1", 150),), round_id="local-1.abcdef")
    header = (("application", "local-1"), ("bucket", BUCKET), ("root", "level_zero/data"))
    journaled: list[tuple[float, float]] = []
    deleted: list[float] = []
    with LocalRclone() as server:
        server.client().create_bucket(Bucket=BUCKET)
        client = S3Target(BUCKET, server.endpoint_url, "us-east-1").connect(pool=4)
        journal = SparkJournal(PREFIX, basis, header).task(client, "spark-bench-p0-t1")
        for _ in range(batches):
            request = journal.next_request()
            attempt = BatchAttempt(basis, keys, tuple(5 for _ in keys), 0, request, request)
            wall, cpu = time.perf_counter(), time.process_time()
            journal.before(attempt)
            journal.after(BatchOutcome(attempt, deleted=keys))
            journaled.append((time.perf_counter() - wall, time.process_time() - cpu))
            wall = time.perf_counter()
            client.delete_keys(list(keys))
            deleted.append(time.perf_counter() - wall)
        journal.close()
    kept = journaled[5:]
    return {
        "journal_wall_ms": round(statistics.median(w for w, _ in kept) * 1000, 1),
        "journal_cpu_ms": round(statistics.median(c for _, c in kept) * 1000, 1),
        "delete_wall_ms": round(statistics.median(deleted[5:]) * 1000, 1),
    }


def main_bench() -> None:
    """Generate, run both sides alternately, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--server", choices=("rclone", "seaweedfs"), default="rclone")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "spark_journal")
    parser.add_argument("--batch-cost", action="store_true", help="the journal alone, no Spark")
    args = parser.parse_args()
    if args.batch_cost:
        document = {"benchmark": "spark_journal --batch-cost", **batch_cost()}
        sys.stdout.write(json.dumps(document) + "\n")
        return
    manifest = generate(args.out / "report", args.rows, args.files)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # both servers' test key
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    conf = {"spark.ui.enabled": "false", "spark.driver.memory": "2g"}
    server = LocalRclone() if args.server == "rclone" else LocalSeaweedFS()
    with server, spark_session(args.master, app_name="l0gc-bench", conf=conf):
        server.client().create_bucket(Bucket=BUCKET)
        common = [
            "spark-sweep",
            "--bucket",
            BUCKET,
            "--endpoint-url",
            server.endpoint_url,
            "--region",
            "us-east-1",
            "--inventory",
            str(manifest),
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--master",
            args.master,
            "--log-level",
            "error",
            "--json",
            "--output",
            str(args.out / "sweep-out"),
        ]
        sides = {"journal off": common, "journal on": [*common, "--journal-prefix", PREFIX]}
        walls: dict[str, list[float]] = {name: [] for name in sides}
        saved = sys.stdout
        sys.stdout = io.StringIO()  # the commands' own --json output
        try:
            for argv in sides.values():
                timed(argv)  # warm-up
            for _ in range(args.runs):
                for name, argv in sides.items():
                    walls[name].append(timed(argv))
            summary = json.loads((args.out / "sweep-out" / "summary.json").read_text())
        finally:
            sys.stdout = saved
        segments = sum(
            1
            for page in server.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=BUCKET, Prefix=PREFIX + "/")
            for _ in page.get("Contents", ())
        )
    medians = {name: statistics.median(runs) for name, runs in walls.items()}
    document = {
        "benchmark": "spark_journal",
        "rows": args.rows,
        "eligible_per_run": summary["deleted"],
        "delete_requests_per_run": summary["delete_requests"],
        "master": args.master,
        "server": args.server,
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "load_average_1m_after": round(os.getloadavg()[0], 1),
        "journal_objects_written_in_all": segments,
        "results": {
            name: {
                "median_s": round(medians[name], 2),
                "rows_per_s": round(args.rows / medians[name]),
                "runs_s": [round(r, 2) for r in walls[name]],
            }
            for name in sides
        },
        "journal_on_over_off": round(medians["journal on"] / medians["journal off"], 3),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main_bench()
