"""Stores that differ (docs/stores.md), on real servers and through the fault proxy.

Versioned buckets on moto and SeaweedFS, Object Lock on moto; a MinIO-era store that
refuses DeleteObjects without Content-MD5, a store without batch deletes (GCS's XML API)
and a store listing out of order without StartAfter (S3 Express) played by
`l0lab.testing.faultproxy` in front of them.
"""

from __future__ import annotations

import itertools
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from structlog.testing import capture_logs

from gcd.observe.report import RoundSummary
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.rules.versions import VersionMode
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0lab.testing.faultproxy import FaultConfig, FaultProxy
from l0lab.testing.local_servers import LocalS3
from tests.conftest import S3Server

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
SAFE = 5
_names = itertools.count()

Version = tuple[str, str, bool]
"""(key, version id, is a delete marker)."""


def client_for(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def new_bucket(client: Any, *, versioning: bool = True, lock: bool = False) -> str:
    name = f"l0gc-stores-{next(_names)}-{random.randrange(10**6)}"
    if lock:
        client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    else:
        client.create_bucket(Bucket=name)
    if versioning and not lock:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def versions(client: Any, bucket: str) -> set[Version]:
    found: set[Version] = set()
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found |= {(v["Key"], v["VersionId"], False) for v in page.get("Versions", [])}
        found |= {(m["Key"], m["VersionId"], True) for m in page.get("DeleteMarkers", [])}
    return found


def seed_versions(client: Any, bucket: str, *, markers: bool = True) -> tuple[set[str], set[str]]:
    """Eligible and live keys, each with two versions; with `markers`, every third one
    also deleted (a delete marker on top). Returns (eligible keys, live keys)."""
    eligible: set[str] = set()
    live: set[str] = set()
    for n, (prefix, epoch) in enumerate(itertools.product((1, 2, 417), range(1, 9))):
        key = LAYOUT.format(prefix, epoch, f"seg{n}.log")
        (eligible if epoch <= SAFE else live).add(key)
        client.put_object(Bucket=bucket, Key=key, Body=b"first version")
        client.put_object(Bucket=bucket, Key=key, Body=b"second, larger version")
        if markers and n % 3 == 0:
            client.delete_object(Bucket=bucket, Key=key)
    return eligible, live


def fast_retrier() -> Retrier:
    return Retrier(Backoff(base_s=0.01, cap_s=0.1, max_attempts=4), rng=random.Random(0))


async def sweep(endpoint: str, bucket: str, **config: Any) -> tuple[Sweeper, RoundSummary]:
    """One round at M = SAFE, two hours after now (every object is past the grace)."""
    options: dict[str, Any] = {"layout": LAYOUT, "grace_s": 60.0}
    options.update(config)
    async with S3ObjectStore.open(S3Settings(bucket, endpoint, "us-east-1")) as store:
        sweeper = Sweeper(
            store, RoundConfig(**options), retrier=fast_retrier(), clock=lambda: time.time() + 7200
        )
        result = await run_round(sweeper, SafetyGate(), None, override=SAFE)
    return sweeper, result.summary


def metric(sweeper: Sweeper, name: str) -> float:
    value = sweeper.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


def version_pages(server: S3Server) -> int:
    """The page size for versioned sweeps on `server`. moto (5.x) drops the first entry
    after a KeyMarker sent without a VersionIdMarker (AWS and SeaweedFS start right after
    the marker), which is how a skip-ahead goes on: on moto one page holds each listing
    prefix, on SeaweedFS pages of 5 make every skip and page break happen."""
    return 1000 if isinstance(server, LocalS3) else 5


@pytest.fixture
def versioned(s3_any: S3Server) -> tuple[str, Any, str, int]:
    """(endpoint, client, bucket, page size) of a fresh versioned bucket on each server."""
    client = client_for(s3_any.endpoint_url)
    return s3_any.endpoint_url, client, new_bucket(client), version_pages(s3_any)


async def test_a_versioned_bucket_loses_every_version_of_eligible_keys_only(
    versioned: tuple[str, Any, str, int],
) -> None:
    """Every version and delete marker of an eligible key goes (bytes freed); every
    version of a live key stays, the non-current ones and delete markers included."""
    endpoint, client, bucket, page_size = versioned
    eligible, live = seed_versions(client, bucket)
    before = versions(client, bucket)
    with capture_logs() as logs:
        sweeper, summary = await sweep(endpoint, bucket, page_size=page_size)
    assert [e for e in logs if e["event"] == "sweep.delete_retry"] == []  # every entry answered
    after = versions(client, bucket)
    assert {v for v in after if v[0] in eligible} == set()
    assert {v for v in before if v[0] in live} == after
    gone = before - after
    markers = sum(1 for v in gone if v[2])
    assert summary.deleted == len(gone) == summary.deleted_versions + summary.deleted_markers
    assert summary.deleted_markers == markers > 0
    assert summary.errors == 0
    assert summary.store is not None
    assert summary.store["versioning"] == "Enabled"
    assert summary.store["versions"] == "reclaim"
    assert metric(sweeper, "l0gc_sweeper_deleted_markers_total") == markers
    assert metric(sweeper, "l0gc_sweeper_deleted_versions_total") == len(gone) - markers


async def test_markers_only_keeps_the_old_behaviour(s3_server: S3Server) -> None:
    """--versions markers-only: each current eligible key gets a delete marker, and
    every version stays (bytes still billed), as before issue 28."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client)
    eligible, _ = seed_versions(client, bucket)
    before = versions(client, bucket)
    current = {key for key, _, marker in before if key in eligible} - {
        key for key, _, marker in before if marker
    }  # eligible keys without a delete marker on top
    _, summary = await sweep(s3_server.endpoint_url, bucket, versions=VersionMode.MARKERS_ONLY)
    after = versions(client, bucket)
    assert before <= after
    assert {key for key, _, marker in after - before if marker} == current
    assert summary.deleted == len(current)
    assert summary.deleted_versions == summary.deleted_markers == 0
    assert summary.store is not None
    assert summary.store["versions"] == "markers-only"


async def test_object_lock_keeps_locked_versions_and_reports_them_once(
    s3_server: S3Server,
) -> None:
    """Retained and legal-hold versions are kept, counted by reason with the earliest
    retain-until, sent once (no retry, no bypass); the round deletes the rest, ok."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client, lock=True)
    until = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    _eligible, live = seed_versions(client, bucket)
    retained = LAYOUT.format(2, 3, "retained.log")
    held = LAYOUT.format(417, 1, "held.log")
    client.put_object(
        Bucket=bucket,
        Key=retained,
        Body=b"r",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=until,
        ChecksumAlgorithm="CRC32",
    )
    client.put_object(
        Bucket=bucket,
        Key=held,
        Body=b"h",
        ObjectLockLegalHoldStatus="ON",
        ChecksumAlgorithm="CRC32",
    )
    before = versions(client, bucket)
    async with FaultProxy(s3_server.endpoint_url) as proxy:
        with capture_logs() as logs:
            sweeper, summary = await sweep(proxy.endpoint_url, bucket)
        delete_requests = proxy.requests["delete"] - proxy.server_errors["delete"]
        # moto answers a ListObjectVersions racing a delete with a 500 now and then
        server_failures = proxy.server_errors.total()
    after = versions(client, bucket)
    assert {(key, marker) for key, _, marker in after} == {(retained, False), (held, False)} | {
        (key, marker) for key, _, marker in before if key in live
    }
    assert summary.locked == 2
    assert summary.locked_reasons == {"retention GOVERNANCE": 1, "legal hold": 1}
    assert summary.locked_earliest_retain_until == until.isoformat().replace("+00:00", "Z")
    assert summary.errors == 0
    assert summary.outcome == "ok"
    # Locked versions were never sent again: no retry but of the server's own failures;
    # one request per batch cut (a listing range that ends sends its partial batch at
    # once: issue 36).
    assert sweeper.retrier.retries == server_failures
    assert delete_requests <= 2
    assert metric(sweeper, "l0gc_sweeper_locked_versions_total") == 2
    reports = [e for e in logs if e["event"] == "sweep.locked_versions"]
    assert len(reports) == 1
    assert reports[0]["bypassed"] is False
    assert summary.store is not None
    assert summary.store["object_lock"] is True


def test_the_proxy_refuses_deleteobjects_without_content_md5_as_minio_did(
    s3_server: S3Server,
) -> None:
    """The stand-in is faithful: botocore's default (a CRC32, no Content-MD5) is refused
    with MissingContentMD5, so the next test proves something."""
    import asyncio  # noqa: PLC0415

    async def check() -> None:
        async with FaultProxy(
            s3_server.endpoint_url, FaultConfig(require_content_md5=True)
        ) as proxy:
            default = boto3.client("s3", endpoint_url=proxy.endpoint_url, region_name="us-east-1")
            bucket = new_bucket(client_for(s3_server.endpoint_url), versioning=False)
            with pytest.raises(default.exceptions.ClientError, match="MissingContentMD5"):
                await asyncio.to_thread(
                    default.delete_objects, Bucket=bucket, Delete={"Objects": [{"Key": "a"}]}
                )

    asyncio.run(check())


async def test_a_store_requiring_content_md5_is_collected(s3_any: S3Server) -> None:
    """DeleteObjects carries Content-MD5, the digest of the body sent (the lean body of
    `gcd.storage.s3.wire`, not botocore's): a MinIO-era endpoint deletes (moto, SeaweedFS)."""
    client = client_for(s3_any.endpoint_url)
    bucket = new_bucket(client, versioning=False)
    eligible, live = seed_versions(client, bucket, markers=False)
    async with FaultProxy(s3_any.endpoint_url, FaultConfig(require_content_md5=True)) as proxy:
        _, summary = await sweep(proxy.endpoint_url, bucket)
        refused = proxy.faults["MissingContentMD5"] + proxy.faults["BadDigest"]
    current = {key for key, _, _ in versions(client, bucket)}
    assert refused == 0
    assert not current & eligible
    assert summary.errors == 0
    assert summary.deleted > 0
    assert summary.store is not None
    assert summary.store["versioning"] == "off"
    assert current == live


async def test_no_batch_delete_falls_back_to_single_deletes_once(s3_server: S3Server) -> None:
    """DeleteObjects answers NotImplemented (GCS XML): one log line, then one DeleteObject
    per key; every eligible key goes, every live key stays."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client, versioning=False)
    eligible, live = seed_versions(client, bucket, markers=False)
    async with FaultProxy(s3_server.endpoint_url, FaultConfig(batch_delete=False)) as proxy:
        with capture_logs() as logs:
            _, summary = await sweep(proxy.endpoint_url, bucket, batch_size=4, concurrency=2)
        refused = proxy.faults["NotImplemented"]
        deletes = proxy.requests["delete"]
    left = {key for key, _, _ in versions(client, bucket)}
    assert not left & eligible
    assert summary.errors == 0
    assert 1 <= refused <= 2  # learnt once (by the requests in flight), never asked again
    assert [e["event"] for e in logs].count("s3.batch_delete_unsupported") == 1
    assert deletes == refused + summary.deleted
    assert summary.store is not None
    assert summary.store["batch_delete"] is False
    assert left == live


async def test_an_unordered_listing_without_startafter_is_collected_safely(
    s3_server: S3Server,
) -> None:
    """Pages with shuffled keys and StartAfter refused (S3 Express): with --listing
    unordered nothing live is deleted and no garbage is left; ordered, skip-ahead would
    ask for StartAfter, which such a store refuses (the round reports errors)."""
    client = client_for(s3_server.endpoint_url)
    bucket = new_bucket(client, versioning=False)
    eligible, live = seed_versions(client, bucket, markers=False)
    shuffled = FaultConfig(unordered_listing=True, seed=7)
    async with FaultProxy(s3_server.endpoint_url, shuffled) as proxy:
        _, ordered = await sweep(proxy.endpoint_url, bucket, page_size=4, dry_run=True)
        refused_ordered = proxy.faults["InvalidArgument"]
        proxy.faults.clear()
        _, summary = await sweep(
            proxy.endpoint_url, bucket, page_size=4, list_concurrency=3, unordered_listing=True
        )
        refused = proxy.faults["InvalidArgument"]
    left = {key for key, _, _ in versions(client, bucket)}
    assert refused_ordered > 0
    assert ordered.errors > 0
    assert refused == 0
    assert left == live
    assert summary.errors == 0
    assert summary.deleted == len(eligible)
    assert summary.store is not None
    assert summary.store["listing"] == "unordered"
