"""The sweeper on Google Cloud Storage (`gcd.storage.gcs.client`), against the GCS emulator on
loopback (`l0lab.testing.local_gcs`), and the emulator's deviations from GCS pinned.

The server-neutral tests of tests/gcd/storage/s3/test_client_servers.py, where they apply, run
here on GCS: the same keys, the same real etcd, the same expectations. The emulator
stamps its own `updated` time, so objects are aged by the sweeper's clock. Every bucket
is fresh per test; one emulator process serves the session.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gcd.observe.report import PlanWriter, RoundResult
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.gcs.client import GcsObjectStore
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.registry import preflight_store
from gcd.storage.retry import Retrier
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0gc.errors import ConfigError, StorageError
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_servers import free_port
from tests.gcd.storage.s3.test_client_servers import SAFE, mixed_keys, watermarks

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
__all__ = ["watermarks"]  # the real-etcd fixture, shared with the S3 servers' tests


def old_clock() -> float:
    """The sweeper's clock two hours ahead: everything just written is past the grace."""
    return time.time() + 7200


def settings(server: LocalGcs, bucket: str) -> GcsSettings:
    """The emulator takes no credentials."""
    return GcsSettings(bucket, server.endpoint_url, anonymous=True)


Wrap = Callable[[GcsObjectStore], None]


async def sweep(
    server: LocalGcs,
    bucket: str,
    source: WatermarkStore | None,
    *,
    override: int | None = None,
    clock: Callable[[], float] = old_clock,
    plan: PlanWriter | None = None,
    wrap: Wrap | None = None,
    **config: object,
) -> tuple[RoundResult, GcsObjectStore]:
    """One round (a fast retrier); the result and the store (its request counters)."""
    options: dict[str, object] = {
        "layout": LAYOUT,
        "grace_s": 600.0,
        "concurrency": 4,
        "list_concurrency": 2,
    }
    options.update(config)
    retrier = Retrier(Backoff(base_s=0.01, cap_s=0.2, max_attempts=10), rng=random.Random(0))
    async with GcsObjectStore.open(settings(server, bucket)) as store:
        if wrap is not None:
            wrap(store)
        sweeper = Sweeper(
            store,
            RoundConfig(**options),
            plan=plan,
            retrier=retrier,  # type: ignore[arg-type]
            clock=clock,
        )
        return await run_round(sweeper, SafetyGate(), source, override=override), store


# -- the server-neutral sweeper tests, on GCS ---------------------------------------------


async def test_exactly_the_right_keys_are_deleted(
    gcs_server: LocalGcs, gcs_bucket: str, watermarks: WatermarkStore
) -> None:
    """At or below M and old enough: deleted; live, stray and foreign names kept."""
    keys, deletable = mixed_keys()
    gcs_server.seed(gcs_bucket, keys)
    result, _ = await sweep(gcs_server, gcs_bucket, watermarks)
    assert gcs_server.keys(gcs_bucket) == set(keys) - deletable
    assert (result.summary.deleted, result.summary.errors) == (len(deletable), 0)


async def test_objects_younger_than_the_grace_are_kept(
    gcs_server: LocalGcs, gcs_bucket: str, watermarks: WatermarkStore
) -> None:
    """The server's `updated` time holds garbage back until the grace has passed."""
    garbage = [LAYOUT.format(12, epoch, "g") for epoch in range(1, SAFE + 1)]
    gcs_server.seed(gcs_bucket, garbage)
    young, _ = await sweep(gcs_server, gcs_bucket, watermarks, clock=time.time)
    assert gcs_server.keys(gcs_bucket) == set(garbage)
    assert young.summary.skipped_young == len(garbage)
    await sweep(gcs_server, gcs_bucket, watermarks)
    assert gcs_server.keys(gcs_bucket) == set()


async def test_dry_run_plan_equals_real_run(
    gcs_server: LocalGcs, gcs_bucket: str, watermarks: WatermarkStore, tmp_path: Path
) -> None:
    """The dry run deletes nothing; its plan is exactly what the real run deletes."""
    keys, _ = mixed_keys()
    gcs_server.seed(gcs_bucket, keys)
    plan_path = tmp_path / "plan.jsonl"
    with PlanWriter(plan_path) as plan:
        await sweep(gcs_server, gcs_bucket, watermarks, dry_run=True, plan=plan)
    assert gcs_server.keys(gcs_bucket) == set(keys)
    planned = {json.loads(line)["key"] for line in plan_path.read_text().splitlines()}
    await sweep(gcs_server, gcs_bucket, watermarks)
    assert set(keys) - gcs_server.keys(gcs_bucket) == planned


