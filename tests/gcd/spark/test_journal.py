"""A Spark job's deletion journal (`gcd.spark.journal`): every delete batch is written to
the audit prefix before it is sent, each task attempt its own chain, anchored in etcd by
the driver; `gcd journal verify` checks the run as it checks a sweeper's, and `gcd
explain` names the Spark application that deleted a key."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from gcd.journal.chain import Chain
from gcd.observe.events import BatchAttempt, BatchOutcome, DeleteBasis, DeletionNotRecorded
from gcd.spark.brake import DriverBrake
from gcd.spark.journal import SparkJournal, TaskJournal, task_sweeper
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key
from l0gc.errors import StorageError
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3

from .test_sweep import etcd_args, gcd, gcd_args, summary

PREFIX = "l0gc-audit/journal"
GARBAGE = [f"level_zero/data/{p:03d}/{5:018d}/k{i:03d}" for p in range(8) for i in range(30)]
LIVE = [f"level_zero/data/{p:03d}/{15:018d}/k000" for p in range(8)]


def _s3(s3_server: LocalS3) -> Any:
    return boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")


def _store_args(s3_server: LocalS3, bucket: str) -> list[str]:
    return ["--bucket", bucket, "--endpoint-url", s3_server.endpoint_url, "--region", "us-east-1"]


@pytest.mark.spark
@pytest.mark.integration
async def test_a_journaled_spark_run_verifies_and_explain_names_its_application(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Any,
    watermark_store: WatermarkStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every deleted key is in a before record stored before its request, every chain
    is anchored in etcd, verify says OK; a segment removed from a chain's middle is
    damage (exit 1); explain tells who deleted a key: the application and the batch."""
    s3_server.seed(bucket, GARBAGE + LIVE, last_modified=datetime.now(UTC) - timedelta(hours=2))
    await set_safe_epoch(10, 20)
    out = tmp_path / "out"
    argv = gcd_args(s3_server, bucket, out, "--list", "--batch-size", "40")
    argv += ["--delete-tasks", "2", "--journal-prefix", PREFIX, *etcd_args(etcd_server, namespace)]
    assert await gcd(argv) == exitcodes.OK
    done = summary(out)
    assert done["deleted"] == len(GARBAGE)
    assert s3_server.keys(bucket) - {claim_key("level_zero/data")} - _journal_keys(
        s3_server, bucket
    ) == set(LIVE)
    round_id = done["journal"]["round"]
    assert round_id.startswith(done["application"] + ".")
    chains = done["journal"]["chains"]
    assert chains >= 2  # one per delete task attempt
    anchors = await watermark_store.kv.range_prefix(anchor_key(namespace, "spark-"))
    assert len(anchors.items) == chains
    capsys.readouterr()

    verify = ["journal", "verify", *_store_args(s3_server, bucket), "--journal-prefix", PREFIX]
    verify += [*etcd_args(etcd_server, namespace), "--json"]
    assert await gcd(verify) == exitcodes.OK, capsys.readouterr().out[-3000:]
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "OK", report

    explain = ["explain", *_store_args(s3_server, bucket), "--journal-prefix", PREFIX]
    explain += [*etcd_args(etcd_server, namespace), GARBAGE[0]]
    assert await gcd(explain) == exitcodes.OK
    told = capsys.readouterr().out
    assert f"deleted by Spark application {done['application']} at " in told
    assert f"round {round_id}" in told

    # A segment cut out of the middle of a chain (not its last) shows.
    client = _s3(s3_server)
    names = sorted(_journal_keys(s3_server, bucket))
    segments = [n for n in names if n.rsplit("/", 1)[-1].startswith("journal-")]
    longest = max(
        {n.rsplit("-", 1)[0] for n in segments},
        key=lambda c: sum(s.startswith(c) for s in segments),
    )
    chain = [s for s in segments if s.startswith(longest)]
    assert len(chain) >= 3
    client.delete_object(Bucket=bucket, Key=chain[1])
    assert await gcd(verify) == exitcodes.PARTIAL_FAILURE
    assert json.loads(capsys.readouterr().out)["verdict"] == "FAILED"


def _journal_keys(s3_server: LocalS3, bucket: str) -> set[str]:
    return {k for k in s3_server.keys(bucket) if k.startswith(PREFIX + "/")}


