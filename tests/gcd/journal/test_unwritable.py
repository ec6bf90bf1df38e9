"""A journal that cannot be written stops deletion before any unjournaled delete (issue 51).

The sweep runs as its own process with a file-size limit (RLIMIT_FSIZE: every write past
it fails with EFBIG, as a full disk fails with ENOSPC; Python ignores SIGXFSZ), on real
etcd and moto: the segment's header fits, the first batch's "before" record does not.
"""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.gcd.journal.test_records import ROOT, history_cluster, key

pytestmark = pytest.mark.integration

_LIMIT = 4096
"""Bytes any one file of the sweep may hold: the header fits, 200 keys do not."""


def sweep(argv: list[str], *, limit: int | None) -> subprocess.CompletedProcess[str]:
    """`gcd sweep ARGV --json` in a child process, its files capped at `limit` bytes."""

    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(  # noqa: PLW1510 - the exit code is asserted
        [sys.executable, "-m", "gcd", "sweep", *argv, "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
    )


def test_a_full_disk_stops_the_sweep_before_any_delete_and_the_next_sweep_goes_on(
    etcd_server: LocalEtcd, s3_server: LocalS3, namespace: str, bucket: str, tmp_path: Path
) -> None:
    """Disk full: nothing deleted, the round counts every key as an error and says why
    (exit 1); once the disk has room the next sweep deletes them, with no human step."""
    asyncio.run(history_cluster(etcd_server, namespace))  # M = 7
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    garbage = [key(2, f"garbage-{i:04d}-{'x' * 40}") for i in range(200)]
    live = key(9, "live")
    s3_server.seed(bucket, [*garbage, live], last_modified=datetime.now(UTC) - timedelta(hours=2))
    journal = tmp_path / "journal"
    argv = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--journal-dir",
        str(journal),
    ]

    full = sweep(argv, limit=_LIMIT)
    assert full.returncode == 1, full.stderr
    summary = json.loads(full.stdout)
    assert (summary["deleted"], summary["errors"]) == (0, len(garbage))
    assert "journal.write_failed" in full.stderr
    assert "cannot be written" in full.stderr
    assert s3_server.keys(bucket) >= {*garbage, live}  # not one key went unjournaled
    assert all(p.stat().st_size <= _LIMIT for p in journal.glob("journal-*"))

    roomy = sweep(argv, limit=None)
    assert roomy.returncode == 0, roomy.stderr
    assert json.loads(roomy.stdout)["deleted"] == len(garbage)
    assert s3_server.keys(bucket) & {*garbage, live} == {live}