async def test_list_requests_follow_the_garbage(gcs_server: LocalGcs, gcs_bucket: str) -> None:
    """30 live objects per garbage object: skip-ahead (startOffset, and the keys before
    it dropped by the client, since the emulator ignores it) lists a few pages per
    prefix, a full listing every page; both delete exactly the garbage."""
    prefixes = (3, 555, 999)
    garbage = [LAYOUT.format(p, e, f"g{e}") for p in prefixes for e in range(1, 11)]
    live = [LAYOUT.format(p, 1000 + i, "live") for p in prefixes for i in range(300)]
    gcs_server.seed(gcs_bucket, garbage + live)
    skipping, store = await sweep(
        gcs_server, gcs_bucket, None, override=20, page_size=50, list_concurrency=1
    )
    assert gcs_server.keys(gcs_bucket) == set(live)
    assert skipping.summary.list_requests == store.list_requests
    gcs_server.seed(gcs_bucket, garbage)
    full, _ = await sweep(
        gcs_server,
        gcs_bucket,
        None,
        override=20,
        page_size=50,
        list_concurrency=1,
        skip_ahead=False,
    )
    assert gcs_server.keys(gcs_bucket) == set(live)
    assert skipping.summary.deleted == full.summary.deleted == len(garbage)
    assert full.summary.list_requests >= len(live) // 50
    assert skipping.summary.list_requests <= 2 * len(prefixes) + 2, (
        skipping.summary.list_requests,
        full.summary.list_requests,
    )


async def test_hundreds_of_keys_in_full_batches(
    gcs_server: LocalGcs, gcs_bucket: str, watermarks: WatermarkStore
) -> None:
    """250 garbage keys: JSON batch requests of at most 100 (the most GCS takes), all
    deleted, nothing failed. Three requests if the listing took the keys in one range;
    one more when it split them into two ranges, each of which sends its partial batch
    as it ends (issue 36: garbage goes out without waiting for all listing to end)."""
    keys = [LAYOUT.format(21, 1 + i % SAFE, f"k{i:05d}") for i in range(250)]
    live = [LAYOUT.format(21, SAFE + 1, "live")]
    gcs_server.seed(gcs_bucket, keys + live)
    result, store = await sweep(gcs_server, gcs_bucket, watermarks, concurrency=1)
    assert gcs_server.keys(gcs_bucket) == set(live)
    assert (result.summary.deleted, result.summary.errors) == (250, 0)
    assert store.batch_requests in (3, 4)


@pytest.mark.parametrize("page_size", [1, 3, 1000])
async def test_stray_names_sorting_out_of_byte_order_change_nothing(
    gcs_server: LocalGcs, gcs_bucket: str, watermarks: WatermarkStore, page_size: int
) -> None:
    """Names that continue below '/' (`417-a`, `417.a`): whatever the page boundaries,
    every garbage key is deleted and every stray and live key kept."""
    garbage = [LAYOUT.format(p, e, "g") for p in (417, 418) for e in (1, SAFE)]
    live = [LAYOUT.format(p, e, "live") for p in (417, 418) for e in (SAFE + 1, 50)]
    strays = [f"{ROOT}/417-a", f"{ROOT}/417.a", f"{ROOT}/417-z/{1:018d}/g", f"{ROOT}/4170"]
    gcs_server.seed(gcs_bucket, garbage + live + strays)
    result, _ = await sweep(gcs_server, gcs_bucket, watermarks, page_size=page_size)
    assert gcs_server.keys(gcs_bucket) == set(live + strays)
    assert result.summary.deleted == len(garbage)


# -- batch answers under the store: order, throttling --------------------------------------


def rewrite_batches(store: GcsObjectStore, change: Callable[[bytes], bytes]) -> list[int]:
    """Pass every batch answer through `change` (under the store); count the batches."""
    real = store._send
    seen: list[int] = []

    async def send(method: str, url: str, operation: str, **kwargs: Any) -> Any:
        status, body, content_type = await real(method, url, operation, **kwargs)
        if url.endswith("/batch/storage/v1"):
            seen.append(status)
            body = change(body)
        return status, body, content_type

    store._send = send  # type: ignore[method-assign]
    return seen


