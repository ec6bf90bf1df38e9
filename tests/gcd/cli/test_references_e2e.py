"""Issue 54's "Show": a writer whose reconciler reports past an entry it has not lifted,
end to end on a real `watermark serve`, etcd and moto.

With references (the writer names each entry's object, the reconciler names what it
lifted): `gcd sweep` deletes nothing, GC pauses itself naming the partition, the entry and
the key, and `gcd explain` names the conflict. Without them, M alone is obeyed: the live
object goes, and the undo window brings it back (`gcd restore --round`).

Named by behaviour, not module: writer, publisher, sweeper, explain and restore at once.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.clirun import Cli
from tests.gcd.sweep.test_stores_s3 import client_for
from tests.serving import RECONCILER, Serve, live_serve, request, watermark
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
PARTITION = "orders/0"


def flags(etcd: LocalEtcd, namespace: str) -> list[str]:
    return ["--etcd", etcd.endpoint, "--namespace", namespace]


def store_flags(s3: LocalS3, bucket: str) -> list[str]:
    return ["--bucket", bucket, "--endpoint-url", s3.endpoint_url, "--region", "us-east-1"]


def buggy_writer(
    serve: Serve, etcd: LocalEtcd, namespace: str, client: Any, bucket: str, *, references: bool
) -> tuple[str, str]:
    """Two entries at the cluster epoch E, each its own object; the reconciler lifts the
    first but reports reconciled through the second (the bug). Then the epoch moves on
    until M passes E. (lifted key, live key)."""
    path = "/v1/partitions/" + quote(PARTITION, safe="")
    status, epoch_doc = request(serve.url, "GET", "/v1/epoch")
    assert status == 200, epoch_doc
    epoch = epoch_doc["epoch"]
    lifted, live = LAYOUT.format(1, epoch, "lifted"), LAYOUT.format(2, epoch, "live")
    for offset, key in enumerate((lifted, live)):
        client.put_object(Bucket=bucket, Key=key, Body=key.encode())
        status, fence = request(serve.url, "POST", path + "/fence", {"epoch": epoch})
        assert status == 200, fence
        body: dict[str, Any] = {"offset": offset}
        if references:
            body["objects"] = [key]
        status, done = request(serve.url, "POST", f"/v1/fences/{fence['token']}/commit", body)
        assert status == 200, done
    report: dict[str, Any] = {"offset": 1}  # the bug: offset 1 was never lifted
    if references:
        report["objects"] = [lifted]  # what it really lifted
    status, state = request(serve.url, "POST", path + "/reconciled", report, RECONCILER)
    assert status == 200, state

    def m_passed() -> bool:
        doc = json.loads(run_status(etcd, namespace))
        if doc["safe_epoch"] is not None and doc["safe_epoch"] >= epoch:
            return True
        watermark(etcd, namespace, "epoch", "advance")
        return False

    wait_until_sync(m_passed, timeout_s=60, what=f"M past epoch {epoch}", detail=serve.tail)
    return lifted, live


def run_status(etcd: LocalEtcd, namespace: str) -> str:
    from tests.clirun import run_cli  # noqa: PLC0415

    done = run_cli("gcd", "status", "--json", *flags(etcd, namespace))
    assert done.returncode == 0, done.stderr
    return done.stdout


def sweep(
    s3: LocalS3, bucket: str, etcd: LocalEtcd, namespace: str, journal: Path, *extra: str
) -> list[str]:
    return [
        "sweep",
        *store_flags(s3, bucket),
        "--root",
        ROOT,
        "--grace",
        "0",
        "--json",
        "--journal-dir",
        str(journal),
        *extra,
        *flags(etcd, namespace),
    ]


def test_with_references_nothing_live_is_deleted_and_gc_pauses_naming_the_culprit(
    s3_server: LocalS3, etcd_server: LocalEtcd, namespace: str, tmp_path: Path, cli: Cli
) -> None:
    client = client_for(s3_server.endpoint_url)
    bucket = f"l0gc-refs-{random.randrange(10**9)}"
    client.create_bucket(Bucket=bucket)
    with live_serve(etcd_server, namespace, tmp_path, partitions=(PARTITION,)) as serve:
        bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
        lifted, live = buggy_writer(serve, etcd_server, namespace, client, bucket, references=True)
        run = cli("gcd", *sweep(s3_server, bucket, etcd_server, namespace, tmp_path / "j"))
        assert run.code == exitcodes.BLOCKED, run.err
        summary = run.json
        assert summary["reference_conflicts"] == 1
        assert summary["conflicting_keys"] == [live]
        assert summary["deleted"] == 0
        present = {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}
        assert {lifted, live} <= present  # nothing deleted: M is wrong
        paused = json.loads(run_status(etcd_server, namespace))["paused_reason"]
        assert f"{PARTITION!r}" in paused
        assert "offset 1" in paused
        assert live in paused
        told = cli(
            "gcd",
            "explain",
            *store_flags(s3_server, bucket),
            "--root",
            ROOT,
            "--json",
            live,
            *flags(etcd_server, namespace),
        )
        (answer,) = json.loads(told.out)["keys"]
        assert answer["reason"] == "reference_conflict", answer
        assert answer["referenced_by"] == {"partition": PARTITION, "offset": 1}
        # the fixed reconciler lifts the entry and names it: released, resumed, swept
        status, _ = request(
            serve.url,
            "POST",
            "/v1/partitions/" + quote(PARTITION, safe="") + "/reconciled",
            {"offset": 1, "objects": [live]},
            RECONCILER,
        )
        assert status == 200

        def released() -> bool:
            return bool(json.loads(run_status(etcd_server, namespace))["references"]["keys"] == 0)

        wait_until_sync(released, timeout_s=30, what="the reference released in etcd")
        assert cli("gcd", "resume", *flags(etcd_server, namespace)).code == 0
        run = cli("gcd", *sweep(s3_server, bucket, etcd_server, namespace, tmp_path / "j"))
        assert run.code == exitcodes.OK, run.err
        assert run.json["deleted"] == 2


def test_without_references_the_live_object_goes_and_the_undo_window_brings_it_back(
    s3_server: LocalS3, etcd_server: LocalEtcd, namespace: str, tmp_path: Path, cli: Cli
) -> None:
    client = client_for(s3_server.endpoint_url)
    bucket = f"l0gc-refs-{random.randrange(10**9)}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    journal = tmp_path / "j"
    with live_serve(etcd_server, namespace, tmp_path, partitions=(PARTITION,)) as serve:
        bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
        _, live = buggy_writer(serve, etcd_server, namespace, client, bucket, references=False)
        run = cli(
            "gcd", *sweep(s3_server, bucket, etcd_server, namespace, journal, "--undo-window", "1h")
        )
        assert run.code == exitcodes.OK, run.err
        assert run.json["markers_written"] == 2  # M alone: the live object is hidden too
        listed = client.list_objects_v2(Bucket=bucket, Prefix=ROOT + "/0").get("Contents", [])
        assert live not in {o["Key"] for o in listed}
        round_id = run.json["round"]
        assert (
            cli(
                "gcd", "pause", "--reason", "lost a live object", *flags(etcd_server, namespace)
            ).code
            == 0
        )
        restore = cli(
            "gcd",
            "restore",
            *store_flags(s3_server, bucket),
            "--journal-dir",
            str(journal),
            "--round",
            round_id,
            "--json",
            *flags(etcd_server, namespace),
        )
        assert restore.code == exitcodes.OK, restore.err
        assert client.get_object(Bucket=bucket, Key=live)["Body"].read() == live.encode()
