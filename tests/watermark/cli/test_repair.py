"""`watermark partition repair` against a real etcd: CAS write of a validated record,
never lowering M(p) without --force (then an audit line), --dry-run writes nothing, and
a malformed record (the single byte '{' of a mis-quoted etcdctl txn) is replaced."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
from typing import Any

import pytest
import structlog

from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from l0lab.testing.procs import child_env
from tests.clirun import run_cli
from watermark.cli.main import main

pytestmark = pytest.mark.integration


def run(etcd: LocalEtcd, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`watermark ARGS` in this process (as the CLI tests do): exit code, stdout, stderr;
    `subprocess` (the real command line, logs on stderr) for --force's audit line."""
    argv = [*args, "--etcd", etcd.endpoint, "--namespace", namespace]
    if "--force" in args:
        return run_cli("watermark", *argv, env=child_env())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    structlog.reset_defaults()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def stored(etcd: LocalEtcd, namespace: str, name: str) -> dict[str, Any]:
    done = run(etcd, namespace, "partition", "show", name, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_repair_raises_m_by_cas_and_refuses_lowering_without_force(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """--watermark above the stored M(p) is written (validated); below it is refused
    (exit 2, nothing written) unless --force, which logs the audit line; --dry-run
    writes nothing; M(p) at or above the cluster epoch is refused."""
    for _ in range(6):
        assert run(etcd_server, namespace, "epoch", "advance").returncode == 0
    assert run(etcd_server, namespace, "partition", "register", "orders/0").returncode == 0
    assert stored(etcd_server, namespace, "orders/0")["watermark"] == 5
    too_high = run(etcd_server, namespace, "partition", "repair", "orders/0", "--watermark", "6")
    assert too_high.returncode == 2
    assert "below the cluster epoch 6" in too_high.stderr
    assert run(etcd_server, namespace, "epoch", "advance").returncode == 0
    dry = run(
        etcd_server, namespace, "partition", "repair", "orders/0", "--watermark", "6", "--dry-run"
    )
    assert (dry.returncode, dry.stdout.split(":")[0]) == (0, "would repair (dry run) 'orders/0'")
    assert stored(etcd_server, namespace, "orders/0")["watermark"] == 5
    raised = run(
        etcd_server, namespace, "partition", "repair", "orders/0", "--watermark", "6", "--json"
    )
    assert raised.returncode == 0, raised.stderr
    doc = json.loads(raised.stdout)
    assert (doc["written"], doc["forced"], doc["previous"]["watermark"]) == (True, False, 5)
    assert stored(etcd_server, namespace, "orders/0")["watermark"] == 6
    lowered = run(etcd_server, namespace, "partition", "repair", "orders/0", "--watermark", "4")
    assert lowered.returncode == 2
    assert "refusing to lower M(p) from 6 to 4" in lowered.stderr
    assert stored(etcd_server, namespace, "orders/0")["watermark"] == 6
    forced = run(
        etcd_server,
        namespace,
        "partition",
        "repair",
        "orders/0",
        "--watermark",
        "4",
        "--force",
        "--reason",
        "restored from backup",
    )
    assert forced.returncode == 0, forced.stderr
    assert "watermark.partition_repair_forced" in forced.stderr
    assert "restored from backup" in forced.stderr
    assert stored(etcd_server, namespace, "orders/0")["watermark"] == 4


def test_repair_replaces_a_malformed_record_the_sweepers_refuse(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """The byte '{' (what a mis-quoted etcdctl txn stored) blocks GC; repair needs the
    fields it cannot read (naming them), then writes a record that decodes again and
    `gcd`-side readers accept (partition show works)."""
    assert run(etcd_server, namespace, "epoch", "advance").returncode == 0
    assert run(etcd_server, namespace, "epoch", "advance").returncode == 0
    assert run(etcd_server, namespace, "partition", "register", "orders/0").returncode == 0
    key = f"{namespace}/partitions/orders/0"
    _put_raw(etcd_server, key, b"{")
    assert run(etcd_server, namespace, "partition", "show", "orders/0").returncode != 0
    missing = run(etcd_server, namespace, "partition", "repair", "orders/0", "--watermark", "1")
    assert missing.returncode == 2
    assert "--created-epoch" in missing.stderr
    fixed = run(
        etcd_server,
        namespace,
        "partition",
        "repair",
        "orders/0",
        "--watermark",
        "1",
        "--created-epoch",
        "2",
        "--json",
    )
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["malformed"].startswith("partition 'orders/0'")
    record = stored(etcd_server, namespace, "orders/0")
    assert (record["watermark"], record["created_epoch"], record["owner"]) == (1, 2, None)


def _put_raw(etcd: LocalEtcd, key: str, value: bytes) -> None:
    """Store raw bytes under `key` as a hand-written etcdctl put would."""

    async def put() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace="/x"))
        try:
            await kv.txn([], [Put(key, value)])
        finally:
            await kv.close()

    asyncio.run(put())
