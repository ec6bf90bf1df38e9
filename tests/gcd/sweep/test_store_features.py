"""Stores that differ, without a server: DeleteObjects answers naming versions, keys an
answer omits, prefixes for unordered listings, directory buckets, Content-MD5."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
from collections.abc import Sequence

from gcd.observe.metrics import SweeperMetrics
from gcd.observe.report import RoundCounts
from gcd.rules.backoff import Backoff
from gcd.rules.candidate import Candidate
from gcd.rules.cursor import directory_prefixes
from gcd.rules.layout import KeyLayout
from gcd.rules.versions import split_target, version_target
from gcd.storage.objectstore import DeleteResult
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore, content_md5, directory_bucket
from gcd.sweep.deleter import BatchDeleter
from gcd.sweep.sweeper import RoundConfig
from l0lab.testing.memory import MemoryObjectStore

LAYOUT = KeyLayout.default("l0")


def test_targets_split_back_into_key_and_version() -> None:
    assert split_target(version_target("a/b", "v1")) == ("a/b", "v1")
    assert split_target(version_target("a/b", None)) == ("a/b", None)


def test_a_failure_naming_only_the_key_fails_each_version_sent_not_deleted() -> None:
    """moto names a refused version by its key alone: each version of that key the answer
    does not list as deleted is failed, none is taken for deleted."""
    sent = [version_target("k", "1"), version_target("k", "2"), version_target("j", "3")]
    answer = {
        "Deleted": [{"Key": "k", "VersionId": "1"}],
        "Errors": [{"Key": "k", "Code": "AccessDenied", "Message": "locked"}],
    }
    result = DeleteResult.from_answer(answer, sent)
    assert result.deleted == (version_target("k", "1"),)
    assert [(f.key, f.code) for f in result.errors] == [(version_target("k", "2"), "AccessDenied")]


def test_a_delete_marker_named_by_its_marker_version_id_is_deleted() -> None:
    """SeaweedFS names a delete marker deleted by version id with DeleteMarkerVersionId
    alone; a delete without a version id names the marker it created, which was not sent."""
    sent = [version_target("k", "m1"), "j"]
    answer = {
        "Deleted": [
            {"Key": "k", "DeleteMarker": True, "DeleteMarkerVersionId": "m1"},
            {"Key": "j", "DeleteMarker": True, "DeleteMarkerVersionId": "new"},
        ]
    }
    assert DeleteResult.from_answer(answer, sent).deleted == (version_target("k", "m1"), "j")


class OmittingStore(MemoryObjectStore):
    """A store whose DeleteObjects answer leaves some keys out (deleted or not)."""

    def __init__(self, omitted: set[str]) -> None:
        super().__init__()
        self.omitted = omitted

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        kept = [k for k in keys if k not in self.omitted]
        result = await super().delete_batch(kept) if kept else DeleteResult(())
        return DeleteResult(
            tuple(k for k in result.deleted if k not in self.omitted), result.errors
        )


async def _no_sleep(_seconds: float) -> None:
    return None


async def test_keys_an_answer_omits_are_never_counted_deleted() -> None:
    """A key the DeleteObjects answer does not mention is sent again, and counted as an
    error once retries are spent: never as deleted."""
    keys = [f"l0/000/{n:018d}/x" for n in range(10)]
    omitted = set(keys[3:5])
    store = OmittingStore(omitted)
    for key in keys:
        store.put(key, size=7)
    retrier = Retrier(Backoff(base_s=0.01, cap_s=0.1, max_attempts=3), _no_sleep, random.Random(1))
    deleter = BatchDeleter(
        store, concurrency=2, retrier=retrier, metrics=SweeperMetrics(), stop=asyncio.Event()
    )
    counts = RoundCounts()
    await deleter.delete([Candidate(key, 7, 1) for key in keys], counts)
    assert counts.deleted == len(keys) - len(omitted)
    assert counts.deleted_bytes == 7 * (len(keys) - len(omitted))
    assert counts.errors == len(omitted)
    assert store.keys() == omitted


def test_unordered_prefixes_end_in_a_slash_and_cover_the_shard() -> None:
    root = LAYOUT.listing_root
    assert directory_prefixes([root], root) == [root]
    assert directory_prefixes([root + "41"], root) == [f"{root}41{n}/" for n in range(10)]
    for index in range(3):
        config = RoundConfig(layout=LAYOUT, shard_index=index, shard_count=3, list_concurrency=8)
        unordered = config.prefixes(unordered=True)
        assert all(prefix.endswith("/") for prefix in unordered)
        covered = set(unordered)
        directories = {f"{root}{n:03d}/" for n in range(1000)}
        assert {d for d in directories if any(d.startswith(p) for p in config.prefixes())} == (
            {d for d in directories if any(d.startswith(p) for p in covered)}
        )


async def test_a_directory_bucket_lists_unordered_and_is_never_asked_for_versioning() -> None:
    """S3 Express directory buckets (names ending --x-s3) are detected by name: no
    request is sent (the client is never used), listing is unordered."""
    assert directory_bucket("logs--usw2-az1--x-s3")
    assert not directory_bucket("logs-x-s3")
    store = S3ObjectStore(client=None, bucket="logs--usw2-az1--x-s3")
    features = await store.detect()
    assert features.ordered_listing is False
    assert features.versioning == "off"
    assert features.object_lock is False
    assert features.to_dict()["listing"] == "unordered"


def test_deleteobjects_carries_content_md5_instead_of_a_crc32() -> None:
    body = b"<Delete><Object><Key>a</Key></Object></Delete>"
    params = {
        "body": body,
        "headers": {},
        "context": {
            "checksum": {
                "request_algorithm": {"algorithm": "crc32"},
                "request_algorithm_header": {"name": "x"},
            }
        },
    }
    content_md5(params)
    expected = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
    assert params["headers"] == {"Content-MD5": expected}
    assert params["context"] == {"checksum": {}}
