"""`gcd spark-sweep` never deletes under another namespace's root claimed below its own
(issue 25 finding 1, the Spark pipeline): on a real S3 server and a real etcd, the claim
objects are collected from the listing / inventory rows before any delete, a claim the
inventory does not show is found by probing the bucket, and every key under a nested
root (and the claim itself) is kept, counted and named."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.spark.nesting import keep_nested, probe_claims
from gcd.storage.rows import classify
from gcd.storage.s3.executor import S3Target
from l0gc import exitcodes
from l0gc.contract.binding import Binding, StorageTarget, claim_key
from l0lab.testing.local_servers import LocalEtcd, LocalS3

from .test_sweep import (
    CLAIM,
    CLUSTER_EPOCH,
    ELIGIBLE,
    LIVE,
    SAFE_EPOCH,
    decisions,
    etcd_args,
    gcd,
    gcd_args,
    key,
    seed_mixed,
    summary,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

NESTED = "level_zero/data/417"
"""Another namespace's root, inside this namespace's root level_zero/data."""
NESTED_CLAIM = claim_key(NESTED)
UNDER_NESTED = {key(417, 5), key(417, 10, "live1"), key(417, 2, "b")}
"""Objects of /b that look eligible to /a (epoch <= M, old)."""
DEEP = key(418, 4, "x").rsplit("/", 1)[0]
"""A nested root one level deeper, level_zero/data/418/000000000000000004."""
UNDER_DEEP = {key(418, 4, "p"), key(418, 4, "q")}


def other_claim(root: str) -> bytes:
    """The claim object namespace /b wrote for `root` (bound before nesting was refused)."""
    binding = Binding("/b", StorageTarget("ignored", root), "b-id", "cluster-b", 1.0)
    return binding.claim().encode()


def seed_nested(s3_server: LocalS3, bucket: str, root: str, under: set[str]) -> None:
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, sorted(under), last_modified=old)
    s3_server.seed(bucket, {claim_key(root): other_claim(root)}, last_modified=old)


async def test_list_mode_keeps_a_nested_root(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    tmp_path: Path,
) -> None:
    """The claim is one of the listed rows: its subtree and itself are kept and named."""
    seed_mixed(s3_server, bucket)
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)  # bind refuses a root holding a claim:
    seed_nested(s3_server, bucket, NESTED, UNDER_NESTED)  # /b's claim came by hand, after
    out = tmp_path / "out"
    code = await gcd(
        gcd_args(
            s3_server,
            bucket,
            out,
            "--list",
            "--list-tasks",
            "10",
            *etcd_args(etcd_server, namespace),
        )
    )
    assert code == exitcodes.OK
    left = s3_server.keys(bucket)
    assert UNDER_NESTED | {NESTED_CLAIM, CLAIM} <= left
    assert not ELIGIBLE & left
    assert left >= LIVE
    actions = decisions(out)
    kept = {k for k, a in actions.items() if a == "kept_nested_root"}
    assert kept == UNDER_NESTED | {NESTED_CLAIM}
    assert {k for k, a in actions.items() if a == "deleted"} == ELIGIBLE
    done = summary(out)
    assert done["nested_roots"] == [NESTED]
    assert done["skipped_nested"] == len(kept)
    assert (done["eligible"], done["deleted"], done["claim_probe_failures"]) == (5, 5, [])
    assert done["claim_probes"] == 0  # digits and letters sort after the claim: no probe


async def test_stale_inventory_claims_are_probed(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    inventory: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """A claim in the inventory keeps its subtree; a claim written after the inventory
    (absent from it) is found by the per-directory probe; the report names both kinds."""
    seed_mixed(s3_server, bucket)
    await set_safe_epoch(SAFE_EPOCH, CLUSTER_EPOCH)
    seed_nested(s3_server, bucket, NESTED, UNDER_NESTED)
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, sorted(UNDER_DEEP), last_modified=old)
    manifest = inventory("Parquet")
    s3_server.seed(bucket, {claim_key(DEEP): other_claim(DEEP)})  # newer than the inventory
    report_out = tmp_path / "report"
    code = await gcd(
        [
            "spark-report",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--output",
            str(report_out),
            "--json",
            "--inventory",
            str(manifest),
            "--safe-epoch",
            str(SAFE_EPOCH),
        ]
    )
    assert code == exitcodes.OK
    report = json.loads((report_out / "report.json").read_text())
    assert report["nested_roots"] == [NESTED]  # a report reads the rows only
    assert report["nested_root_objects"] == len(UNDER_NESTED) + 1
    assert report["eligible_objects"] == len(ELIGIBLE) + len(UNDER_DEEP)
    out = tmp_path / "out"
    code = await gcd(
        gcd_args(
            s3_server, bucket, out, "--inventory", str(manifest), *etcd_args(etcd_server, namespace)
        )
    )
    assert code == exitcodes.OK
    left = s3_server.keys(bucket)
    assert UNDER_NESTED | UNDER_DEEP | {NESTED_CLAIM, claim_key(DEEP), CLAIM} <= left
    assert not ELIGIBLE & left
    actions = decisions(out)
    assert {k for k, a in actions.items() if a == "kept_nested_root"} == (
        UNDER_NESTED | UNDER_DEEP | {NESTED_CLAIM}
    )
    done = summary(out)
    assert done["nested_roots"] == sorted([NESTED, DEEP])
    assert done["skipped_nested"] == len(UNDER_NESTED) + 1 + len(UNDER_DEEP)
    assert done["deleted"] == len(ELIGIBLE)
    # The directories of eligible keys outside level_zero/data/417: 001 (epochs 5, 10),
    # 007/9, 500/3, 999/0 and 418/4: 4 + 5 prefix and epoch directories, + 2.
    assert done["claim_probes"] == 11
    assert done["claim_probe_failures"] == []


def test_a_failed_probe_keeps_its_directories(spark: Any) -> None:
    """The bucket cannot be reached for a probe: every probed directory is reported and
    its keys are kept (fail closed), not deleted as if no claim were there."""
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = S3Target(
        "bucket",
        f"http://127.0.0.1:{port}",
        "us-east-1",
        Backoff(base_s=0.01, cap_s=0.01, max_attempts=1),
    )
    old = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    rows = [(key(1, 5), 1, old), (key(2, 6, "x"), 1, old), (key(3, 50), 1, old)]
    source = spark.createDataFrame(rows, "key string, size long, last_modified_s double")
    root = "level_zero/data"
    classified = classify(source, KeyLayout.default(root), SAFE_EPOCH, time.time(), 60.0)
    probes = spark.sparkContext.accumulator(0)
    nested = probe_claims(classified, root, target, {}, every_directory=True, requests=probes)
    assert nested.roots == {}
    assert set(nested.failed) == {
        key(1, 5).rsplit("/", 2)[0],
        key(1, 5).rsplit("/", 1)[0],
        key(2, 6).rsplit("/", 2)[0],
        key(2, 6).rsplit("/", 1)[0],
    }
    assert nested.probes == 4  # the live key's directories are not probed
    kept = keep_nested(classified, nested.kept, root).select("key", "action").collect()
    assert {row["key"]: row["action"] for row in kept} == {
        key(1, 5): "kept_nested_root",
        key(2, 6, "x"): "kept_nested_root",
        key(3, 50): "kept_not_eligible",
    }
