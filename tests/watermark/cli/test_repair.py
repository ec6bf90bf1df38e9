"""`watermark partition repair` against a real etcd: CAS write of a validated record,
never lowering M(p) without --force (then an audit line), --dry-run writes nothing, and
a malformed record (the single byte '{' of a mis-quoted etcdctl txn) is replaced."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from l0lab.testing.procs import child_env
from tests.clirun import Cli, run_cli

pytestmark = pytest.mark.integration


def flags(etcd: LocalEtcd, namespace: str) -> tuple[str, ...]:
    """The flags that point `watermark` at `namespace` on `etcd`."""
    return ("--etcd", etcd.endpoint, "--namespace", namespace)


def stored(cli: Cli, etcd: LocalEtcd, namespace: str, name: str) -> dict[str, Any]:
    done = cli("watermark", "partition", "show", name, "--json", *flags(etcd, namespace))
    assert done.code == 0, done.err
    doc: dict[str, Any] = json.loads(done.out)
    return doc


def test_repair_raises_m_by_cas_and_refuses_lowering_without_force(
    etcd_server: LocalEtcd, namespace: str, cli: Cli
) -> None:
    """--watermark above the stored M(p) is written (validated); below it is refused
    (exit 2, nothing written) unless --force, which logs the audit line; --dry-run
    writes nothing; M(p) at or above the cluster epoch is refused."""
    etcd = flags(etcd_server, namespace)
    for _ in range(6):
        assert cli("watermark", "epoch", "advance", *etcd).code == 0
    assert cli("watermark", "partition", "register", "orders/0", *etcd).code == 0
    assert stored(cli, etcd_server, namespace, "orders/0")["watermark"] == 5
    too_high = cli("watermark", "partition", "repair", "orders/0", "--watermark", "6", *etcd)
    assert too_high.code == 2
    assert "below the cluster epoch 6" in too_high.err
    assert cli("watermark", "epoch", "advance", *etcd).code == 0
    dry = cli(
        "watermark", "partition", "repair", "orders/0", "--watermark", "6", "--dry-run", *etcd
    )
    assert (dry.code, dry.out.split(":")[0]) == (0, "would repair (dry run) 'orders/0'")
    assert stored(cli, etcd_server, namespace, "orders/0")["watermark"] == 5
    raised = cli(
        "watermark", "partition", "repair", "orders/0", "--watermark", "6", "--json", *etcd
    )
    assert raised.code == 0, raised.err
    doc = json.loads(raised.out)
    assert (doc["written"], doc["forced"], doc["previous"]["watermark"]) == (True, False, 5)
    assert stored(cli, etcd_server, namespace, "orders/0")["watermark"] == 6
    lowered = cli("watermark", "partition", "repair", "orders/0", "--watermark", "4", *etcd)
    assert lowered.code == 2
    assert "refusing to lower M(p) from 6 to 4" in lowered.err
    assert stored(cli, etcd_server, namespace, "orders/0")["watermark"] == 6
    forced = run_cli(
        "watermark",
        "partition",
        "repair",
        "orders/0",
        "--watermark",
        "4",
        "--force",
        "--reason",
        "restored from backup",
        *etcd,
        env=child_env(),
    )
    assert forced.returncode == 0, forced.stderr
    assert "watermark.partition_repair_forced" in forced.stderr
    assert "restored from backup" in forced.stderr
    assert stored(cli, etcd_server, namespace, "orders/0")["watermark"] == 4


def test_repair_replaces_a_malformed_record_the_sweepers_refuse(
    etcd_server: LocalEtcd, namespace: str, cli: Cli
) -> None:
    """The byte '{' (what a mis-quoted etcdctl txn stored) blocks GC; repair needs the
    fields it cannot read (naming them), then writes a record that decodes again and
    `gcd`-side readers accept (partition show works)."""
    etcd = flags(etcd_server, namespace)
    assert cli("watermark", "epoch", "advance", *etcd).code == 0
    assert cli("watermark", "epoch", "advance", *etcd).code == 0
    assert cli("watermark", "partition", "register", "orders/0", *etcd).code == 0
    key = f"{namespace}/partitions/orders/0"
    _put_raw(etcd_server, key, b"{")
    assert cli("watermark", "partition", "show", "orders/0", *etcd).code != 0
    missing = cli("watermark", "partition", "repair", "orders/0", "--watermark", "1", *etcd)
    assert missing.code == 2
    assert "--created-epoch" in missing.err
    fixed = cli(
        "watermark",
        "partition",
        "repair",
        "orders/0",
        "--watermark",
        "1",
        "--created-epoch",
        "2",
        "--json",
        *etcd,
    )
    assert fixed.code == 0, fixed.err
    assert json.loads(fixed.out)["malformed"].startswith("partition 'orders/0'")
    record = stored(cli, etcd_server, namespace, "orders/0")
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