class _Objects:
    """An executor client that only stores objects (and can be told to fail)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail = False

    def put_object(self, key: str, body: bytes) -> None:
        if self.fail:
            raise StorageError(
                "PutObject failed: AccessDenied", code="AccessDenied", retryable=False
            )
        self.objects[key] = body


def _attempt(journal: TaskJournal, keys: tuple[str, ...]) -> BatchAttempt:
    request = journal.next_request()
    basis = journal.journal.basis
    return BatchAttempt(basis, keys, tuple(5 for _ in keys), 0, request, request)


def test_a_batch_is_not_sent_when_its_segment_is_not_stored_and_the_chain_stays_whole() -> None:
    """A PutObject that fails refuses the batch (DeletionNotRecorded) and leaves the
    chain where it was: the next segment continues it with no gap; every segment holds
    the after records answered since the one before; the driver keeps the newest end."""
    objects = _Objects()
    brake = DriverBrake()
    url = brake.serve("127.0.0.1")
    try:
        basis = DeleteBasis(10, 20, 7, (("orders/1", 10),), round_id="app-1.abc123")
        header = (("application", "app-1"), ("namespace", "/ns"), ("bucket", "b"))
        journal = SparkJournal("audit", basis, header, url).task(objects, "spark-app-1-p0-t3")
        first = _attempt(journal, ("k1", "k2"))
        journal.before(first)
        journal.after(BatchOutcome(first, deleted=("k1",), failed=(("k2", "SlowDown"),)))
        objects.fail = True
        with pytest.raises(DeletionNotRecorded, match="2 keys not deleted"):
            journal.before(_attempt(journal, ("k3", "k4")))
        objects.fail = False
        third = _attempt(journal, ("k5",))
        journal.before(third)
        journal.after(BatchOutcome(third, deleted=("k5",)))
        end = journal.close()
    finally:
        brake.close()
    assert sorted(objects.objects) == [
        "audit/anchor-spark-app-1-p0-t3.json",
        "audit/journal-spark-app-1-p0-t3-000001.jsonl",
        "audit/journal-spark-app-1-p0-t3-000002.jsonl",
        "audit/journal-spark-app-1-p0-t3-000003.jsonl",
    ]
    lines = [
        json.loads(line)
        for name in sorted(objects.objects)
        if "/journal-" in name
        for line in objects.objects[name].splitlines()
    ]
    assert [(d["seq"], d["type"]) for d in lines] == [
        (1, "segment"),
        (2, "before"),
        (3, "segment"),
        (4, "after"),
        (5, "before"),
        (6, "segment"),
        (7, "after"),
    ]
    assert [d["request"] for d in lines if d["type"] != "segment"] == [1, 1, 3, 3]
    assert lines[1]["round"] == "app-1.abc123"
    assert lines[1]["pinning"] == [["orders/1", 10]]
    assert lines[0]["application"] == "app-1"
    # The chain links every line to the one before, across segments.
    chain = Chain("spark-app-1-p0-t3")
    for doc in lines:
        ours = chain.line(
            {k: v for k, v in doc.items() if k not in {"v", "sweeper", "seq", "prev", "at"}},
            doc["at"],
        )
        assert json.loads(ours) == doc
    assert end is not None
    assert (end.seq, end.digest) == (7, chain.prev)
    stored = JournalAnchor.decode(objects.objects["audit/anchor-spark-app-1-p0-t3.json"], "x")
    assert (stored.seq, stored.digest, stored.segment) == (end.seq, end.digest, end.segment)
    assert brake.chains["spark-app-1-p0-t3"].digest == end.digest  # each segment reported


def test_each_task_attempt_has_its_own_chain() -> None:
    """A retried or speculative copy of a task never writes into another's chain."""
    names = {task_sweeper("app-20261203-0001", 3, attempt) for attempt in (11, 12)}
    assert names == {"spark-app-20261203-0001-p3-t11", "spark-app-20261203-0001-p3-t12"}
    assert task_sweeper("a/b c", 0, 0) == "spark-a_b_c-p0-t0"  # one safe name, no path


def test_the_driver_keeps_only_anchors_and_never_an_older_end() -> None:
    brake = DriverBrake()
    newer = JournalAnchor("spark-x-p0-t1", 9, "d9", "s", 1.0)
    assert brake.report(newer.encode())
    assert brake.report(JournalAnchor("spark-x-p0-t1", 4, "d4", "s", 2.0).encode())
    assert brake.chains == {"spark-x-p0-t1": newer}
    assert not brake.report(b'{"stop": null}')
    assert not brake.report(b"\xff" * 10)
