"""The test harness itself: real servers start, answer, and stop by PID."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import aetcd
import boto3
import pytest

from l0lab.testing.local_servers import LocalEtcd, LocalS3

pytestmark = pytest.mark.integration


async def test_etcd_server_answers_put_and_get(etcd_server: LocalEtcd, namespace: str) -> None:
    """A value put into the real etcd server is read back."""
    host, port = etcd_server.endpoint.split(":")
    async with aetcd.Client(host=host, port=int(port)) as client:
        await client.put(f"{namespace}/k".encode(), b"v")
        got = await client.get(f"{namespace}/k".encode())
    assert got is not None
    assert got.value == b"v"


def test_s3_server_lists_seeded_objects(s3_server: LocalS3, bucket: str) -> None:
    """Objects seeded through the backend are listed over HTTP with their back-dated age."""
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, [f"root/{i:03d}/x" for i in range(1500)], last_modified=old)
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="root/")
    objects = [obj for page in pages for obj in page.get("Contents", [])]
    assert len(objects) == 1500
    assert all(obj["LastModified"] < datetime.now(UTC) - timedelta(hours=1) for obj in objects)


def test_etcd_stop_by_pid_and_restart_keeps_data(etcd_private: LocalEtcd) -> None:
    """Stopping by PID ends the process; a restart on the same ports keeps the data dir."""
    pid = etcd_private.pid
    assert pid is not None
    etcd_private.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    etcd_private.start()
    assert etcd_private.pid is not None
    assert etcd_private.pid != pid
