"""A/B of one `gcd sweep` process between two source trees, on a real SeaweedFS.

`python -m bench.ab_sweep --a /work/main --b . --keys 20000 --runs 3` seeds N garbage
keys once (snapshot), then runs `gcd sweep` from tree A and tree B alternately (A B A
B ...), restoring the snapshot before each run, and reports per side the median of:
the client's CPU (user + sys of that process alone, `os.wait4`), the server's CPU
(/proc), wall time, and the round's LIST and DeleteObjects requests. `--keys 0` is a
round with nothing to do (start-up cost). CPU, not wall, is the figure to read on a
shared machine; the load average is printed with the results.

`--python-a` / `--python-b` run a side with another interpreter (default: this one),
e.g. the same tree against a venv built as the Dockerfile's builder builds the image's
(runtime dependencies only), to see what the dev dependencies add to start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import garbage_keys
from l0lab.testing.local_seaweedfs import LocalSeaweedFS

BUCKET = "ab-sweep"


def _one(tree: Path, python: str, server: LocalSeaweedFS, keys: int) -> dict[str, Any]:
    # Both sides run from byte-compiled modules: with PYTHONDONTWRITEBYTECODE a tree
    # without __pycache__ would pay for compiling its sources on every run.
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": str(tree),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    cmd = [
        python,
        "-m",
        "gcd",
        "sweep",
        "--bucket",
        BUCKET,
        "--endpoint-url",
        server.endpoint_url,
        "--region",
        "us-east-1",
        "--safe-epoch",
        str(10**9),
        "--grace",
        "0s",
        "--json",
    ]
    server_cpu, wall = server.cpu_seconds(), time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - wall
    summary = json.loads(out)
    assert summary["deleted"] == keys, summary
    return {
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
        "server_cpu_s": server.cpu_seconds() - server_cpu,
        "wall_s": wall,
        "lists": summary["list_requests"],
        "deletes": summary["delete_requests"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the A/B and print a JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="tree A (e.g. /work/main)")
    parser.add_argument("--b", type=Path, required=True, help="tree B (e.g. this worktree)")
    parser.add_argument("--keys", type=int, default=20_000, help="garbage keys (0: empty round)")
    parser.add_argument("--runs", type=int, default=3, help="runs per side, alternating")
    parser.add_argument("--python-a", default=sys.executable, help="side A's interpreter")
    parser.add_argument("--python-b", default=sys.executable, help="side B's interpreter")
    args = parser.parse_args(argv)
    server = LocalSeaweedFS().start()
    try:
        server.create_bucket(BUCKET)
        if args.keys:
            server.seed(BUCKET, garbage_keys(args.keys))
            server.snapshot()
        runs: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        for _ in range(args.runs):
            for side in ("a", "b"):
                if args.keys:
                    server.restore()
                python = getattr(args, f"python_{side}")
                runs[side].append(_one(getattr(args, side).resolve(), python, server, args.keys))
        report = {
            side: {name: statistics.median(run[name] for run in rows) for name in rows[0]}
            for side, rows in runs.items()
        }
        per_key = {
            side: {
                f"{name}_us_per_key": round(1e6 * value / args.keys, 1)
                for name, value in figures.items()
                if name.endswith("cpu_s")
            }
            for side, figures in report.items()
            if args.keys
        }
        print(
            json.dumps(
                {
                    "keys": args.keys,
                    "runs": args.runs,
                    "load": os.getloadavg(),
                    "median": report,
                    "per_key": per_key,
                    "all": runs,
                },
                indent=1,
            )
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
