"""The undo window on stores with soft delete of their own: Azure Blob and GCS.

Azurite and the GCS emulator implement neither soft delete nor its restore calls, so
these tests run `AzureBlobStore` and `GcsObjectStore` (the real clients, over HTTP on
loopback) against stand-in servers (tests/gcd/storage/softdelete_standins.py) that
follow the documented APIs:

- GCS bucket soft delete policy, ``softDeletePolicy.retentionDurationSeconds`` of the
  bucket resource: https://cloud.google.com/storage/docs/json_api/v1/buckets/get and
  https://cloud.google.com/storage/docs/soft-delete
- GCS objects.restore (``POST /storage/v1/b/BUCKET/o/OBJECT/restore?generation=G``,
  preconditions such as ``ifGenerationMatch=0``; the restored object gets a new
  generation): https://cloud.google.com/storage/docs/json_api/v1/objects/restore
- GCS batch requests: https://cloud.google.com/storage/docs/batch
- Azure Get Blob Service Properties (``GET /?restype=service&comp=properties``,
  ``DeleteRetentionPolicy`` ``Enabled``/``Days``):
  https://learn.microsoft.com/rest/api/storageservices/get-blob-service-properties
- Azure Undelete Blob (``PUT /CONTAINER/BLOB?comp=undelete``; 404 ``BlobNotFound`` when
  there is nothing to restore):
  https://learn.microsoft.com/rest/api/storageservices/undelete-blob and
  https://learn.microsoft.com/azure/storage/blobs/soft-delete-blob-overview
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gcd.cli.main import main
from gcd.journal.records import JournalWriter, chain_digest, read_journal
from gcd.rules.layout import KeyLayout
from gcd.storage.azure.client import AzureBlobStore
from gcd.storage.azure.settings import AzureSettings
from gcd.storage.gcs.client import GcsObjectStore
from gcd.storage.gcs.settings import GcsSettings
from gcd.sweep.sweeper import RoundConfig, Sweeper
from gcd.undo.restore import RestoreOutcome, Selection, deletions_in, restore, select
from gcd.undo.window import UndoKeeper
from l0gc import exitcodes
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key
from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from tests.gcd.cli.test_sweep_cli import prepare_etcd
from tests.gcd.storage.softdelete_standins import AzureStandIn, GcsStandIn

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture
def gcs() -> Iterator[GcsStandIn]:
    server = GcsStandIn()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def azure(tmp_path: Path) -> Iterator[AzureStandIn]:
    server = AzureStandIn()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def gcs_settings(server: GcsStandIn) -> GcsSettings:
    return GcsSettings(server.bucket, server.endpoint_url, anonymous=True)


def azure_settings(server: AzureStandIn, tmp_path: Path) -> AzureSettings:
    secret = tmp_path / "azure-connection-string"
    secret.write_text(
        f"DefaultEndpointsProtocol=http;AccountName={server.account};"
        f"AccountKey={DEV_KEY};BlobEndpoint={server.account_url};"
    )
    return AzureSettings(server.account_url, "l0c", str(secret))


def test_gcs_reads_the_bucket_soft_delete_retention(gcs: GcsStandIn) -> None:
    """buckets.get's softDeletePolicy gives the retention; no policy is 0; a refused read
    is None (then the window does not rely on the store)."""

    async def retention() -> float | None:
        async with GcsObjectStore.open(gcs_settings(gcs)) as store:
            return await store.soft_delete_retention()

    assert asyncio.run(retention()) == 604800.0
    assert gcs.calls[-1] == "buckets.get fields=softDeletePolicy"
    gcs.retention_s = None
    assert asyncio.run(retention()) == 0.0
    gcs.retention_s = -1
    assert asyncio.run(retention()) is None


def test_gcs_undelete_restores_the_generation_never_over_a_live_object(gcs: GcsStandIn) -> None:
    """objects.restore of the deleted generation brings the bytes back; with an object
    live under the name it answers live (nothing overwritten); a generation the store
    no longer keeps is gone."""
    key = LAYOUT.format(7, 3, "a.log")
    first = gcs.put(key, b"first bytes", 1.0)
    gcs.delete(key)

    async def undelete(generation: str | None) -> str:
        async with GcsObjectStore.open(gcs_settings(gcs)) as store:
            return await store.undelete(key, generation)

    assert asyncio.run(undelete(str(first.generation))) == "restored"
    assert gcs.live[key].body == b"first bytes"
    assert f"generation={first.generation}&ifGenerationMatch=0" in gcs.calls[-1]
    gcs.put(key, b"a writer's new bytes", 2.0)
    gcs.deleted[(key, first.generation)] = first  # as if it were soft-deleted again
    assert asyncio.run(undelete(str(first.generation))) == "live"
    assert gcs.live[key].body == b"a writer's new bytes"
    gcs.delete(key)
    assert asyncio.run(undelete("999999")) == "gone"
    assert asyncio.run(undelete(None)) == "gone"  # no generation journaled: nothing to name


def test_azure_reads_the_retention_and_undeletes_by_name(
    azure: AzureStandIn, tmp_path: Path
) -> None:
    """Get Blob Service Properties' DeleteRetentionPolicy gives the retention (disabled:
    0); Undelete Blob brings a soft-deleted blob back, never runs over a live one, and a
    blob with nothing soft-deleted is gone."""
    settings = azure_settings(azure, tmp_path)
    key = LAYOUT.format(7, 3, "a.log")

    async def call(name: str) -> Any:
        async with AzureBlobStore.open(settings) as store:
            if name == "retention":
                return await store.soft_delete_retention()
            return await store.undelete(key, None)

    assert asyncio.run(call("retention")) == 7 * 86400.0
    azure.retention_days = None
    assert asyncio.run(call("retention")) == 0.0
    assert asyncio.run(call("undelete")) == "gone"
    azure.put(f"l0c/{key}", b"bytes", 1.0)
    azure.delete(f"l0c/{key}")
    assert asyncio.run(call("undelete")) == "restored"
    assert azure.live[f"l0c/{key}"].body == b"bytes"
    assert any(c.startswith(f"undelete l0c/{key} comp=undelete") for c in azure.calls)
    assert asyncio.run(call("undelete")) == "live"


def seed(gcs: GcsStandIn) -> tuple[dict[str, bytes], set[str]]:
    """Eligible keys (epochs 1-5) with their bytes and live keys (epochs 6, 9)."""
    eligible, live = {}, set()
    for epoch in (1, 3, 5, 6, 9):
        key = LAYOUT.format(7, epoch, f"seg-{epoch}.log")
        gcs.put(key, f"bytes of {key}".encode(), 1.0)
        if epoch <= 5:
            eligible[key] = gcs.live[key].body
        else:
            live.add(key)
    return eligible, live


async def anchor(etcd: LocalEtcd, namespace: str, journal: Path) -> None:
    """Anchor the journal's end in etcd, as a sweeper with etcd does (restore acts only on
    anchored journals)."""
    last = read_journal([journal]).records[-1]
    found = JournalAnchor(last.sweeper, last.doc["seq"], chain_digest(last), "segment", 0.0)
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    try:
        await kv.txn([], [Put(anchor_key(namespace, last.sweeper), found.encode())])
    finally:
        await kv.close()


async def a_round(
    gcs: GcsStandIn, journal: Path | None, keeper: UndoKeeper, namespace: str = "/l0gc/t"
) -> dict[str, Any]:
    """One sweeper round at M = 5 with a 1 h window, journaled in `journal`."""
    sinks = (
        []
        if journal is None
        else [
            JournalWriter(
                journal, "s-1", namespace=namespace, bucket=gcs.bucket, root=ROOT, fsync=False
            )
        ]
    )
    async with GcsObjectStore.open(gcs_settings(gcs)) as store:
        sweeper = Sweeper(
            store,
            RoundConfig(layout=LAYOUT, grace_s=0, undo_window_s=3600),
            sinks=sinks,
            undo=keeper,
        )
        result = await sweeper.sweep(5, 8)
    for sink in sinks:
        sink.close()
    return result.summary.to_dict()


def test_a_store_retention_covering_the_window_deletes_plainly_and_restore_undeletes(
    gcs: GcsStandIn,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With a 7-day bucket soft delete and a 1 h window the round deletes plainly and
    journals each generation; `gcd restore --storage gcs` (GC paused) brings every key
    back with its own bytes by objects.restore of that generation."""
    eligible, live = seed(gcs)
    journal = tmp_path / "journal"
    summary = asyncio.run(a_round(gcs, journal, UndoKeeper(3600), namespace))
    assert summary["undo"]["rule"] == "store-soft-delete"
    assert summary["undo"]["store_retention_s"] == 604800.0
    assert summary["deleted"] == len(eligible)
    assert set(gcs.live) == live
    befores = [r.doc for r in read_journal([journal]).records if r.kind == "before"]
    generations = {k: h for d in befores for k, h in zip(d["keys"], d["hides"], strict=True)}
    assert {k: int(h[0]) for k, h in generations.items()} == dict(gcs.deleted.keys())

    prepare_etcd(etcd_server, namespace, bound_to=None)
    asyncio.run(anchor(etcd_server, namespace, journal))  # as the sweeper's AnchorKeeper does
    flags = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    restore_argv = [
        "restore",
        "--storage",
        "gcs",
        "--bucket",
        gcs.bucket,
        "--endpoint-url",
        gcs.endpoint_url,
        "--gcs-anonymous",
        "--journal-dir",
        str(journal),
        "--json",
        *flags,
    ]
    assert main(restore_argv) == exitcodes.USAGE  # GC not paused
    assert main(["pause", "--reason", "wrong M(p)", *flags]) == exitcodes.OK
    capsys.readouterr()
    assert main(restore_argv) == exitcodes.OK
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["restored"] == len(eligible), report
    assert {key: gcs.live[key].body for key in eligible} == eligible
    assert set(gcs.live) == live | set(eligible)
    assert list(journal.glob("restore-*.jsonl"))


