"""The lean path (`gcd.storage.s3.lean`) on real S3 servers: armed after botocore's first
listing, the same keys and results as botocore's path, and botocore again when a lean
request is refused.

Servers: the lean in-memory server, moto, and SeaweedFS given one identity, which
verifies every request's SigV4 signature (so the lean signer is proven on the wire).
Each store under test is compared with a store of the same bucket that never arms
(`S3ObjectStore.open(..., lean=False)`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gcd.storage.objectstore import ObjectInfo
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.lean import SigV4Signer
from gcd.storage.s3.settings import S3Settings
from l0gc.errors import StorageError
from l0lab.testing.lean_s3 import LeanS3
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalS3
from tests.conftest import started

pytestmark = pytest.mark.integration


def _not_armed(store: S3ObjectStore) -> bool:
    """Whether botocore sends every request (a call, which mypy does not narrow)."""
    return not store.lean_armed


IDENTITY = ("l0gc-lean", "lean-secret-1")
_names = itertools.count()
HOSTILE = [
    f"hostile/{name}"
    for name in (
        "a b",
        "a+b",
        "100%",
        "100%25",
        "tilde~star*",
        "é/日本/😀",
        "k=v&x=y",
        "semi;colon,comma:colon'quote",
        "x<y>z&amp;",
        "plain",
        "dot.name..",
        "q?uestion#hash",
    )
]


@dataclass
class Server:
    """One server as these tests use it."""

    name: str
    endpoint_url: str
    backend: Any

    def seed(self, bucket: str, keys: list[str]) -> None:
        if isinstance(self.backend, LeanS3):
            self.backend.load(bucket, keys)
        else:
            self.backend.seed(bucket, keys)

    def keys(self, bucket: str) -> set[str]:
        return set(self.backend.keys(bucket))


@pytest.fixture(scope="module")
def lean_server() -> Iterator[LeanS3]:
    """The lean in-memory server (no signature checked)."""
    with LeanS3() as server:
        yield server


@pytest.fixture(scope="module")
def signed_seaweedfs() -> Iterator[LocalSeaweedFS]:
    """SeaweedFS accepting only `IDENTITY`, every signature verified."""
    server = started(lambda: LocalSeaweedFS(identity=IDENTITY))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["lean", "moto", "seaweedfs-signed"])
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Server:
    """Each server in turn; the environment's credentials are those it accepts."""
    if request.param == "lean":
        lean: LeanS3 = request.getfixturevalue("lean_server")
        return Server("lean", lean.endpoint_url, lean)
    if request.param == "moto":
        moto: LocalS3 = request.getfixturevalue("s3_server")
        return Server("moto", moto.endpoint_url, moto)
    weed: LocalSeaweedFS = request.getfixturevalue("signed_seaweedfs")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", IDENTITY[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", IDENTITY[1])
    return Server("seaweedfs-signed", weed.endpoint_url, weed)


def _bucket(server: Server) -> str:
    name = f"l0gc-lean-{next(_names)}"
    if isinstance(server.backend, LeanS3):
        server.backend.load(name, [])
    else:
        server.backend.create_bucket(name)
    return name


def _botocore_sends(store: S3ObjectStore) -> list[str]:
    """The operations botocore sends for `store` from now on (its before-send event)."""
    sent: list[str] = []

    def note(event_name: str, **_: Any) -> None:
        sent.append(event_name.rsplit(".", 1)[-1])

    store._client.meta.events.register("before-send.s3.*", note)
    return sent


async def _list_all(
    store: S3ObjectStore, prefix: str, start_after: str | None = None
) -> list[ObjectInfo]:
    """Every page of `prefix` (3 keys a page: continuation tokens used)."""
    found: list[ObjectInfo] = []
    page = await store.list_page(prefix, start_after=start_after, max_keys=3)
    found += page.objects
    while page.next_token is not None:
        page = await store.list_page(prefix, continuation_token=page.next_token, max_keys=3)
        found += page.objects
    return found


