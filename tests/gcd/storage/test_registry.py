"""`gcd.storage.registry`: one store type, `StoreSettings`, each kind with its own target, and
`open_store` / `preflight_store` on what it names (real moto and GCS emulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcd.storage.azure.settings import AzureSettings
from gcd.storage.backend import StoreSettings
from gcd.storage.gcs.client import GcsObjectStore
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.registry import (
    open_store,
    preflight_store,
    store_from_url,
)
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError
from l0lab.testing.local_azurite import LocalAzurite
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_servers import LocalS3, free_port

ROOT = "level_zero/data"
AZURE = AzureSettings("https://acct.blob.core.windows.net", "l0-container")
GCS = GcsSettings("l0-bucket", "http://127.0.0.1:9023", anonymous=True)
S3 = S3Settings("l0-bucket", "http://127.0.0.1:9000", "us-east-1")


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (S3, StorageTarget("l0-bucket", ROOT, "http://127.0.0.1:9000", kind="s3")),
        (
            AZURE,
            StorageTarget("l0-container", ROOT, "https://acct.blob.core.windows.net", kind="azure"),
        ),
        (GCS, StorageTarget("l0-bucket", ROOT, "http://127.0.0.1:9023", kind="gcs")),
    ],
    ids=["s3", "azure", "gcs"],
)
def test_each_store_names_its_own_target(settings: StoreSettings, expected: StorageTarget) -> None:
    """A store's target (what a binding and the journal record) is its own: Azure's names
    the container at its account URL, not a bucket borrowed from S3's settings."""
    assert settings.target(ROOT) == expected
    assert settings.kind == expected.kind


@pytest.mark.integration
async def test_open_store_opens_the_kind_it_is_given(
    s3_server: LocalS3, bucket: str, gcs_server: LocalGcs, gcs_bucket: str
) -> None:
    """S3 settings open an S3 store, GCS settings a GCS store; each lists its own keys."""
    s3_server.seed(bucket, [f"{ROOT}/001/000000000000000001/s3"])
    gcs_server.seed(gcs_bucket, [f"{ROOT}/001/000000000000000001/gcs"])
    s3 = S3Settings(bucket, s3_server.endpoint_url, "us-east-1")
    gcs = GcsSettings(gcs_bucket, gcs_server.endpoint_url, anonymous=True)
    async with open_store(s3) as s3_store, open_store(gcs) as gcs_store:
        assert isinstance(s3_store, S3ObjectStore)
        assert isinstance(gcs_store, GcsObjectStore)
        s3_page = await s3_store.list_page(ROOT + "/")
        gcs_page = await gcs_store.list_page(ROOT + "/")
    assert [o.key for o in s3_page.objects] == [f"{ROOT}/001/000000000000000001/s3"]
    assert [o.key for o in gcs_page.objects] == [f"{ROOT}/001/000000000000000001/gcs"]


@pytest.mark.integration
async def test_preflight_store_checks_the_kind_it_is_given(
    s3_server: LocalS3, bucket: str, gcs_server: LocalGcs, gcs_bucket: str, tmp_path: Path
) -> None:
    """The preflight of each kind: a bucket that exists passes; a missing one is a
    ConfigError naming it and the flag to check, in that store's words."""
    await preflight_store(S3Settings(bucket, s3_server.endpoint_url, "us-east-1"), ROOT)
    await preflight_store(GcsSettings(gcs_bucket, gcs_server.endpoint_url, anonymous=True), ROOT)
    with pytest.raises(ConfigError, match=r"GCS bucket 'no-such-l0' .* does not exist"):
        await preflight_store(
            GcsSettings("no-such-l0", gcs_server.endpoint_url, anonymous=True), ROOT
        )
    with pytest.raises(ConfigError, match="no-such-l0"):
        await preflight_store(S3Settings("no-such-l0", s3_server.endpoint_url, "us-east-1"), ROOT)
    nowhere = LocalAzurite(port=free_port())  # never started: nothing listens there
    conn = nowhere.write_connection_string(tmp_path / "conn")
    with pytest.raises(ConfigError, match=f"cannot reach {nowhere.account_url}"):
        await preflight_store(AzureSettings(nowhere.account_url, "l0-container", str(conn)), ROOT)


@pytest.mark.parametrize(
    ("url", "endpoint", "expected", "root"),
    [
        ("s3://l0-bucket/level_zero/data", None, S3Settings("l0-bucket"), ROOT),
        (
            "s3://l0-bucket",
            "http://127.0.0.1:9000",
            S3Settings("l0-bucket", "http://127.0.0.1:9000"),
            "",
        ),
        ("az://acct/l0-container/level_zero/data/", None, AZURE, ROOT),
        (
            "az://devstoreaccount1/l0-container/r",
            "http://127.0.0.1:10000/devstoreaccount1",
            AzureSettings("http://127.0.0.1:10000/devstoreaccount1", "l0-container"),
            "r",
        ),
        ("gs://l0-bucket/level_zero/data", None, GcsSettings("l0-bucket"), ROOT),
    ],
    ids=["s3", "s3-endpoint-no-root", "azure", "azurite", "gcs"],
)
def test_a_store_url_names_the_store_and_its_root(
    url: str, endpoint: str | None, expected: StoreSettings, root: str
) -> None:
    """``s3://``, ``az://ACCOUNT/CONTAINER`` and ``gs://`` name what the flags name."""
    assert store_from_url(url, endpoint_url=endpoint) == (expected, root)


@pytest.mark.parametrize(
    "url", ["l0-bucket/root", "s3:/l0-bucket", "s3:///root", "az://acct", "ftp://x/y"]
)
def test_a_store_url_that_names_no_store_is_refused_with_the_forms(url: str) -> None:
    """A URL of no known scheme, or one missing its bucket or container, is a ConfigError
    that names the value."""
    with pytest.raises(ConfigError) as refused:
        store_from_url(url)
    assert repr(url) in str(refused.value)


def test_store_flag_and_the_flags_it_replaces_are_not_mixed() -> None:
    """`--store` with --bucket (or --storage azure) is refused naming both; alone, its root
    becomes the command's root and the credential flags of its kind still apply."""
    import argparse  # noqa: PLC0415

    from gcd.cli.storage import store_settings  # noqa: PLC0415

    def args(**given: object) -> argparse.Namespace:
        base = {"store": None, "bucket": None, "container": None, "account_url": None}
        return argparse.Namespace(**{**base, "storage": "s3", "root": "x", **given})

    with pytest.raises(ConfigError, match="--bucket"):
        store_settings(args(store="s3://b1/r", bucket="b2"))
    with pytest.raises(ConfigError, match="--storage azure"):
        store_settings(args(store="s3://b1/r", storage="azure"))
    named = args(store="gs://l0-bucket/level_zero/data", gcs_anonymous=True)
    assert store_settings(named) == GcsSettings("l0-bucket", anonymous=True)
    assert named.root == ROOT
