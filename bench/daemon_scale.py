"""A `gcd daemon` over a bucket of 1M live objects that gets 10k new garbage objects a
round: does it hold steady? (issue 43: "the daemon holding steady with 1M live + 10k
garbage per round").

    .venv/bin/python -m bench.daemon_scale --live 1000000 --garbage 10000 --rounds 5

SeaweedFS (`weed mini`) holds `--live` objects of the default layout above M, spread
over 1,000 prefixes (each in an epoch directory of its own, 10**6 and up); etcd holds
the cluster epoch and no partition (M = epoch - 1), and the namespace is bound to the
bucket. `python -m gcd daemon` runs at its defaults (`--interval 10s`, looks every 2 s)
with `--grace 0s` (SeaweedFS cannot backdate an object). Each round of the benchmark
PUTs `--garbage` objects at the current epoch (10 per prefix over the first
garbage/10 prefixes; above M, so live), then advances the epoch once: M covers them. It
measures, from the advance to the daemon's `l0gc_sweeper_deleted_objects_total` having
counted them all: the wall time, the LISTs and the daemon's CPU (from /proc), and after
it the daemon's RSS. Steady means flat per round: time, LISTs, CPU and RSS do not grow
with the rounds. Finally HEADs of a sample check that live objects stayed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

from bench.common import PYTHON, REPO, child_env, metric, pid_cpu_s, proc_status_kib, put_objects
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.binding import bind_namespace
from l0gc.contract.binding import StorageTarget
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalEtcd, free_port, stop_process

NAMESPACE = "/l0gc/bench-daemon-scale"
BUCKET = "bench-daemon-scale"
ROOT = "level_zero/data"
FIRST_EPOCH = 10
_DEADLINE_S = 900.0


def _rss_mib(pid: int) -> float:
    kib = proc_status_kib("VmRSS", pid)
    return float("nan") if kib is None else kib / 1024


def live_keys(count: int) -> list[str]:
    """`count` live keys over 1,000 prefixes, epochs 10**6 and up."""
    return [f"{ROOT}/{n % 1000:03d}/{10**6 + n // 1000:018d}/live{n}" for n in range(count)]


def garbage_keys(count: int, epoch: int) -> list[str]:
    """`count` garbage keys at `epoch`, 10 per prefix."""
    return [f"{ROOT}/{n // 10 % 1000:03d}/{epoch:018d}/g{n}" for n in range(count)]


async def _init_and_bind(etcd: LocalEtcd, s3: LocalSeaweedFS) -> int:
    """The cluster epoch initialised and the namespace bound to the bucket; the epoch."""
    kv = EtcdKV([etcd.endpoint], timeout_s=60.0)
    try:
        store = WatermarkStore(kv, NAMESPACE)
        epoch = await store.init_cluster_epoch(FIRST_EPOCH)
        settings = S3Settings(bucket=BUCKET, endpoint_url=s3.endpoint_url, region="us-east-1")
        target = StorageTarget(BUCKET, ROOT, s3.endpoint_url)
        async with S3ObjectStore.open(settings) as objects:
            await bind_namespace(store, objects, target, replace=True)
        return epoch
    finally:
        await kv.close()


async def _advance(etcd: LocalEtcd) -> int:
    """The cluster epoch advanced by one (M follows: no partition); the new epoch."""
    kv = EtcdKV([etcd.endpoint], timeout_s=60.0)
    try:
        return await WatermarkStore(kv, NAMESPACE).advance_cluster_epoch()
    finally:
        await kv.close()


def _wait_for(
    base: str, name: str, at_least: float, proc: subprocess.Popen[bytes], log: Path
) -> float:
    """Poll the daemon's /metrics until `name` reaches `at_least`; the seconds it took."""
    started = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited: {log.read_text()[-2000:]}")
        if time.monotonic() - started > _DEADLINE_S:
            raise RuntimeError(f"{name} < {at_least} after {_DEADLINE_S} s")
        try:
            if metric(base + "/metrics", name) >= at_least:
                return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """Seed, start the daemon, run the rounds; a JSON line per round."""
    parser = argparse.ArgumentParser(prog="python -m bench.daemon_scale", description=__doc__)
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--garbage", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--log", default="/tmp/daemon-scale.log", help="the daemon's log")
    args = parser.parse_args(argv)
    log = Path(args.log)
    for name, value in child_env().items():  # this process's own S3 client (the binding)
        if name.startswith("AWS_"):
            os.environ.setdefault(name, value)
    live = live_keys(args.live)
    with LocalEtcd() as etcd, LocalSeaweedFS() as s3:
        s3.create_bucket(BUCKET)
        seeding = time.perf_counter()
        asyncio.run(put_objects(s3.endpoint_url, BUCKET, live))
        print(
            f"seeded {len(live):,} live objects in {time.perf_counter() - seeding:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        epoch = asyncio.run(_init_and_bind(etcd, s3))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = child_env(L0GC_ETCD=etcd.endpoint, L0GC_NAMESPACE=NAMESPACE)
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
            "--root",
            ROOT,
            "--grace",
            "0s",
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(port),
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            first = _wait_for(base, r"l0gc_sweeper_rounds_total", 1, proc, log)
            print(
                json.dumps(
                    {
                        "first_round_s": round(first, 1),
                        "live": args.live,
                        "rss_mib": round(_rss_mib(proc.pid)),
                    }
                ),
                flush=True,
            )
            for r in range(1, args.rounds + 1):
                asyncio.run(put_objects(s3.endpoint_url, BUCKET, garbage_keys(args.garbage, epoch)))
                lists = metric(base + "/metrics", r"l0gc_sweeper_list_requests_total")
                cpu = pid_cpu_s(proc.pid)
                epoch = asyncio.run(_advance(etcd))
                took = _wait_for(
                    base, r"l0gc_sweeper_deleted_objects_total", r * args.garbage, proc, log
                )
                print(
                    json.dumps(
                        {
                            "round": r,
                            "garbage": args.garbage,
                            "seconds_to_all_deleted": round(took, 2),
                            "list_requests": int(
                                metric(base + "/metrics", r"l0gc_sweeper_list_requests_total")
                                - lists
                            ),
                            "daemon_cpu_s": round(pid_cpu_s(proc.pid) - cpu, 2),
                            "rss_mib": round(_rss_mib(proc.pid)),
                            "load": os.getloadavg()[0],
                        }
                    ),
                    flush=True,
                )
        finally:
            stop_process(proc, 30.0)
        client = s3.client()
        for key in random.Random(1).sample(live, min(500, len(live))):
            client.head_object(Bucket=BUCKET, Key=key)  # raises if a live object went
    return 0


if __name__ == "__main__":
    sys.exit(main())