def test_restore_on_azure_undeletes_what_the_journal_deleted(
    azure: AzureStandIn, tmp_path: Path
) -> None:
    """`restore` on an Azure store: a soft-deleted key comes back, a key live again is
    already restored (not overwritten), a key whose retention passed is reclaimed."""
    keys = [LAYOUT.format(7, epoch, "a.log") for epoch in (1, 2, 3)]
    for key in keys:
        azure.put(f"l0c/{key}", key.encode(), 1.0)
        azure.delete(f"l0c/{key}")
    azure.live[f"l0c/{keys[1]}"] = azure.deleted.pop(
        next(p for p in azure.deleted if p[0] == f"l0c/{keys[1]}")
    )
    azure.deleted = {p: s for p, s in azure.deleted.items() if p[0] != f"l0c/{keys[2]}"}
    journal = tmp_path / "journal"
    writer = JournalWriter(
        journal, "s-1", namespace="/l0gc/t", bucket="l0c", root=ROOT, fsync=False
    )
    from gcd.observe.events import BatchAttempt, BatchOutcome  # noqa: PLC0415

    writer.before(BatchAttempt(None, tuple(keys), (1, 2, 3), 1, 1, 1))
    writer.after(
        BatchOutcome(BatchAttempt(None, tuple(keys), (1, 2, 3), 1, 1, 1), deleted=tuple(keys))
    )
    writer.close()
    chosen = select(deletions_in(read_journal([journal])), Selection())

    async def run() -> list[Any]:
        async with AzureBlobStore.open(azure_settings(azure, tmp_path)) as store:
            return await restore(store, chosen)

    results = {r.key: r.outcome for r in asyncio.run(run())}
    assert results == {
        keys[0]: RestoreOutcome.RESTORED,
        keys[1]: RestoreOutcome.ALREADY_RESTORED,
        keys[2]: RestoreOutcome.ALREADY_RECLAIMED,
    }
    assert azure.live[f"l0c/{keys[0]}"].body == keys[0].encode()


def test_a_retention_shorter_than_the_window_falls_back_and_says_so_once(
    gcs: GcsStandIn,
) -> None:
    """A 60 s soft delete cannot keep a 1 h window: the round follows the delayed M (with
    no history, nothing is deleted), and the log says so once over two rounds."""
    eligible, live = seed(gcs)
    gcs.retention_s = 60
    keeper = UndoKeeper(3600)
    with capture_logs() as logs:
        first = asyncio.run(a_round(gcs, None, keeper))
        second = asyncio.run(a_round(gcs, None, keeper))
    assert first["undo"]["rule"] == second["undo"]["rule"] == "delayed-m"
    assert first["deleted"] == second["deleted"] == 0
    assert set(gcs.live) == live | set(eligible)
    said = [entry for entry in logs if entry["event"] == "undo.store_retention_short"]
    assert len(said) == 1
    assert said[0]["retention_s"] == 60.0
