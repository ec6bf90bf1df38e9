"""The sweeper on Azure Blob Storage (`gcd.storage.azure.client`), against Azurite on loopback.

Azurite stamps its own LastModified, so objects are aged by the sweeper's clock. Every
container is fresh per test; one Azurite process serves the session.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from gcd.observe.report import RoundResult
from gcd.rules.layout import KeyLayout
from gcd.storage.azure.client import AzureBlobStore
from gcd.storage.azure.settings import AzureSettings, redact_url
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0gc.errors import ConfigError
from l0lab.testing.local_azurite import LocalAzurite
from tests.gcd.storage.s3.test_client_servers import SAFE, mixed_keys

pytestmark = pytest.mark.integration

LAYOUT = KeyLayout.default("level_zero/data")
_names = itertools.count()


def ahead(hours: float) -> float:
    """The sweeper's clock `hours` ahead of now (negative: behind)."""
    return time.time() + hours * 3600


@pytest.fixture
async def container(
    azurite_server: LocalAzurite, tmp_path: Path
) -> AsyncIterator[tuple[ContainerClient, AzureSettings]]:
    """A fresh container and the settings to reach it (connection string in a file)."""
    name = f"l0gc-{next(_names)}"
    conn = azurite_server.write_connection_string(tmp_path / "azure-connection-string")
    async with BlobServiceClient.from_connection_string(azurite_server.connection_string) as svc:
        client = await svc.create_container(name)
        yield client, AzureSettings(azurite_server.account_url, name, str(conn))
        await client.delete_container()


async def seed(client: ContainerClient, keys: list[str]) -> None:
    """Upload one small blob per key."""
    for key in keys:
        await client.upload_blob(key, b"x", overwrite=True)


async def names(client: ContainerClient) -> set[str]:
    """Every blob name in the container."""
    return {blob.name async for blob in client.list_blobs()}


async def sweep(settings: AzureSettings, safe: int, **options: object) -> tuple[RoundResult, int]:
    """One round at M = `safe` (clock two hours ahead unless `clock` is given); the
    round's result and the List Blobs requests it sent."""
    clock = options.pop("clock", lambda: ahead(2))
    config = RoundConfig(layout=LAYOUT, grace_s=600.0, **options)  # type: ignore[arg-type]
    async with AzureBlobStore.open(settings) as store:
        result = await Sweeper(store, config, clock=clock).sweep(safe, None)  # type: ignore[arg-type]
        return result, store.list_requests


