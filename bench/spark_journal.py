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


def main_bench() -> None:
    """Generate, run both sides alternately, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--server", choices=("rclone", "seaweedfs"), default="rclone")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "spark_journal")
    args = parser.parse_args()
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