async def test_armed_after_the_first_listing_then_botocore_sends_nothing(server: Server) -> None:
    """The first listing goes through botocore and arms the lean path; from then on
    ListObjectsV2 and DeleteObjects are not sent by botocore, and work."""
    bucket = _bucket(server)
    server.seed(bucket, ["p/a", "p/b", "p/c"])
    settings = S3Settings(bucket, server.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        sent = _botocore_sends(store)
        assert _not_armed(store)
        first = await store.list_page("p/")
        assert store.lean_armed
        assert sent == ["ListObjectsV2"]
        again = await store.list_page("p/")
        result = await store.delete_batch(["p/a", "p/b"])
        assert sent == ["ListObjectsV2"]  # nothing more through botocore
        assert store.lean_armed
    assert [o.key for o in again.objects] == [o.key for o in first.objects]
    assert (again.request_id is None) == (first.request_id is None)  # botocore's header
    assert set(result.deleted) == {"p/a", "p/b"}
    assert server.keys(bucket) == {"p/c"}


async def test_hostile_keys_list_and_delete_as_through_botocore(server: Server) -> None:
    """Keys with spaces, '+', '%', unicode, '=', '&', '<' list page by page (prefixes and
    StartAfter of the same) and delete, verbose then quiet, exactly as botocore's path
    lists and deletes them."""
    buckets = [_bucket(server), _bucket(server)]
    keys = [*HOSTILE, "other/x"]
    for bucket in buckets:
        server.seed(bucket, keys)
    lean_settings = S3Settings(buckets[0], server.endpoint_url, "us-east-1")
    plain_settings = S3Settings(buckets[1], server.endpoint_url, "us-east-1")
    async with (
        S3ObjectStore.open(lean_settings) as lean,
        S3ObjectStore.open(lean_settings, lean=False) as same,  # the same bucket
        S3ObjectStore.open(plain_settings, lean=False) as plain,  # its twin, to delete
    ):
        await lean.list_page("hostile/", max_keys=1)
        assert lean.lean_armed
        for prefix, start in [
            ("hostile/", None),
            ("", None),
            ("hostile/a ", None),
            ("hostile/100%", None),
            ("hostile/é", None),
            ("hostile/k=v&", None),
            ("hostile/tilde~star*", None),
            ("hostile/q?uestion#", None),
            ("hostile/semi;colon,comma:colon'", None),
            ("hostile/", "hostile/k=v&x=y"),
            ("hostile/", "hostile/a+b"),
        ]:
            assert await _list_all(lean, prefix, start) == await _list_all(same, prefix, start)
        verbose = HOSTILE[::2]
        lean_verbose = await lean.delete_batch(verbose)
        assert lean_verbose == await plain.delete_batch(verbose)
        await lean.detect()
        await plain.detect()
        quiet = HOSTILE[1::2]
        lean_quiet = await lean.delete_batch(quiet)
        assert lean_quiet == await plain.delete_batch(quiet)
        assert lean.lean_armed
    assert set(lean_verbose.deleted) == set(verbose)
    assert set(lean_quiet.deleted) == set(quiet)
    assert not lean_verbose.errors
    assert not lean_quiet.errors
    assert server.keys(buckets[0]) == server.keys(buckets[1]) == {"other/x"}


@pytest.fixture
def weed(signed_seaweedfs: LocalSeaweedFS, monkeypatch: pytest.MonkeyPatch) -> LocalSeaweedFS:
    """The signed SeaweedFS, with its identity in the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", IDENTITY[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", IDENTITY[1])
    return signed_seaweedfs


async def test_a_signer_bug_disarms_and_botocore_does_the_call(
    weed: LocalSeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the server refuses the lean signature (a signer bug, here a wrong signing
    key), the same call is made through botocore and succeeds, the lean path is off for
    the store's life, and that is logged once."""
    bucket = f"l0gc-lean-{next(_names)}"
    weed.seed(bucket, ["k/a", "k/b", "k/c"])
    async with S3ObjectStore.open(S3Settings(bucket, weed.endpoint_url, "us-east-1")) as store:
        await store.list_page("k/")
        assert store.lean_armed
        monkeypatch.setattr(SigV4Signer, "signing_key", lambda *_: b"\x00" * 32)
        sent = _botocore_sends(store)
        with capture_logs() as logs:
            page = await store.list_page("k/")
            result = await store.delete_batch(["k/a"])
            again = await store.list_page("k/")
    assert [o.key for o in page.objects] == ["k/a", "k/b", "k/c"]
    assert result.deleted == ("k/a",)
    assert [o.key for o in again.objects] == ["k/b", "k/c"]
    assert _not_armed(store)
    assert sent == ["ListObjectsV2", "DeleteObjects", "ListObjectsV2"]
    disarmed = [log for log in logs if log["event"] == "s3.lean_disarmed"]
    assert len(disarmed) == 1
    assert disarmed[0]["code"] == "SignatureDoesNotMatch"
    assert disarmed[0]["log_level"] == "warning"
    assert "botocore" in disarmed[0]["fallback"]


def _credential_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str) -> Path:
    """A profile whose credentials come from `credential_process` (`cat` of a file, a
    refreshable source like a role's: they expire in 5 minutes, so botocore refreshes
    them on every use); returns the file to rotate them."""
    source = tmp_path / "credentials.json"
    _rotate(source, secret)
    config = tmp_path / "config"
    config.write_text(f"[profile lean]\ncredential_process = cat {source}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_PROFILE", "lean")
    return source


def _rotate(source: Path, secret: str) -> None:
    expires = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    answer = {
        "Version": 1,
        "AccessKeyId": IDENTITY[0],
        "SecretAccessKey": secret,
        "SessionToken": "",
        "Expiration": expires,
    }
    source.write_text(json.dumps(answer))


async def test_rotated_credentials_are_read_per_request_and_fail_as_botocore_does(
    signed_seaweedfs: LocalSeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials from a refreshable source are read for each lean request: rotated to a
    secret the server refuses, the lean request is refused, the path disarms, and the call
    through botocore fails with botocore's own error; rotated back, botocore carries on."""
    bucket = f"l0gc-lean-{next(_names)}"
    signed_seaweedfs.seed(bucket, ["r/a", "r/b"])
    source = _credential_process(tmp_path, monkeypatch, IDENTITY[1])
    settings = S3Settings(bucket, signed_seaweedfs.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        await store.list_page("r/")
        assert store.lean_armed
        await store.list_page("r/")  # a lean request signed with the file's secret
        _rotate(source, "rotated-wrong")
        with pytest.raises(StorageError) as lean_error:
            await store.list_page("r/")
        assert _not_armed(store)
        async with S3ObjectStore.open(settings, lean=False) as plain:
            with pytest.raises(StorageError) as plain_error:
                await plain.list_page("r/")
        _rotate(source, IDENTITY[1])
        page = await store.list_page("r/")
    assert lean_error.value.code == plain_error.value.code == "SignatureDoesNotMatch"
    assert lean_error.value.retryable is plain_error.value.retryable is False
    assert [o.key for o in page.objects] == ["r/a", "r/b"]
