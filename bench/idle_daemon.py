"""An idle `gcd daemon` over a namespace of many partition records: what it costs the
daemon and etcd while M does not move (issue 43: < 1 % of a core at 1M records, 0 LIST).

    .venv/bin/python -m bench.idle_daemon --records 1000000 --seconds 600 [--before TREE]

One real etcd (`LocalEtcd`) is seeded once with `--records` realistic partition records
(`bench.watermark_path._seed_records`: owned, with a tracker snapshot, M(p) over 997
values) and bound to an empty bucket on moto's server (in this process). Then, for each
tree in turn (this one, and `--before` if given), `python -m gcd daemon` runs at its
defaults (`--interval 10s`, `--verify-m-every 30`, looks every 2 s): once its first round
is over (/readyz 200 and one `l0gc_sweeper_rounds_total`), the CPU of the daemon's
process and of etcd's (from /proc) and etcd's Range calls (its own /metrics) are
sampled, and again `--seconds` later. Nothing writes to etcd meanwhile, so every Range
call in the window is the daemon's (its checks: a count, the changed keys, the small
keys; a full check reads the namespace page by page). First, etcd alone is measured over
the same window (no daemon): its own idle cost at that many keys.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import PYTHON, child_env, metric, pid_cpu_s
from bench.watermark_path import _seed_records
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.binding import bind_namespace
from l0gc.contract.binding import StorageTarget
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3, free_port, stop_process

NAMESPACE = "/l0gc/bench-idle"
BUCKET = "bench-idle"


def _etcd_ranges(etcd: LocalEtcd) -> float:
    return metric(
        f"http://{etcd.endpoint}/metrics", r'grpc_server_handled_total\{.*grpc_method="Range"'
    )


async def _prepare(etcd: LocalEtcd, s3: LocalS3, records: int) -> None:
    kv = EtcdKV([etcd.endpoint], timeout_s=120.0)
    await kv.connect()
    try:
        await _seed_records(kv, NAMESPACE, records, epoch=5000)
        s3.create_bucket(BUCKET)
        settings = S3Settings(bucket=BUCKET, endpoint_url=s3.endpoint_url, region="us-east-1")
        target = StorageTarget(BUCKET, "level_zero/data", s3.endpoint_url)
        async with S3ObjectStore.open(settings) as objects:
            await bind_namespace(WatermarkStore(kv, NAMESPACE), objects, target)
    finally:
        await kv.close()


def _idle(tree: str, etcd: LocalEtcd, s3: LocalS3, seconds: float, log: Path) -> dict[str, Any]:
    port = free_port()
    env = child_env(
        PYTHONPATH=tree, L0GC_ETCD=etcd.endpoint, L0GC_NAMESPACE=NAMESPACE, L0GC_ETCD_TIMEOUT="120"
    )
    command = [
        PYTHON,
        "-m",
        "gcd",
        "daemon",
        "--bucket",
        BUCKET,
        "--endpoint-url",
        s3.endpoint_url,
        "--region",
        "us-east-1",
        "--http-host",
        "127.0.0.1",
        "--http-port",
        str(port),
    ]
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        while True:  # the first round over: ready, one round counted
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited: {log.read_text()[-2000:]}")
            if time.monotonic() - started > 600:
                raise RuntimeError(f"no first round within 600 s: {log.read_text()[-2000:]}")
            try:
                if metric(base + "/metrics", r"l0gc_sweeper_rounds_total") >= 1:
                    break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        first_round_s = time.monotonic() - started
        assert etcd.pid is not None
        before = (
            pid_cpu_s(proc.pid),
            pid_cpu_s(etcd.pid),
            _etcd_ranges(etcd),
            metric(base + "/metrics", r"l0gc_sweeper_list_requests_total"),
        )
        time.sleep(seconds)  # the window measured: the daemon left alone
        after = (
            pid_cpu_s(proc.pid),
            pid_cpu_s(etcd.pid),
            _etcd_ranges(etcd),
            metric(base + "/metrics", r"l0gc_sweeper_list_requests_total"),
        )
    finally:
        stop_process(proc, 30.0)
    daemon_s, etcd_s, ranges, lists = (b - a for a, b in zip(before, after, strict=True))
    return {
        "first_round_s": round(first_round_s, 1),
        "window_s": seconds,
        "daemon_cpu_pct": round(100 * daemon_s / seconds, 2),
        "etcd_cpu_pct": round(100 * etcd_s / seconds, 2),
        "etcd_range_calls": int(ranges),
        "list_requests": int(lists),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_daemon", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--before", help="another tree to run the same way, after this one")
    parser.add_argument("--log-dir", default="/tmp", help="where the daemons' logs go")
    args = parser.parse_args(argv)
    trees = {"this tree": str(Path(__file__).resolve().parent.parent)}
    if args.before:
        trees["before"] = str(Path(args.before).resolve())
    with LocalEtcd() as etcd, LocalS3() as s3:
        seeding = time.perf_counter()
        asyncio.run(_prepare(etcd, s3, args.records))
        print(
            f"seeded {args.records} records in {time.perf_counter() - seeding:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        assert etcd.pid is not None
        cpu, ranges = pid_cpu_s(etcd.pid), _etcd_ranges(etcd)
        time.sleep(args.seconds)  # etcd alone, the same window: its own idle cost
        alone = {
            "tree": "none (etcd alone)",
            "records": args.records,
            "load": os.getloadavg()[0],
            "window_s": args.seconds,
            "etcd_cpu_pct": round(100 * (pid_cpu_s(etcd.pid) - cpu) / args.seconds, 2),
            "etcd_range_calls": int(_etcd_ranges(etcd) - ranges),
        }
        print(json.dumps(alone), flush=True)
        for name, tree in trees.items():
            log = Path(args.log_dir) / f"idle-daemon-{name.replace(' ', '-')}.log"
            result = _idle(tree, etcd, s3, args.seconds, log)
            print(
                json.dumps(
                    {"tree": name, "records": args.records, "load": os.getloadavg()[0], **result}
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