async def test_exactly_the_right_blobs_are_deleted(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """At or below M and old enough: deleted; live, stray and foreign names kept."""
    client, settings = container
    keys, deletable = mixed_keys()
    await seed(client, keys)
    result, _ = await sweep(settings, SAFE)
    assert await names(client) == set(keys) - deletable
    assert (result.summary.deleted, result.summary.errors) == (len(deletable), 0)


async def test_young_and_future_blobs_are_kept(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """Azurite's LastModified holds garbage back within the grace, and a LastModified in
    the sweeper's future (a clock behind the store's) never makes a blob old."""
    client, settings = container
    garbage = [LAYOUT.format(5, epoch, "g") for epoch in range(1, SAFE + 1)]
    await seed(client, garbage)
    young, _ = await sweep(settings, SAFE, clock=time.time)
    future, _ = await sweep(settings, SAFE, clock=lambda: ahead(-1))
    assert await names(client) == set(garbage)
    assert young.summary.skipped_young == future.summary.skipped_young == len(garbage)


async def test_skip_ahead_walks_the_prefixes_and_lists_less(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """100 live blobs per garbage blob: Blob Storage has no StartAfter, so past a prefix's
    first live blob the store walks the level with a delimiter; it lists far less than
    a full listing and deletes the same garbage."""
    client, settings = container
    garbage = [LAYOUT.format(p, e, "g") for p in (3, 4, 5) for e in (1, 2)]
    live = [LAYOUT.format(p, 100 + i, "live") for p in (3, 4, 5) for i in range(200)]
    strays = ["level_zero/data/004-a", "level_zero/data/0040"]
    await seed(client, garbage + live + strays)
    skipping, skip_lists = await sweep(settings, 2, page_size=20, list_concurrency=1)
    assert await names(client) == set(live + strays)
    await seed(client, garbage)
    full, full_lists = await sweep(settings, 2, page_size=20, list_concurrency=1, skip_ahead=False)
    assert await names(client) == set(live + strays)
    assert skipping.summary.deleted == full.summary.deleted == len(garbage)
    assert full_lists >= (len(live) + len(garbage)) // 20
    assert skip_lists <= 3 * 3 + 4, (skip_lists, full_lists)


async def test_a_blob_that_cannot_be_deleted_is_reported_by_name(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """A leased blob inside a batch fails alone (its Azure code, kept, counted); the rest
    of the batch is deleted."""
    client, settings = container
    garbage = [LAYOUT.format(7, 1, f"g{i}") for i in range(300)]  # two Blob Batch requests
    await seed(client, garbage)
    leased = garbage[123]
    await client.get_blob_client(leased).acquire_lease(lease_duration=-1)
    result, _ = await sweep(settings, SAFE, batch_size=1000)
    assert await names(client) == {leased}
    assert result.summary.deleted == len(garbage) - 1
    assert result.summary.errors == 1


async def test_the_claim_is_created_once_and_read_back(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """put_object(if_absent=True) creates a blob once (If-None-Match: *); a second create
    is refused; get_object reads it back; a missing blob reads as None."""
    _, settings = container
    async with AzureBlobStore.open(settings) as store:
        assert await store.put_object("r/.l0gc-claim.json", b'{"a": 1}', if_absent=True)
        assert not await store.put_object("r/.l0gc-claim.json", b'{"b": 2}', if_absent=True)
        assert await store.get_object("r/.l0gc-claim.json", max_bytes=100) == b'{"a": 1}'
        assert await store.get_object("r/none", max_bytes=100) is None


def test_settings_refuse_what_cannot_work(tmp_path: Path) -> None:
    """A URL without a scheme, a bad container name, an unreadable or wrong connection
    string file: ConfigError naming the value and the fix."""
    with pytest.raises(ConfigError, match="must start with https://"):
        AzureSettings("acct.blob.core.windows.net", "l0gc")
    for bad in ("L0gc", "l0", "-l0gc", "l0gc-", "l0--gc", "l0gç", "l0gc²", "a" * 64):
        with pytest.raises(ConfigError, match="is not a container name"):
            AzureSettings("https://a.blob.core.windows.net", bad)
    assert AzureSettings("https://a.blob.core.windows.net", "l0-g-c" + "9" * 57).container
    with pytest.raises(ConfigError, match="cannot read the Azure connection string file"):
        AzureSettings(
            "https://a.blob.core.windows.net", "l0gc", str(tmp_path / "missing")
        ).connection_string()
    wrong = tmp_path / "wrong"
    for content in (
        b"hello",
        b"\xd8\x00AccountName=x" * 10,
        b"AccountName=x\x00;",
        b"AccountName=" + b"x" * 70_000,
    ):  # not text, a NUL, too large
        wrong.write_bytes(content)
        with pytest.raises(ConfigError, match="does not hold an Azure Storage connection string"):
            AzureSettings("https://a.blob.core.windows.net", "l0gc", str(wrong)).connection_string()


def test_a_sas_token_is_redacted_and_not_part_of_the_target() -> None:
    """Issue 51 (5): the SAS query of an account URL is a credential: messages show it
    REDACTED, and the binding and the journal name the account without it (a rotated
    token is the same target)."""
    url = "https://a.blob.core.windows.net/?sv=2024&sig=s3cr3t%2B"
    assert redact_url(url) == "https://a.blob.core.windows.net/?sv=REDACTED&sig=REDACTED"
    assert redact_url("https://a.blob.core.windows.net") == "https://a.blob.core.windows.net"
    settings = AzureSettings(url, "l0gc")
    assert settings.target("r").endpoint_url == "https://a.blob.core.windows.net"
    with pytest.raises(ConfigError) as refused:
        AzureSettings("a.blob.core.windows.net?sig=s3cr3t", "l0gc")
    assert "s3cr3t" not in str(refused.value)


async def test_an_answer_for_another_blob_never_counts_as_deleted(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """Sub-responses that come back out of order (here: reversed under the store) are
    matched by their request's path: a key whose place holds another blob's answer is
    reported, not counted as deleted; the key answered in its own place is."""
    client, settings = container
    keys = [LAYOUT.format(7, 1, f"r{i}") for i in range(3)]
    await seed(client, keys)
    async with AzureBlobStore.open(settings) as store:
        real = store._container.delete_blobs

        async def reversed_answers(*blobs: str, **kwargs: Any) -> AsyncIterator[object]:
            answers = [a async for a in await real(*blobs, **kwargs)]

            async def again() -> AsyncIterator[object]:
                for answer in reversed(answers):
                    yield answer

            return again()

        store._container.delete_blobs = reversed_answers  # type: ignore[method-assign,assignment]
        result = await store.delete_batch(keys)
    assert result.deleted == (keys[1],)
    assert [(f.key, f.code) for f in result.errors] == [
        (keys[0], "UnmatchedAnswer"),
        (keys[2], "UnmatchedAnswer"),
    ]


class _Busy:
    """A Blob Batch sub-response saying ServerBusy (503) for `request`'s blob."""

    status_code = 503
    headers: ClassVar[dict[str, str]] = {"x-ms-error-code": "ServerBusy"}

    def __init__(self, request: object) -> None:
        self.request = request


async def test_a_server_busy_blob_throttles_the_deleter_and_is_retried(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """Azure answers one blob of a batch with ServerBusy (503, here injected once under
    the store): the deleter halves its concurrency as for S3's SlowDown, retries the blob,
    and the round ends with every garbage blob deleted and no error."""
    client, settings = container
    garbage = [LAYOUT.format(7, 1, f"b{i}") for i in range(20)]
    await seed(client, garbage)
    async with AzureBlobStore.open(settings) as store:
        real = store._container.delete_blobs
        busy_once = [True]

        async def one_busy(*blobs: str, **kwargs: Any) -> AsyncIterator[object]:
            answers: list[object] = [a async for a in await real(*blobs, **kwargs)]
            if busy_once.pop() if busy_once else False:
                answers[0] = _Busy(answers[0].request)  # type: ignore[attr-defined]

            async def again() -> AsyncIterator[object]:
                for answer in answers:
                    yield answer

            return again()

        store._container.delete_blobs = one_busy  # type: ignore[method-assign,assignment]
        config = RoundConfig(layout=LAYOUT, grace_s=600.0, batch_size=5, concurrency=4)
        sweeper = Sweeper(store, config, clock=lambda: ahead(2))
        result = await sweeper.sweep(SAFE, None)
    assert not busy_once, "the injection ran"
    assert sweeper.deleter.limiter.cuts == 1
    assert result.summary.deleted == len(garbage)
    assert result.summary.errors == 0
    assert await names(client) == set()


async def test_a_start_point_inside_a_directory_lists_the_rest_of_it(
    container: tuple[ContainerClient, AzureSettings],
) -> None:
    """Issue 35, item 13: the walk's delimiter listing sees the start point's directory
    as one name that sorts before it; the names after the start point in that directory
    (and in the directories it lies in) are listed, not skipped."""
    client, settings = container
    keys = [LAYOUT.format(p, e, name) for p in (4, 5) for e in (1, 2) for name in "abc"]
    await seed(client, keys)
    start = LAYOUT.format(4, 1, "a")
    async with AzureBlobStore.open(settings) as store:
        listed: list[str] = []
        token: str | None = None
        while True:
            after = start if token is None else None
            page = await store.list_page(
                "level_zero/data/", start_after=after, continuation_token=token, max_keys=2
            )
            listed += [obj.key for obj in page.objects]
            if (token := page.next_token) is None:
                break
    assert listed == sorted(key for key in keys if key > start)


async def test_an_answer_with_a_doctype_is_refused(tmp_path: Path) -> None:
    """Issue 35, item 9: the SDK decodes an XML answer and expands its internal entities;
    a stand-in Blob endpoint answering a DOCTYPE gets a retryable error, not a listing
    with a 1,000,000-character name."""
    from aiohttp import web  # noqa: PLC0415

    from l0gc.errors import StorageError  # noqa: PLC0415
    from l0lab.testing.local_servers import free_port  # noqa: PLC0415

    body = (
        b'<?xml version="1.0" encoding="utf-8"?><!DOCTYPE x [<!ENTITY a "'
        + b"a" * 100_000
        + b'"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b'<EnumerationResults ContainerName="c"><Blobs><Blob><Name>&b;</Name><Properties>'
        b"<Last-Modified>Sun, 22 Nov 2026 03:12:50 GMT</Last-Modified>"
        b"<Content-Length>1</Content-Length></Properties></Blob></Blobs><NextMarker/>"
        b"</EnumerationResults>"
    )

    async def handle(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/xml")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    stand_in = LocalAzurite(port=free_port())
    await web.TCPSite(runner, "127.0.0.1", stand_in.port).start()
    try:
        conn = stand_in.write_connection_string(tmp_path / "conn")
        settings = AzureSettings(stand_in.account_url, "ccc", str(conn))
        async with AzureBlobStore.open(settings) as store:
            with pytest.raises(StorageError, match="DOCTYPE") as raised:
                await store.list_page("level_zero/data/")
    finally:
        await runner.cleanup()
    assert (raised.value.code, raised.value.retryable) == ("InternalError", True)
