"""docs/upgrades.md's backup and restore, run for real (issue 42): an etcd snapshot, and a
`watermark namespace export` file, each restored into a fresh etcd; then a sweep against
the restored etcd deletes exactly the objects at or below the backup's global M, and
nothing written about M after the backup (a higher M in the old etcd) counts.

Named by behaviour, not module: a docs procedure end to end (etcd, watermark, gcd)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from l0gc import exitcodes
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3, etcd_binary
from tests.clirun import Cli

pytestmark = pytest.mark.integration
ROOT_PREFIX = "level_zero/data"


def prepare(etcd: LocalEtcd, namespace: str) -> None:
    """orders/0 and orders/1 registered at epoch 1, the cluster epoch advanced to 8."""

    async def go() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        try:
            store = WatermarkStore(kv, namespace)
            await store.init_cluster_epoch(1)
            for name in ("orders/0", "orders/1"):
                await store.register_partition(name)
            for _ in range(7):
                await store.advance_cluster_epoch()
        finally:
            await kv.close()

    asyncio.run(go())


def test_a_snapshot_restored_into_a_fresh_etcd_sweeps_exactly_to_its_m(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Snapshot at global M 3 (orders/0 M 5, orders/1 M 3); afterwards the live etcd
    moves orders/1 to M 6. The restored etcd is a new cluster: nothing is deleted until
    `namespace bind --replace`; then the sweep deletes epochs 1-3 (M 3 of the snapshot),
    not 4-5 (what the lost etcd would have allowed)."""
    prepare(etcd_server, namespace)
    etcd = ("--etcd", etcd_server.endpoint, "--namespace", namespace)
    run = cli(
        "gcd",
        "namespace",
        "bind",
        "--bucket",
        bucket,
        "--root",
        ROOT_PREFIX,
        "--endpoint-url",
        s3_server.endpoint_url,
        *etcd,
    )
    assert run.code == exitcodes.OK
    for name, m in (("orders/0", "5"), ("orders/1", "3")):
        run = cli("watermark", "partition", "repair", name, "--watermark", m, *etcd)
        assert run.code == 0
    keys = [f"{ROOT_PREFIX}/000/{epoch:018d}/obj-{epoch}" for epoch in range(1, 8)]
    s3_server.seed(bucket, keys)

    # The procedure of docs/upgrades.md: etcdctl snapshot save, etcdutl snapshot restore.
    bin_dir = etcd_binary().parent
    snapshot = tmp_path / "l0gc.db"
    save = [
        str(bin_dir / "etcdctl"),
        "--endpoints",
        etcd_server.endpoint,
        "snapshot",
        "save",
        str(snapshot),
    ]
    subprocess.run(save, check=True, capture_output=True, timeout=60)
    run = cli("watermark", "partition", "repair", "orders/1", "--watermark", "6", *etcd)
    assert run.code == 0

    restored_dir = tmp_path / "restored"
    fresh = LocalEtcd(data_dir=restored_dir)
    subprocess.run(
        [
            str(bin_dir / "etcdutl"),
            "snapshot",
            "restore",
            str(snapshot),
            "--data-dir",
            str(restored_dir / "data"),
            "--name",
            fresh.name,
            "--initial-cluster",
            f"{fresh.name}={fresh.peer_url}",
            "--initial-advertise-peer-urls",
            fresh.peer_url,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    fresh.start()
    try:
        restored = ("--etcd", fresh.endpoint, "--namespace", namespace)
        # A new etcd cluster id: the sweepers refuse until the namespace is re-bound.
        run = cli("gcd", "status", "--json", *restored)
        assert run.code == exitcodes.BLOCKED
        problem = json.loads(run.out)["binding_problem"]
        assert "sweepers delete nothing until it is re-bound" in problem
        run = cli(
            "watermark",
            "namespace",
            "bind",
            "--replace",
            "--bucket",
            bucket,
            "--root",
            ROOT_PREFIX,
            "--endpoint-url",
            s3_server.endpoint_url,
            *restored,
        )
        assert run.code == exitcodes.OK
        run = cli("gcd", "status", "--json", *restored)
        assert run.code == exitcodes.OK
        status = json.loads(run.out)
        assert (status["safe_epoch"], status["binding_problem"]) == (3, None)
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
            *restored,
        )
        assert run.code == exitcodes.OK
        summary = run.json
        assert summary["deleted"] == 3
        claim = f"{ROOT_PREFIX}/.l0gc-claim.json"  # the binding's claim object
        assert s3_server.keys(bucket) == {*keys[3:], claim}  # epochs 4-7 kept
    finally:
        fresh.close()


def test_a_namespace_export_imported_into_a_fresh_etcd_sweeps_exactly_to_its_m(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """export at global M 3; the old etcd then moves to M 5. Import into a fresh etcd:
    paused and re-bind needed (nothing deleted before); an import into a namespace that
    holds keys is refused (exit 3); after bind --replace and resume the sweep deletes
    epochs 1-3 and keeps 4-7."""
    prepare(etcd_server, namespace)
    etcd = ("--etcd", etcd_server.endpoint, "--namespace", namespace)
    run = cli(
        "gcd",
        "namespace",
        "bind",
        "--bucket",
        bucket,
        "--root",
        ROOT_PREFIX,
        "--endpoint-url",
        s3_server.endpoint_url,
        *etcd,
    )
    assert run.code == exitcodes.OK
    for name, m in (("orders/0", "5"), ("orders/1", "3")):
        run = cli("watermark", "partition", "repair", name, "--watermark", m, *etcd)
        assert run.code == 0
    keys = [f"{ROOT_PREFIX}/000/{epoch:018d}/obj-{epoch}" for epoch in range(1, 8)]
    s3_server.seed(bucket, keys)
    backup = tmp_path / "prod.json"
    run = cli("watermark", "namespace", "export", str(backup), "--json", *etcd)
    assert run.code == 0
    assert json.loads(run.out)["exported"] == 4  # epoch, binding, 2 records
    assert backup.stat().st_mode & 0o077 == 0
    run = cli("watermark", "partition", "repair", "orders/1", "--watermark", "6", *etcd)
    assert run.code == 0
    run = cli("watermark", "namespace", "import", str(backup), *etcd)
    assert run.code == exitcodes.BLOCKED
    assert "already holds" in run.err

    fresh = LocalEtcd().start()
    try:
        restored = ("--etcd", fresh.endpoint, "--namespace", namespace)
        run = cli("watermark", "namespace", "import", str(backup), "--json", *restored)
        assert run.code == exitcodes.OK
        assert json.loads(run.out)["imported"] == 5  # + the pause marker
        s3 = (
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--grace",
            "0s",
            "--json",
        )
        cli("gcd", "sweep", *s3, *restored)
        assert s3_server.keys(bucket) >= set(keys)  # paused and bound elsewhere: nothing gone
        run = cli(
            "watermark",
            "namespace",
            "bind",
            "--replace",
            "--bucket",
            bucket,
            "--root",
            ROOT_PREFIX,
            "--endpoint-url",
            s3_server.endpoint_url,
            *restored,
        )
        assert run.code == exitcodes.OK
        run = cli("gcd", "resume", *restored)
        assert run.code == exitcodes.OK
        run = cli("gcd", "sweep", *s3, *restored)
        assert run.code == exitcodes.OK
        summary = run.json
        assert summary["deleted"] == 3
        claim = f"{ROOT_PREFIX}/.l0gc-claim.json"
        assert s3_server.keys(bucket) == {*keys[3:], claim}
    finally:
        fresh.close()
