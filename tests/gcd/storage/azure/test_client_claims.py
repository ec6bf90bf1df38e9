"""Issue 25 on Azure Blob Storage (Azurite on loopback): roots never nest (finding 1) and a
prefix Azure cannot list is skipped by name, not retried for ever (finding 6)."""

from __future__ import annotations

import collections
import itertools
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.pipeline.transport import AioHttpTransport
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from gcd.observe.metrics import SweeperMetrics
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.service.runtime import Announcing
from gcd.storage.azure.client import AzureBlobStore
from gcd.storage.azure.settings import AzureSettings
from gcd.sweep.binding import BindingConflict, BoundSource, bind_namespace
from gcd.sweep.shards import ShardAnnouncement
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0gc.contract.binding import StorageTarget, claim_key
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_azurite import LocalAzurite

pytestmark = pytest.mark.integration

OUTER, INNER = "level_zero/data", "level_zero/data/417"
LAYOUT = KeyLayout.default(OUTER)
_names = itertools.count()


@pytest.fixture
async def container(
    azurite_server: LocalAzurite, tmp_path: Path
) -> AsyncIterator[tuple[ContainerClient, AzureSettings]]:
    """A fresh container and the settings to reach it (connection string in a file)."""
    name = f"l0gc-claims-{next(_names)}"
    conn = azurite_server.write_connection_string(tmp_path / "azure-connection-string")
    async with BlobServiceClient.from_connection_string(azurite_server.connection_string) as svc:
        client = await svc.create_container(name)
        yield client, AzureSettings(azurite_server.account_url, name, str(conn))
        await client.delete_container()


async def names(client: ContainerClient) -> set[str]:
    return {blob.name async for blob in client.list_blobs()}


def count_list_requests(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Count the List Blobs requests the Azure SDK puts on the wire, by prefix, from now on
    (its HTTP transport's sends: one per attempt, whoever retries)."""
    sent: collections.Counter[str] = collections.Counter()
    real_send = AioHttpTransport.send

    async def send(self: AioHttpTransport, request: Any, **options: Any) -> Any:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.url).query)
        if query.get("comp") == ["list"]:
            sent[query.get("prefix", [""])[0]] += 1
        return await real_send(self, request, **options)

    monkeypatch.setattr(AioHttpTransport, "send", send)
    return sent


async def test_nested_roots_are_refused_and_never_swept_on_azure(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """Bind refuses nesting both ways; admission and listing keep the overlap safe."""
    client, settings = container
    kv = MemoryKV()

    def target(root: str) -> StorageTarget:
        return StorageTarget(settings.container, root, settings.account_url, kind="azure")

    async with AzureBlobStore.open(settings) as store:
        await bind_namespace(WatermarkStore(kv, "/inner"), store, target(INNER))
        with pytest.raises(BindingConflict, match=f"contains azure://.*/{INNER}.*'/inner'"):
            await bind_namespace(WatermarkStore(kv, "/outer"), store, target(OUTER))
        await bind_namespace(WatermarkStore(kv, "/beside"), store, target("level_zero/data2"))
        with pytest.raises(BindingConflict, match=f"inside azure://.*/{INNER}.*'/inner'"):
            await bind_namespace(WatermarkStore(kv, "/deeper"), store, target(f"{INNER}/x"))
        # An overlap left behind (bound before the check): /outer's claim written by hand.
        outer = await bind_namespace(WatermarkStore(kv, "/outer2"), store, target("elsewhere"))
        claim = outer.binding.claim()
        await client.upload_blob(claim_key(OUTER), claim.encode())
        read = await BoundSource(
            WatermarkStore(kv, "/inner"), target(INNER), store
        ).read_safe_epoch()
        assert read.refused_reason is not None
        assert f"inside azure://{settings.container}/{OUTER}" in read.refused_reason
        assert "'/outer2'" in read.refused_reason

        inner_keys = {LAYOUT.format(417, 1, "a"), LAYOUT.format(417, 3, "b")}
        kept_outer = LAYOUT.format(1, 9, "live")
        for key in (*inner_keys, LAYOUT.format(1, 1, "g"), kept_outer):
            await client.upload_blob(key, b"x")
        config = RoundConfig(layout=LAYOUT, grace_s=0.0, page_size=2)
        result = await Sweeper(store, config, clock=lambda: time.time() + 60).sweep(5, None)
    assert result.summary.nested_roots == (INNER,)
    assert (result.summary.deleted, result.summary.skipped_nested) == (1, 2)
    assert inner_keys | {kept_outer} <= await names(client)


async def test_a_prefix_azure_cannot_list_is_skipped_by_name_and_the_round_ends(
    container: tuple[ContainerClient, AzureSettings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A blob named with \\x01 makes Azurite answer 500 to every listing of its prefix.

    The round retries it within its budget, narrows it down to its prefix directory, names
    that (summary, metric, log) and collects everything else. Before: the SDK retried
    each attempt for ~80 s, so one prefix held the round for many minutes. Counted, not
    timed: every List Blobs request that reached the wire is one the store sent (the SDK
    retries none), and the poisoned prefix cost its retry budget, not more.
    """
    client, settings = container
    poison = LAYOUT.format(417, 1, "bad\x01name")
    garbage = [LAYOUT.format(p, 1, "g") for p in (1, 250, 410, 416, 418, 450, 999)]
    for key in (poison, *garbage):
        await client.upload_blob(key, b"x")
    config = RoundConfig(
        layout=LAYOUT,
        grace_s=0.0,
        list_concurrency=4,
        backoff=Backoff(base_s=0.01, cap_s=0.05, max_attempts=3),
    )
    metrics = SweeperMetrics()
    sent = count_list_requests(monkeypatch)
    async with AzureBlobStore.open(settings) as store:
        sweeper = Sweeper(store, config, metrics=metrics, clock=lambda: time.time() + 60)
        result = await sweeper.sweep(5, None)
        announce = Announcing(store, sweeper)  # what `gcd status` shows of a running sweeper
        told = announce(ShardAnnouncement("s", 0, 1, 1.0))
    # Every List Blobs attempt on the wire is one the store sent: the SDK retries none.
    assert sum(sent.values()) == store.list_requests, (sent, store.list_requests)
    # Each prefix holding the poison failed its budget of attempts (plus the one-key probe
    # of its parent's narrowing), no more; before, each attempt was ~10 of the SDK's.
    assert {prefix for prefix in sent if poison.startswith(prefix)} >= {OUTER + "/4", INNER}
    assert max(sent.values()) <= config.backoff.max_attempts + 1, sent
    assert told.problems == ("cannot list level_zero/data/417: skipped",)
    summary = result.summary
    assert summary.unlistable_prefixes == ("level_zero/data/417",)
    assert (summary.deleted, summary.errors, summary.outcome) == (len(garbage), 1, "partial")
    assert not result.complete
    assert metrics.prefixes_unlistable._value.get() == 1
    assert await client.get_blob_client(poison).exists()  # listing its prefix fails: by name
    await client.delete_blob(poison)
    for key in garbage:
        assert not await client.get_blob_client(key).exists()
    assert '"unlistable_prefixes": ["level_zero/data/417"]' in summary.to_json()
