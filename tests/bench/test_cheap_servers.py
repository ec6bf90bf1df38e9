"""Smoke of the client-bound benchmark harness (issue 56): the lean S3 server lists and
deletes like S3, rclone is seeded through its control API, and `bench.paired` and
`bench.profile_sweep` run end to end at toy size on the lean server.

Nothing here checks a timing.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.common import REPO, child_env
from l0lab.testing.lean_s3 import LeanS3
from l0lab.testing.local_rclone import LocalRclone, write_tree

pytestmark = [pytest.mark.deep, pytest.mark.integration]


def test_the_lean_server_lists_in_byte_order_past_deleted_keys() -> None:
    """ListObjectsV2 goes on after a StartAfter or continuation whose key is gone (what
    rclone does not do), with delimiters, url encoding and If-None-Match."""
    old = datetime.now(UTC) - timedelta(hours=2)
    with LeanS3() as server:
        keys = [f"r/{p:03d}/{e:018d}/g" for p in range(3) for e in range(1, 6)] + ["r/a+b c"]
        server.load("b", keys, old)
        client = server.client()
        first = client.list_objects_v2(Bucket="b", Prefix="r/", MaxKeys=4)
        assert [o["Key"] for o in first["Contents"]] == sorted(keys)[:4]
        assert first["IsTruncated"]
        assert first["Contents"][0]["LastModified"] < datetime.now(UTC) - timedelta(hours=1)
        client.delete_objects(
            Bucket="b", Delete={"Objects": [{"Key": k} for k in sorted(keys)[:4]], "Quiet": True}
        )
        rest = client.list_objects_v2(
            Bucket="b", Prefix="r/", ContinuationToken=first["NextContinuationToken"]
        )
        assert [o["Key"] for o in rest["Contents"]] == sorted(keys)[4:]
        after = client.list_objects_v2(Bucket="b", Prefix="r/", StartAfter=sorted(keys)[2])
        assert [o["Key"] for o in after["Contents"]] == sorted(keys)[4:]
        tops = client.list_objects_v2(Bucket="b", Prefix="r/", Delimiter="/")
        assert [p["Prefix"] for p in tops["CommonPrefixes"]] == ["r/000/", "r/001/", "r/002/"]
        assert [o["Key"] for o in tops["Contents"]] == ["r/a+b c"]
        answer = client.delete_objects(Bucket="b", Delete={"Objects": [{"Key": "r/a+b c"}]})
        assert [d["Key"] for d in answer["Deleted"]] == ["r/a+b c"]
        client.put_object(Bucket="b", Key="claim", Body=b"{}", IfNoneMatch="*")
        with pytest.raises(client.exceptions.ClientError, match="PreconditionFailed"):
            client.put_object(Bucket="b", Key="claim", Body=b"{}", IfNoneMatch="*")
        assert client.get_object(Bucket="b", Key="claim")["Body"].read() == b"{}"
        assert server.count("b") == len(keys) - 5 + 1


def test_rclone_is_seeded_through_its_control_api(tmp_path: Path) -> None:
    """`LocalRclone.load` fills a bucket from a local tree (mtime kept), hold files hidden."""
    old = datetime.now(UTC) - timedelta(hours=2)
    keys = [f"r/{p:03d}/{e:018d}/g" for p in range(2) for e in range(1, 4)]
    with LocalRclone() as server:
        server.load("b", write_tree(tmp_path, keys, last_modified=old, hold_dirs=True))
        listed = server.client().list_objects_v2(Bucket="b")["Contents"]
        assert [o["Key"] for o in listed] == keys
        assert all(o["LastModified"] < datetime.now(UTC) - timedelta(hours=1) for o in listed)
        server.delete_bucket_contents("b")
        assert server.keys("b") == set()


def test_paired_and_the_profile_run_on_the_lean_server() -> None:
    """`bench.paired` (gcd with and without the journal, obstore, s5cmd, start-up) and
    `bench.profile_sweep` at toy size: every side deletes every key, the tables print."""
    paired = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.paired",
            "run",
            "--server",
            "lean",
            "--keys",
            "1000",
            "--runs",
            "1",
            "--startup",
            "--sides",
            "gcd sweep,gcd sweep journal,obstore,s5cmd",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env(),
        timeout=300,
        check=True,
    )
    assert "| gcd sweep journal |" in paired.stdout
    assert "| gcd sweep, nothing to delete |" in paired.stdout
    profile = subprocess.run(
        [sys.executable, "-m", "bench.profile_sweep", "--keys", "1000", "--runs", "1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env(),
        timeout=300,
        check=True,
    )
    assert "| **total (plain run)** |" in profile.stdout
