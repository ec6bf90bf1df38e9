"""Red-team round 4, the smaller operator edges on a real etcd: `epoch advance` at the
maximum (finding 7), a record whose key holds control characters (finding 11), and
`gcd pause` on a mistyped namespace (finding 13). The commands run as an operator runs
them (subprocesses).

Named by behaviour, not module: findings across `watermark` commands and `gcd pause`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from l0lab.testing.procs import child_env

pytestmark = pytest.mark.integration


def command(etcd: LocalEtcd, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`gcd ...` or `watermark ...` (args[0]) against `etcd` and `namespace`."""
    program, *rest = args
    return subprocess.run(
        [sys.executable, "-m", program, *rest, "--etcd", etcd.endpoint, "--namespace", namespace],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_env(),
    )


def put(etcd: LocalEtcd, key: str, value: bytes) -> None:
    async def write() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace="/x"))
        try:
            await kv.txn([], [Put(key, value)])
        finally:
            await kv.close()

    asyncio.run(write())


def get(etcd: LocalEtcd, key: str) -> bytes | None:
    async def read() -> bytes | None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace="/x"))
        try:
            item = await kv.get(key)
            return None if item is None else item.value
        finally:
            await kv.close()

    return asyncio.run(read())


def test_epoch_advance_stops_at_the_maximum(etcd_server: LocalEtcd, namespace: str) -> None:
    """At 2**63-1 `epoch advance` used to write 2**63 and exit 0, after which every
    command failed. Now it exits 2 and the epoch stays readable and unchanged."""
    put(etcd_server, f"{namespace}/epoch", str(2**63 - 1).encode())
    refused = command(etcd_server, namespace, "watermark", "epoch", "advance")
    assert refused.returncode == 2, refused
    assert "maximum" in refused.stderr
    assert get(etcd_server, f"{namespace}/epoch") == str(2**63 - 1).encode()
    shown = command(etcd_server, namespace, "watermark", "epoch", "get", "--json")
    assert json.loads(shown.stdout)["epoch"] == 2**63 - 1


def test_a_record_named_with_control_characters_can_be_removed_as_status_says(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """A hand-written record under a name with a control character blocks GC; the fix
    `gcd status` prints used to answer "not registered" (exit 0) and the record stayed.
    Now status names it in hex and that very command removes it, unblocking GC."""
    command(etcd_server, namespace, "watermark", "epoch", "advance")
    command(etcd_server, namespace, "watermark", "partition", "register", "orders/0")
    put(etcd_server, f"{namespace}/partitions/orders\x07x", b"{")
    status = command(etcd_server, namespace, "gcd", "status")
    assert status.returncode == 3, status
    fix = next(line for line in status.stdout.splitlines() if "fix: partition gone" in line)
    argv = fix.split("-> ", 1)[1].split()
    assert argv[:4] == ["watermark", "partition", "deregister", "--name-hex"]
    removed = command(etcd_server, namespace, *argv, "--json")
    assert removed.returncode == 0, removed
    assert json.loads(removed.stdout)["deregistered"] == [argv[4]]
    assert command(etcd_server, namespace, "gcd", "status").returncode == 0
    plain = command(etcd_server, namespace, "watermark", "partition", "deregister", "orders\x07x")
    assert plain.returncode == 2, plain
    assert "not valid" in plain.stderr


def test_pause_refuses_a_namespace_that_is_not_in_use(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """`gcd pause` on a mistyped namespace wrote its key there and reported success while
    the real namespace kept deleting. Now exit 2, "is --namespace right?", nothing written;
    on the real namespace it pauses."""
    typo = namespace + "-typo"
    refused = command(etcd_server, typo, "gcd", "pause", "--reason", "incident")
    assert refused.returncode == 2, refused
    assert "is --namespace right?" in refused.stderr
    assert get(etcd_server, f"{typo}/gc/paused") is None
    command(etcd_server, namespace, "watermark", "epoch", "advance")
    paused = command(etcd_server, namespace, "gcd", "pause", "--reason", "incident")
    assert paused.returncode == 0, paused
    assert get(etcd_server, f"{namespace}/gc/paused") is not None