def parts_of(body: bytes) -> tuple[bytes, list[bytes]]:
    boundary = body.split(b"\r\n", 1)[0]
    return boundary, body.split(boundary)[1:-1]


async def test_answers_in_another_order_are_matched_by_content_id(
    gcs_server: LocalGcs, gcs_bucket: str
) -> None:
    """GCS answers a batch in any order (here the emulator's answer reversed under the
    store, the first object's answer made a 403): each object is judged by its own
    answer, so the first is reported and the four others counted deleted."""
    keys = [LAYOUT.format(7, 1, f"r{i}") for i in range(5)]
    gcs_server.seed(gcs_bucket, keys)

    def reverse(body: bytes) -> bytes:
        boundary, parts = parts_of(body)
        parts = [
            part.replace(b"HTTP/1.1 204 No Content", b"HTTP/1.1 403 Forbidden")
            if b"<response-k0>" in part
            else part
            for part in parts
        ]
        return boundary + boundary.join(reversed(parts)) + boundary + b"--"

    async with GcsObjectStore.open(settings(gcs_server, gcs_bucket)) as store:
        assert rewrite_batches(store, reverse) is not None
        result = await store.delete_batch(keys)
    assert sorted(result.deleted) == keys[1:]
    assert [(f.key, f.code) for f in result.errors] == [(keys[0], "403")]


async def test_a_throttled_object_slows_the_deleter_and_is_retried(
    gcs_server: LocalGcs, gcs_bucket: str
) -> None:
    """One object of a batch answered 503 (injected once into the emulator's answer, as
    GCS answers a rate-limited call): the deleter halves its concurrency as for S3's
    SlowDown, sends the object again, and the round ends with nothing left, no error."""
    garbage = [LAYOUT.format(7, 1, f"b{i}") for i in range(20)]
    gcs_server.seed(gcs_bucket, garbage)
    once = [True]

    def busy(body: bytes) -> bytes:
        if not once:
            return body
        once.pop()
        return body.replace(b"HTTP/1.1 204 No Content", b"HTTP/1.1 503 Service Unavailable", 1)

    result, store = await sweep(
        gcs_server,
        gcs_bucket,
        None,
        override=SAFE,
        batch_size=5,
        wrap=lambda s: rewrite_batches(s, busy) and None,
    )
    assert not once, "the injection ran"
    assert result.summary.deleted == len(garbage)
    assert result.summary.errors == 0
    assert gcs_server.keys(gcs_bucket) == set()
    assert store.batch_requests == 5  # four batches and the one retried object


async def test_throttled_and_failed_requests_are_survived(
    gcs_server: LocalGcs, gcs_bucket: str, watermarks: WatermarkStore
) -> None:
    """Whole requests answered 429, 503 or 500 (every third LIST and batch, injected
    under the store, as the S3 servers' fault proxy does for SlowDown/500): retried with
    backoff, exactly the garbage deleted, no error."""
    keys, deletable = mixed_keys()
    gcs_server.seed(gcs_bucket, keys)
    faults = iter([429, 0, 0, 503, 0, 0, 500, 0, 0] * 100)
    injected: list[int] = []

    def inject(store: GcsObjectStore) -> None:
        real = store._send

        async def send(method: str, url: str, operation: str, **kwargs: Any) -> Any:
            status = next(faults)
            if status:
                injected.append(status)
                body = json.dumps({"error": {"code": status, "errors": [{"reason": "x"}]}})
                return status, body.encode(), "application/json"
            return await real(method, url, operation, **kwargs)

        store._send = send  # type: ignore[method-assign]

    result, _ = await sweep(gcs_server, gcs_bucket, watermarks, batch_size=4, wrap=inject)
    assert {429, 503, 500} <= set(injected)
    assert gcs_server.keys(gcs_bucket) == set(keys) - deletable
    assert (result.summary.deleted, result.summary.errors) == (len(deletable), 0)


# -- the claim and settings ----------------------------------------------------------------


async def test_the_claim_is_written_and_read_back(gcs_server: LocalGcs, gcs_bucket: str) -> None:
    """put_object(if_absent=True) writes the claim (ifGenerationMatch=0), get_object reads
    it back, a missing object reads as None, a larger one is refused."""
    async with GcsObjectStore.open(settings(gcs_server, gcs_bucket)) as store:
        assert await store.put_object("r/.l0gc-claim.json", b'{"a": 1}', if_absent=True)
        assert await store.get_object("r/.l0gc-claim.json", max_bytes=100) == b'{"a": 1}'
        assert await store.get_object("r/none", max_bytes=100) is None
        with pytest.raises(StorageError, match="larger than 3 bytes"):
            await store.get_object("r/.l0gc-claim.json", max_bytes=3)


