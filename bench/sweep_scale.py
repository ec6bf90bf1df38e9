"""One `gcd sweep` of N garbage keys on SeaweedFS, N up to 1M: time, CPU, peak RSS and
requests, and how they grow with N (issue 43: "one `gcd sweep` of 1M garbage keys on
SeaweedFS", "how client CPU and wall grow from 20k to 100k to 1M").

    .venv/bin/python -m bench.sweep_scale --keys 20000,100000,1000000

For each N, a fresh SeaweedFS (`weed mini`, `LocalSeaweedFS`) and etcd hold the ``dense``
case of `bench.paired` (N garbage keys in 100 prefixes, each key in an epoch directory of
its own, M above them all), PUT by obstore (boto3's threads seed ~190 objects/s here).
Then the real CLI runs once, as a user runs it: `python -m gcd sweep` with M from etcd
through the namespace binding and the journal. Client CPU is the sweep process's (the
children reaped around it, `children_cpu`), its peak RSS `/usr/bin/time`'s (a child's
ru_maxrss would carry this parent's, which holds the N keys), server CPU the SeaweedFS
process's
(/proc); LIST and DeleteObjects counts and the round's own duration come from the
sweep's `--json` summary, which must report N deleted; then HEADs of a sample check the
garbage is gone (`S3Bench.left_wrong`).
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

from bench.common import REPO, child_env, children_cpu, put_objects
from bench.paired import case_keys
from bench.s3sides import S3Bench, s3_bench

_SIDE = "gcd sweep"


def _sweep(bench: S3Bench) -> dict[str, object]:
    """Seed, bind, run the sweep once; its figures."""
    seeding = time.perf_counter()
    bench.s3.create_bucket(bench.bucket)
    asyncio.run(put_objects(bench.s3.endpoint_url, bench.bucket, bench.keys))
    reseed_s = time.perf_counter() - seeding
    print(f"seeded {len(bench.keys):,} keys in {reseed_s:.0f} s", file=sys.stderr, flush=True)
    asyncio.run(bench.bind(bench.s3.endpoint_url))
    argv = bench.argv(_SIDE, bench.s3.endpoint_url)
    server_before = bench.server_cpu_s()
    with tempfile.NamedTemporaryFile("r") as peak, children_cpu() as reaped:
        started = time.perf_counter()
        proc = subprocess.Popen(
            ["/usr/bin/time", "-f", "%M", "-o", peak.name, *argv],
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = proc.communicate()
        wall = time.perf_counter() - started
        peak_kib = int(peak.read().split()[-1]) if proc.returncode == 0 else 0
    usage_cpu, _ = reaped()
    server_cpu = bench.server_cpu_s() - server_before
    if proc.returncode != 0:
        raise RuntimeError(f"gcd sweep exited {proc.returncode}: {err.decode()[-2000:]}")
    summary = json.loads(out.decode().strip().splitlines()[-1])
    keys = len(bench.keys)
    if summary["deleted"] != keys:
        raise RuntimeError(f"gcd sweep deleted {summary['deleted']} of {keys}: {summary}")
    wrong = bench.left_wrong()
    if wrong is not None:
        raise RuntimeError(wrong)
    return {
        "keys": keys,
        "wall_s": round(wall, 2),
        "keys_per_s": round(keys / wall),
        "round_s": summary["duration_s"],
        "client_cpu_s": round(usage_cpu, 2),
        "client_cpu_us_per_key": round(usage_cpu / keys * 1e6, 1),
        "server_cpu_us_per_key": round(server_cpu / keys * 1e6, 1),
        "peak_rss_mib": round(peak_kib / 1024),
        "list_requests": summary["list_requests"],
        "delete_requests": summary["delete_requests"],
        "reseed_s": round(reseed_s, 1),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    """Each size in turn; a JSON line per size, then a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keys",
        default="20000,100000,1000000",
        help="comma-separated garbage key counts (multiples of 100)",
    )
    args = parser.parse_args()
    rows = []
    for count in (int(n) for n in args.keys.split(",")):
        garbage, live = case_keys("dense", count)
        with s3_bench(f"bench-scale-{count}", garbage, "seaweedfs", live) as bench:
            row = _sweep(bench)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(
        "\n| keys | wall s | keys/s | round s | client CPU µs/key | server CPU µs/key "
        "| peak RSS MiB | LIST | DeleteObjects | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['keys']:,} | {r['wall_s']} | {r['keys_per_s']:,} | {r['round_s']} | "
            f"{r['client_cpu_us_per_key']} | {r['server_cpu_us_per_key']} | "
            f"{r['peak_rss_mib']} | {r['list_requests']} | {r['delete_requests']} | "
            f"{r['load']:.1f} |"
        )


if __name__ == "__main__":
    main()
