"""Quiet DeleteObjects answers (failures only): nothing is counted deleted that was not.

The reading of a quiet answer is checked pure (`DeleteResult.from_quiet_answer`), then
on each real S3 server (moto ignores Quiet and answers verbosely; SeaweedFS honours it)
with a mixed batch holding a version under Object Lock, and against a loopback endpoint
whose quiet answer names a key that was not sent (the store must ask again verbosely).
"""

from __future__ import annotations

import datetime
import itertools
import random
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config

from gcd.rules.versions import version_target
from gcd.storage.objectstore import DeleteResult
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.storage.s3.wire import delete_body
from tests.conftest import S3Server

_names = itertools.count()
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def test_silence_is_deletion_and_each_error_fails_its_target() -> None:
    """A quiet answer's errors fail exactly the targets they name; the rest went."""
    sent = ["a", "b", version_target("c", "v1"), version_target("c", "v2"), "d"]
    answer = {
        "Errors": [
            {"Key": "b", "Code": "AccessDenied", "Message": "no"},
            {"Key": "c", "VersionId": "v2", "Code": "InternalError"},
        ]
    }
    result = DeleteResult.from_quiet_answer(answer, sent)
    assert result is not None
    assert result.deleted == ("a", version_target("c", "v1"), "d")
    assert {(f.key, f.code) for f in result.errors} == {
        ("b", "AccessDenied"),
        (version_target("c", "v2"), "InternalError"),
    }
    assert DeleteResult.from_quiet_answer({}, ["x", "y"]) == DeleteResult(("x", "y"))


def test_an_error_naming_only_a_key_fails_every_version_of_it_sent() -> None:
    """An error without a version id (moto's Object Lock answer) fails each version sent."""
    sent = [version_target("k", "v1"), version_target("k", "v2"), "other"]
    result = DeleteResult.from_quiet_answer(
        {"Errors": [{"Key": "k", "Code": "AccessDenied"}]}, sent
    )
    assert result is not None
    assert result.deleted == ("other",)
    assert sorted(f.key for f in result.errors) == sorted(sent[:2])


@pytest.mark.parametrize(
    "error",
    [
        {"Key": "a/b", "Code": "AccessDenied"},  # a key the store rewrote (a//b)
        {"Key": "a//b", "VersionId": "v9", "Code": "AccessDenied"},  # a version never sent
        {"Code": "InternalError"},  # no key at all
    ],
)
def test_an_error_naming_nothing_sent_makes_silence_unreadable(error: dict[str, str]) -> None:
    """Then the answer cannot say which target failed: None (ask again, verbose)."""
    assert DeleteResult.from_quiet_answer({"Errors": [error]}, ["a//b", "c"]) is None


def test_a_store_ignoring_quiet_is_read_verbosely() -> None:
    """An answer with any Deleted entry is verbose: a key it does not mention is not deleted."""
    answer = {"Deleted": [{"Key": "a"}], "Errors": []}
    result = DeleteResult.from_quiet_answer(answer, ["a", "b"])
    assert result == DeleteResult(("a",))


def test_the_body_says_quiet_only_when_asked() -> None:
    """`delete_body(quiet=True)` asks for failures only; the default stays verbose."""
    assert delete_body(["a"], quiet=True).endswith(b"<Quiet>true</Quiet></Delete>")
    assert delete_body(["a"]).endswith(b"<Quiet>false</Quiet></Delete>")
    versioned = delete_body([version_target("k&", "v<1")], quiet=True)
    assert b"<Key>k&amp;</Key><VersionId>v&lt;1</VersionId>" in versioned


def _client(endpoint: str) -> Any:
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


def _versions(client: Any, bucket: str) -> set[str]:
    page = client.list_object_versions(Bucket=bucket)
    return {version_target(v["Key"], v["VersionId"]) for v in page.get("Versions", [])}


@pytest.mark.integration
async def test_a_mixed_batch_under_object_lock_counts_only_what_went(s3_any: S3Server) -> None:
    """On each server, a batch of free versions and one locked version: the locked one
    is a failure (AccessDenied) and still stored, every other one is deleted and gone."""
    client = _client(s3_any.endpoint_url)
    bucket = f"l0gc-quiet-{next(_names)}-{random.randrange(10**6)}"
    client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    locked = client.put_object(
        Bucket=bucket,
        Key="p/locked",
        Body=b"l",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=until,
        ChecksumAlgorithm="CRC32",
    )
    locked_target = version_target("p/locked", locked["VersionId"])
    free = [
        version_target(
            f"p/free-{n}",
            client.put_object(Bucket=bucket, Key=f"p/free-{n}", Body=b"f")["VersionId"],
        )
        for n in range(5)
    ]
    raw = client.delete_objects(
        Bucket=bucket,
        Delete={"Quiet": True, "Objects": [{"Key": "p/absent", "VersionId": locked["VersionId"]}]},
    )
    honours_quiet = not raw.get("Deleted")  # SeaweedFS: True; moto: False (verbose)
    assert honours_quiet == (s3_any.__class__.__name__ == "LocalSeaweedFS")

    settings = S3Settings(bucket, s3_any.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        await store.detect()
        result = await store.delete_batch([free[0], locked_target, *free[1:]])
    assert sorted(result.deleted) == sorted(free)
    assert [(f.key, f.code) for f in result.errors] == [(locked_target, "AccessDenied")]
    assert _versions(client, bucket) == {locked_target}


@pytest.mark.integration
async def test_an_unversioned_batch_of_present_and_absent_keys_is_deleted(
    s3_any: S3Server, any_bucket: str
) -> None:
    """A quiet batch on an unversioned bucket: present and absent keys all count as
    deleted, and the bucket holds none of them afterwards."""
    present = [f"q/{n:03d}" for n in range(20)]
    s3_any.seed(any_bucket, present)
    settings = S3Settings(any_bucket, s3_any.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        assert (await store.detect()).versioning == "off"
        result = await store.delete_batch([*present, "q/absent"])
    assert sorted(result.deleted) == sorted([*present, "q/absent"])
    assert result.errors == ()
    assert s3_any.keys(any_bucket) == set()


def _result(*entries: str) -> bytes:
    return f'<DeleteResult xmlns="{_NS}">{"".join(entries)}</DeleteResult>'.encode()


async def test_an_unreadable_quiet_answer_is_asked_again_verbosely(scripted: Callable) -> None:
    """A quiet answer whose error names a key not sent (a//b read back as a/b): the batch
    is sent again verbose, its answer is what counts, and later batches stay verbose."""
    sent = [version_target("a//b", "v1"), version_target("c", "v2")]
    rewritten = "<Error><Key>a/b</Key><VersionId>v1</VersionId><Code>AccessDenied</Code></Error>"
    verbose = _result(
        "<Deleted><Key>c</Key><VersionId>v2</VersionId></Deleted>",
        "<Error><Key>a//b</Key><VersionId>v1</VersionId><Code>AccessDenied</Code></Error>",
    )
    endpoint, bodies = await scripted([_result(rewritten), verbose, verbose])
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        result = await store.delete_batch(sent)
        again = await store.delete_batch(sent)
    assert result == again
    assert result.deleted == (version_target("c", "v2"),)
    assert [(f.key, f.code) for f in result.errors] == [(sent[0], "AccessDenied")]
    assert [b"<Quiet>true</Quiet>" in body for body in bodies] == [True, False, False]