@contextlib.asynccontextmanager
async def fake_gcs(handler: Callable[[web.Request], Any]) -> AsyncIterator[str]:
    """A loopback HTTP server answering every request with `handler` (for GCS answers the
    emulator never gives: 412, 403)."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_second_claim_is_refused_by_generation_match() -> None:
    """GCS answers 412 to ifGenerationMatch=0 when the object exists (the emulator does
    not: pinned below): put_object(if_absent=True) then returns False, and only then."""
    queries: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        queries.append(dict(request.query))
        if request.query.get("ifGenerationMatch") == "0":
            return web.json_response(
                {"error": {"code": 412, "errors": [{"reason": "conditionNotMet"}]}}, status=412
            )
        return web.json_response({"name": request.query["name"]})

    async with (
        fake_gcs(handler) as url,
        GcsObjectStore.open(GcsSettings("bkt", url, anonymous=True)) as store,
    ):
        assert not await store.put_object("r/.l0gc-claim.json", b"{}", if_absent=True)
        assert await store.put_object("r/.l0gc-claim.json", b"{}", if_absent=False)
    assert [q.get("ifGenerationMatch") for q in queries] == ["0", None]
    assert queries[0]["name"] == "r/.l0gc-claim.json"


async def test_a_service_account_key_file_is_used_and_a_bad_one_refused(tmp_path: Path) -> None:
    """A key file (`--gcs-credentials-file`): gcd signs a JWT with its key, gets a token
    from its token_uri, and sends it as a bearer token on every call. A file that is
    missing or not a key: ConfigError naming it."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    seen: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/token":
            form = await request.post()
            assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
            return web.json_response({"access_token": "tok-1", "expires_in": 3600})
        seen.append((request.path, request.headers.get("Authorization", "")))
        return web.json_response({"items": []})

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    async with fake_gcs(handler) as url:
        key_file = tmp_path / "key.json"
        key_file.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": "p",
                    "private_key": pem,
                    "client_email": "sweeper@p.iam.gserviceaccount.com",
                    "token_uri": f"{url}/token",
                }
            )
        )
        async with GcsObjectStore.open(GcsSettings("bkt", url, str(key_file))) as store:
            await store.check_credentials()
            page = await store.list_page("r/")
    assert page.objects == ()
    assert seen == [("/storage/v1/b/bkt/o", "Bearer tok-1")]
    for bad in (tmp_path / "missing.json", tmp_path / "not-a-key.json"):
        if bad.name == "not-a-key.json":
            bad.write_text('{"type": "nonsense"}')
        with pytest.raises(ConfigError, match=f"cannot use the Google credentials file '{bad}'"):
            async with GcsObjectStore.open(GcsSettings("bkt", "http://127.0.0.1:1", str(bad))):
                pass


async def test_preflight_says_what_the_operator_must_fix(gcs_server: LocalGcs) -> None:
    """A missing bucket, a refused listing (403), an unreachable endpoint: one ConfigError
    each, naming the bucket and the fix."""
    with pytest.raises(ConfigError, match=r"GCS bucket 'no-such-bucket' .* does not exist"):
        await preflight_store(settings(gcs_server, "no-such-bucket"), ROOT)

    async def forbidden(request: web.Request) -> web.Response:
        error = {
            "code": 403,
            "message": "no storage.objects.list",
            "errors": [{"reason": "forbidden"}],
        }
        return web.json_response({"error": error}, status=403)

    async with fake_gcs(forbidden) as url:
        with pytest.raises(ConfigError, match=r"was refused \(forbidden\).*storage.objects.list"):
            await preflight_store(GcsSettings("bkt", url, anonymous=True), ROOT)
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match="cannot reach"):
        await preflight_store(GcsSettings("bkt", closed, anonymous=True), ROOT)


def test_settings_refuse_what_cannot_work() -> None:
    """A bad bucket name, gs:// in it, a URL without a scheme, anonymous with a key file."""
    for bad in ("ab", "Bucket", "gs://bkt", "-bkt", "bkt-", "b..kt", "bkt/x"):
        with pytest.raises(ConfigError, match="is not a GCS bucket name"):
            GcsSettings(bad)
    with pytest.raises(ConfigError, match="must start with https://"):
        GcsSettings("bkt", "storage.googleapis.com")
    with pytest.raises(ConfigError, match="--gcs-anonymous sends no credentials"):
        GcsSettings("bkt", credentials_file="key.json", anonymous=True)
    assert GcsSettings("my_bucket.example").api_root == "https://storage.googleapis.com"


