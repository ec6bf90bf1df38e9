"""The reference writer in Node 20 (examples/node-writer, built-in fetch only) against a
live `watermark serve`, a real etcd and moto, then `gcd sweep`: the objects it reported
reconciled are deleted, the ones it did not survive.

Named by behaviour, not module: an example writer (examples/node-writer) end to end."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from l0gc import exitcodes
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from l0lab.testing.procs import child_env
from tests.clirun import Cli
from tests.serving import ADMIN, RECONCILER, WRITER, live_serve
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WRITER_JS = ROOT / "examples" / "node-writer" / "writer.mjs"
NODE = shutil.which("node")


def etcd_op(etcd: LocalEtcd, namespace: str, op: str) -> int:
    """Advance the cluster epoch ("advance") or read orders/0's published M(p) ("m"), in
    this process (a `watermark` subprocess costs ~2 s of this test's budget)."""

    async def run() -> int:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        try:
            store = WatermarkStore(kv, namespace)
            if op == "advance":
                return await store.advance_cluster_epoch()
            record = await store.get_partition("orders/0")
            assert record is not None
            return record.watermark
        finally:
            await kv.close()

    return asyncio.run(run())


def run_node(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the Node writer."""
    assert NODE is not None, "node (20) is on every machine of this project: install it"
    return subprocess.run(
        [NODE, str(WRITER_JS), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def node(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    """Run the Node writer; its JSON lines."""
    done = run_node(env, *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_node_writer_objects_are_collected_exactly_when_reconciled(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Writes across epoch changes, each round a new writer process (it resumes after
    last_applied_offset: offsets never repeat); the reconciler reports the first three
    entries; after a sweep the reconciled object below M(p) is gone and every object
    above it, the unreconciled ones first, survives."""
    with live_serve(etcd_server, namespace, tmp_path, partitions=("orders/0",), epochs=2) as serve:
        etcd = ("--etcd", etcd_server.endpoint, "--namespace", namespace)
        run = cli(
            "gcd",
            "namespace",
            "bind",
            "--bucket",
            bucket,
            "--root",
            "level_zero/data",
            "--endpoint-url",
            s3_server.endpoint_url,
            *etcd,
        )
        assert run.code == exitcodes.OK
        env = {
            **child_env(),
            "L0GC_PUBLISHERS": serve.url,
            "L0GC_TOKEN": WRITER,
            "L0GC_RECONCILER_TOKEN": RECONCILER,
            "L0GC_PARTITION": "orders/0",
            "S3_ENDPOINT": s3_server.endpoint_url,
            "S3_BUCKET": bucket,
            "PATH": os.environ.get("PATH", ""),
        }
        first = node(env, "write", "1")
        for _ in range(2):
            etcd_op(etcd_server, namespace, "advance")
        second = node(env, "write", "1")  # a new process: resumes after offset 0
        for _ in range(2):
            etcd_op(etcd_server, namespace, "advance")
        third = node(env, "write", "3")
        assert [o["offset"] for o in first + second + third] == [0, 1, 2, 3, 4]
        assert [o["epoch"] for o in first + second + third] == [2, 4, 6, 6, 6]
        # The reconciler lifted offsets 0-2. M(p) is the window's lower bound when the
        # last reconciled entry was fenced (4), minus 1: epoch 2 is garbage; epoch 4 (and
        # 6) wait until an entry fenced above them is reconciled; 3 and 4 are unreconciled.
        (reported,) = node(env, "reconcile", "2")
        assert (reported["reconciled_offset"], reported["watermark"]) == (2, 3)
        assert reported["log_end_wanted"] is False
        wait_until_sync(
            lambda: etcd_op(etcd_server, namespace, "m") == 3,
            timeout_s=60,
            what="the publisher to publish M(p) = 3",
        )
    run = cli(
        "gcd",
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
        "--grace",
        "0s",
        "--json",
        *etcd,
    )
    assert run.code == exitcodes.OK
    assert run.json["deleted"] == 1
    left = s3_server.keys(bucket)
    assert first[0]["key"] not in left  # reconciled, epoch 2 <= M: collected
    assert {o["key"] for o in second + third} <= left  # above M (3 and 4 unreconciled): kept


def test_the_node_writer_registers_its_own_partition_and_stops_on_a_typo(
    etcd_server: LocalEtcd, s3_server: LocalS3, bucket: str, namespace: str, tmp_path: Path
) -> None:
    """A new topic: `register` over HTTP (no etcd credentials, no publisher restart), then
    writes to it at once; a repeat changes nothing; a mistyped partition exits 1 at its
    first request with not_registered (action stop), not after a retry loop; a writer
    token may not register."""
    with live_serve(etcd_server, namespace, tmp_path, partitions=("orders/0",), epochs=2) as serve:
        env = {
            **child_env(),
            "L0GC_PUBLISHERS": serve.url,
            "L0GC_TOKEN": WRITER,
            "L0GC_REGISTRAR_TOKEN": ADMIN,
            "L0GC_PARTITION": "topic/9",
            "S3_ENDPOINT": s3_server.endpoint_url,
            "S3_BUCKET": bucket,
            "PATH": os.environ.get("PATH", ""),
        }
        (created,) = node(env, "register")
        assert created == {
            "partition": "topic/9",
            "registered": True,
            "hosted": True,
            "watermark": 1,
        }
        (again,) = node(env, "register")
        assert (again["registered"], again["hosted"]) == (False, True)
        (written,) = node(env, "write", "1")
        assert (written["offset"], written["epoch"]) == (0, 2)
        typo = run_node({**env, "L0GC_PARTITION": "topc/9"}, "write", "1")
        assert typo.returncode == 1
        assert "404 not_registered" in typo.stderr
        assert "(action: stop)" in typo.stderr
        forbidden = run_node({**env, "L0GC_REGISTRAR_TOKEN": WRITER}, "register")
        assert forbidden.returncode == 1
        assert "403 forbidden" in forbidden.stderr
