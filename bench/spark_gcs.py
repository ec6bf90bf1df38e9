"""`gcd spark-sweep --storage gcs` on the GCS emulator: keys deleted per second (issue 41).

Not part of `python -m bench` (a Spark session of its own; run it alone):

    python -m bench.spark_gcs --keys 3000 --live 1000 --runs 3

Each run seeds the bucket afresh (the emulator's batch copies, outside the timing):
`--keys` eligible keys and `--live` live ones over 10 prefixes, then runs the command
in this process through `gcd.cli.main.main` on one local[2] session made first (its
start is excluded). Sides: a listing sweep that deletes (`--list`), a sweep from a
generated Storage Insights CSV report that deletes (`--inventory`: the claim probes of
an inventory sweep included), and a listing dry run. Every deleting run is checked to
leave exactly the live keys. The emulator is a single Python process on the same two
cores: its per-request cost, not GCS's, bounds these numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gcd.cli.main import main
from l0lab.testing.local_gcs import LocalGcs

_SAFE = 100


def _keys(eligible: int, live: int) -> tuple[list[str], list[str]]:
    def key(index: int, epoch: int) -> str:
        return f"level_zero/data/{index % 10:03d}/{epoch:018d}/k{index:06d}"

    return (
        [key(i, 1 + i % _SAFE) for i in range(eligible)],
        [key(i, _SAFE + 1 + i % 50) for i in range(live)],
    )


def _report(directory: Path, bucket: str, names: list[str]) -> Path:
    """A Storage Insights CSV report (two shards and the manifest), as GCS writes it."""
    directory.mkdir(parents=True, exist_ok=True)
    old = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    fields = ["bucket", "name", "size", "updated", "generation"]
    shards = []
    for index in range(2):
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(fields)
        writer.writerows([bucket, name, 1, old, 1] for name in names[index::2])
        shard = f"cfg_2026-11-28T00:00_{index}.csv"
        (directory / shard).write_text(text.getvalue(), encoding="utf-8")
        shards.append(shard)
    manifest = directory / "cfg_2026-11-28T00:00_manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "report_config": {
                    "csv_options": {"delimiter": ",", "header_required": True},
                    "object_metadata_report_options": {
                        "metadata_fields": fields,
                        "storage_filters": {"bucket": bucket},
                    },
                },
                "snapshot_time": "2026-11-28T00:00:00Z",
                "shard_count": 2,
                "report_shards_file_names": shards,
            }
        ),
        encoding="utf-8",
    )
    return manifest


def _session() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-gcs")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")


def _run(server: LocalGcs, bucket: str, out: Path, *extra: str) -> tuple[float, dict[str, object]]:
    argv = [
        "spark-sweep",
        "--storage",
        "gcs",
        "--gcs-anonymous",
        "--bucket",
        bucket,
        "--endpoint-url",
        server.endpoint_url,
        "--safe-epoch",
        str(_SAFE),
        "--grace",
        "0s",
        "--output",
        str(out),
        "--json",
        "--log-level",
        "error",
        *extra,
    ]
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    wall = time.perf_counter() - started
    summary = json.loads((out / "summary.json").read_text())
    if code != 0:
        raise SystemExit(f"{argv}: exit {code}: {summary}")
    return wall, summary


def main_bench(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=3000, help="eligible keys (default 3000)")
    parser.add_argument("--live", type=int, default=1000, help="live keys (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per side (default 3)")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    eligible, live = _keys(args.keys, args.live)
    _session()
    sides = {
        "list, deleting": ("--list", "--list-tasks", "10"),
        "inventory (CSV), deleting": ("--inventory",),
        "list, --dry-run": ("--list", "--list-tasks", "10", "--dry-run"),
    }
    with LocalGcs() as server, tempfile.TemporaryDirectory(prefix="l0gc-bench-") as scratch:
        for side, flags in sides.items():
            walls = []
            for run in range(args.runs):
                bucket = f"l0gc-bench-{len(walls)}-{run}-{abs(hash(side)) % 1000}"
                server.create_bucket(bucket)
                server.seed(bucket, eligible + live)
                extra = list(flags)
                if flags == ("--inventory",):
                    extra.append(str(_report(Path(scratch) / bucket, bucket, eligible + live)))
                wall, summary = _run(server, bucket, Path(scratch) / f"out-{bucket}", *extra)
                if "--dry-run" not in flags:
                    left = server.keys(bucket)
                    if left != set(live):
                        raise SystemExit(f"{side}: {len(left)} keys left, not the {len(live)} live")
                    assert summary["deleted"] == len(eligible), summary
                else:
                    assert summary["would_delete"] == len(eligible), summary
                walls.append(wall)
                server.empty(bucket)
            middle = statistics.median(walls)
            runs = ", ".join(f"{w:.2f}" for w in walls)
            print(f"| {side} | {middle:.2f} | {len(eligible) / middle:,.0f} | {runs} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_bench())