# -- the emulator's deviations from GCS ----------------------------------------------------


async def test_emulator_deviations_are_pinned(gcs_server: LocalGcs, gcs_bucket: str) -> None:
    """The emulator ignores startOffset, maxResults and ifGenerationMatch=0 (GCS honours
    all three), and answers a single objects.delete 200 (GCS: 204). Pinned here, raw;
    and the store's listing is right anyway: a listing that starts after a key never
    returns a key at or before it (skip-ahead never relies on the server for that), and
    pages are cut to max_keys on the client."""
    keys = [f"p/{i}" for i in range(6)]
    gcs_server.seed(gcs_bucket, keys)
    base = f"{gcs_server.endpoint_url}/storage/v1/b/{gcs_bucket}/o"
    async with aiohttp.ClientSession() as http:
        async with http.get(
            base, params={"prefix": "p/", "startOffset": "p/3", "maxResults": "2"}
        ) as raw:
            names = [item["name"] for item in (await raw.json())["items"]]
        assert names == keys  # all six: before the offset too, and more than 2
        upload = f"{gcs_server.endpoint_url}/upload/storage/v1/b/{gcs_bucket}/o"
        params = {"uploadType": "media", "name": "p/0", "ifGenerationMatch": "0"}
        async with http.post(upload, params=params, data=b"again") as again:
            assert again.status == 200  # GCS: 412, the object exists
        async with http.delete(f"{base}/p%2F1") as single:
            assert single.status == 200  # GCS: 204 (gcd never sends a single delete)
    async with GcsObjectStore.open(settings(gcs_server, gcs_bucket)) as store:
        page = await store.list_page("p/", start_after="p/3", max_keys=1)
        assert [o.key for o in page.objects] == ["p/4"]
        rest = await store.list_page("p/", continuation_token=page.next_token, max_keys=10)
        assert [o.key for o in rest.objects] == ["p/5"]
        assert rest.next_token is None
        assert await store.get_object("p/0", max_bytes=10) == b"again"


async def test_unchanged_emulator_answers_batches_without_content_ids() -> None:
    """The emulator as released writes no Content-ID in batch answers (GCS does; the
    launcher `l0lab.testing.gcs_emulator` adds it): gcd then counts no object as deleted,
    however the answers line up, and reports each one by name."""
    with LocalGcs(content_ids=False) as plain:
        plain.create_bucket("plain")
        plain.seed("plain", ["a/1", "a/2"])
        async with GcsObjectStore.open(settings(plain, "plain")) as store:
            result = await store.delete_batch(["a/1", "a/2"])
        assert result.deleted == ()
        assert [(f.key, f.code) for f in result.errors] == [
            ("a/1", "UnmatchedAnswer"),
            ("a/2", "UnmatchedAnswer"),
        ]


async def test_an_endless_listing_does_not_loop_inside_one_list_page() -> None:
    """Issue 36, item 1: a server answering empty pages with the same nextPageToken made
    one `list_page` loop forever; now a repeated token is refused (ListingLoop), and a
    server inventing new empty pages gets at most `EMPTY_PAGES_PER_CALL` per call, the
    token handed to the sweeper (whose guard bounds the whole listing)."""
    from gcd.storage.gcs.client import EMPTY_PAGES_PER_CALL  # noqa: PLC0415

    tokens = iter(range(1_000_000))
    mode = {"same": True}
    requests: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        requests.append(request.query.get("pageToken"))
        token = "again" if mode["same"] else f"t{next(tokens)}"
        return web.json_response({"items": [], "nextPageToken": token})

    async with (
        fake_gcs(handler) as url,
        GcsObjectStore.open(GcsSettings("bkt", url, anonymous=True)) as store,
    ):
        with pytest.raises(StorageError, match="'again' again") as raised:
            await store.list_page("level_zero/data/")
        assert (raised.value.code, raised.value.retryable) == ("ListingLoop", False)
        assert len(requests) == 2
        mode["same"] = False
        requests.clear()
        page = await store.list_page("level_zero/data/")
    assert page.objects == ()
    assert page.next_token is not None
    assert len(requests) == EMPTY_PAGES_PER_CALL + 1
