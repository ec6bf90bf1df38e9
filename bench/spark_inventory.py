"""Throughput of the Spark pipeline on an S3 Inventory report: rows per second.

Generates a synthetic inventory (default 1,000,000 rows, CSV.gz in 8 data files plus
a manifest.json, laid out as S3 writes it) under bench/out/, then runs
`gcd spark-report` and `gcd spark-sweep --dry-run` on it N times each (after an
untimed warm-up run) on one local SparkSession (default local[2]; its start-up is
measured separately) and prints JSON: median seconds and rows/s per command. The
load average is printed too: on a shared machine the numbers move with it.

No S3 server or etcd is needed: M comes from --safe-epoch and a dry run makes no
S3 call. The data: 1000 prefixes, epochs 1-200 (M = 150), 0.1% unparsable keys,
0.1% keys outside the root, sizes 1 KiB-8 MiB, LastModified over the last 10 days.

    .venv/bin/python -m bench.spark_inventory [--rows 1000000] [--runs 3] [--master local[2]]

`--versions` writes an inventory of all versions (IncludedObjectVersions All: VersionId,
IsLatest, IsDeleteMarker) of a versioned bucket instead: every key has a non-current
version before its current one, and one key in ten a delete marker on top; `--rows`
counts versions and markers. The commands then read and decide every version.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote_plus

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

from gcd.cli.main import main  # noqa: E402
from gcd.spark.session import spark_session  # noqa: E402

BUCKET = "bench-l0"
SAFE_EPOCH = 150


def generate(
    directory: Path, rows: int, files: int, seed: int = 7, *, versions: bool = False
) -> Path:
    """Write the inventory report (of all versions with `versions`); the manifest path."""
    rng = random.Random(seed)
    now = time.time()
    config_dir = directory / "inventory" / BUCKET / "daily"
    (config_dir / "data").mkdir(parents=True, exist_ok=True)
    entries = []
    per_file = -(-rows // files)
    for index in range(files):
        text = io.StringIO()
        writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
        key = ""
        for row in range(index * per_file, min(rows, (index + 1) * per_file)):
            draw = rng.random()
            epoch = rng.randint(1, 200)
            if versions and row % 2:
                pass  # the current version (or marker) of the previous row's key
            elif draw < 0.001:
                key = f"level_zero/data/{rng.randrange(1000):03d}/not-an-epoch/{row}"
            elif draw < 0.002:
                key = f"elsewhere/{row}"
            else:
                name = f"{row:08x}-{rng.getrandbits(64):016x}"
                key = f"level_zero/data/{rng.randrange(1000):03d}/{epoch:018d}/{name}"
            stamp = datetime.fromtimestamp(now - rng.uniform(0, 864000), UTC)
            size = rng.randint(1024, 8 * 2**20)
            when = stamp.strftime("%Y-%m-%dT%H:%M:%S.000Z")
            if not versions:
                writer.writerow([BUCKET, quote_plus(key, safe=""), size, when])
                continue
            # Versions come in pairs (non-current, then current) and every tenth pair
            # has a delete marker on top: row numbers name the key they belong to.
            kind = row % 20
            version = f"v{row:010d}"
            writer.writerow(
                [
                    BUCKET,
                    quote_plus(key, safe=""),
                    version,
                    "true" if kind % 2 else "false",
                    "true" if kind == 19 else "false",
                    "" if kind == 19 else size,
                    when,
                ]
            )
        name = f"data/part-{index:04d}.csv.gz"
        payload = gzip.compress(text.getvalue().encode(), compresslevel=6)
        (config_dir / name).write_bytes(payload)
        entries.append(
            {
                "key": f"inventory/{BUCKET}/daily/{name}",
                "size": len(payload),
                "MD5checksum": hashlib.md5(payload).hexdigest(),
            }
        )
    manifest = {
        "sourceBucket": BUCKET,
        "destinationBucket": "arn:aws:s3:::bench-inventory",
        "version": "2016-11-30",
        "creationTimestamp": str(int(now * 1000)),
        "fileFormat": "CSV",
        "fileSchema": (
            "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate"
            if versions
            else "Bucket, Key, Size, LastModifiedDate"
        ),
        "files": entries,
    }
    stamp_dir = config_dir / "2026-11-22T00-00Z"
    stamp_dir.mkdir(exist_ok=True)
    (stamp_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return stamp_dir / "manifest.json"


def timed(argv: list[str]) -> float:
    """Seconds one gcd invocation takes; it must exit 0."""
    started = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{argv[0]} exited {code}")
    return elapsed


def main_bench() -> None:
    """Generate, run, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (JIT, workers)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--versions", action="store_true", help="an inventory of all versions of a versioned bucket"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "spark_inventory")
    args = parser.parse_args()
    started = time.perf_counter()
    manifest = generate(args.out / "report", args.rows, args.files, versions=args.versions)
    generate_s = time.perf_counter() - started
    common = [
        "--bucket",
        BUCKET,
        "--inventory",
        str(manifest),
        "--safe-epoch",
        str(SAFE_EPOCH),
        "--master",
        args.master,
        "--log-level",
        "error",
        "--json",
    ]
    commands = {
        "spark-report": ["spark-report", *common, "--output", str(args.out / "report-out")],
        "spark-sweep --dry-run": [
            "spark-sweep",
            *common,
            "--dry-run",
            "--output",
            str(args.out / "sweep-out"),
        ],
    }
    started = time.perf_counter()
    conf = {"spark.ui.enabled": "false", "spark.driver.memory": "2g"}
    results: dict[str, object] = {}
    with spark_session(args.master, app_name="l0gc-bench", conf=conf):
        session_s = time.perf_counter() - started
        saved = sys.stdout
        for name, argv in commands.items():
            sys.stdout = io.StringIO()  # the commands' own --json output
            try:
                for _ in range(args.warmup):
                    timed(argv)
                runs = [timed(argv) for _ in range(args.runs)]
            finally:
                sys.stdout = saved
            median = statistics.median(runs)
            results[name] = {
                "median_s": round(median, 2),
                "rows_per_s": round(args.rows / median),
                "runs_s": [round(r, 2) for r in runs],
            }
    document = {
        "benchmark": "spark_inventory",
        "rows": args.rows,
        "versions": args.versions,
        "data_files": args.files,
        "master": args.master,
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "warmup_runs": args.warmup,
        "load_average_1m_after": round(os.getloadavg()[0], 1),
        "generate_s": round(generate_s, 1),
        "session_start_s": round(session_s, 1),
        "results": results,
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main_bench()
