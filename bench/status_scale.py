"""`gcd status` on a namespace of many partition records: this tree vs another, paired.

    .venv/bin/python -m bench.status_scale --records 1000000 --runs 3 --before /path/to/old/tree

One real etcd (`LocalEtcd`) is seeded once with `--records` realistic partition records
(`bench.watermark_path._seed_records`: owned, with a tracker snapshot, M(p) spread over
997 values), a cluster epoch and a binding-free namespace. Then `python -m gcd status
--json` runs as a child process of each tree in turn, alternating the order every run
(A B, then B A, ...): each child's wall time, its CPU (user + sys, `os.wait4`'s rusage)
and its peak RSS (`/usr/bin/time`'s: a child's own ru_maxrss would carry this parent's).
Both trees must print the same safe epoch, pinning partitions and partition count
(checked), so the comparison is of the same answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import PYTHON, child_env, median
from bench.watermark_path import _etcd, _seed_records

NAMESPACE = "/l0gc/bench-status"


def _status(tree: str, endpoint: str) -> dict[str, Any]:
    """One `gcd status --json` of `tree`: wall, CPU, peak RSS and its document."""
    env = child_env(
        PYTHONPATH=tree, L0GC_ETCD=endpoint, L0GC_NAMESPACE=NAMESPACE, L0GC_ETCD_TIMEOUT="120"
    )
    # Peak RSS from /usr/bin/time, not this process's wait4: Linux carries a parent's peak
    # across fork and exec into the child's ru_maxrss, and this parent held the seeding.
    with tempfile.NamedTemporaryFile("r") as peak:
        started = time.perf_counter()
        proc = subprocess.Popen(
            ["/usr/bin/time", "-f", "%M", "-o", peak.name, PYTHON, "-m", "gcd", "status", "--json"],
            cwd=tree,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        peak_kib = int(peak.read().split()[-1])
    doc = json.loads(out)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": peak_kib / 1024,
        "answer": [
            doc["safe_epoch"],
            doc["partition_count"],
            [p["partition"] for p in doc["pinning"]],
        ],
    }


async def _run(args: argparse.Namespace) -> None:
    trees = {"this tree": str(Path(__file__).resolve().parent.parent)}
    if args.before:
        trees["before"] = str(Path(args.before).resolve())
    async with _etcd() as (server, kv):
        started = time.perf_counter()
        await _seed_records(kv, NAMESPACE, args.records, epoch=5000)
        print(
            f"seeded {args.records:,} records in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for run in range(args.runs):
            order = list(trees) if run % 2 == 0 else list(reversed(trees))
            for name in order:
                load = os.getloadavg()[0]
                result = _status(trees[name], server.endpoint)
                result["load"] = load
                results[name].append(result)
                print(
                    f"run {run + 1} {name}: {result['wall_s']:.1f} s, "
                    f"{result['cpu_s']:.1f} s CPU, {result['rss_mib']:.0f} MiB, "
                    f"load {load:.1f}",
                    file=sys.stderr,
                )
    answers = {json.dumps(r["answer"]) for runs in results.values() for r in runs}
    assert len(answers) == 1, f"the trees disagree: {answers}"
    print(f"| tree | wall s (median of {args.runs}) | CPU s | peak RSS MiB | runs (wall s) |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
        print(
            f"| {name} | {median([r['wall_s'] for r in runs]):.1f} | "
            f"{median([r['cpu_s'] for r in runs]):.1f} | "
            f"{median([r['rss_mib'] for r in runs]):.0f} | {walls} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="bench.status_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", help="another l0gc tree to compare with (paired)")
    asyncio.run(_run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
