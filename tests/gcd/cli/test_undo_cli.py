"""The undo window end to end (issue 38's "Show"), on moto and SeaweedFS with real etcd.

`gcd sweep --undo-window`, `gcd restore`, `gcd pause`/`resume` and `watermark partition
repair` as an operator runs them: hidden keys keep their bytes, a restore refuses while
GC runs and brings every key back with its own bytes while paused, the repair keeps
them; a short window frees every version of the hidden keys and nothing else; a plain
bucket deletes only what was garbage for the whole window.

Named by behaviour, not module: end to end across sweep, restore, pause and `watermark` repair.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from gcd.cli.status_text import _undo_line
from gcd.rules.layout import KeyLayout
from gcd.service.runtime import undo_fields
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.shards import ShardAnnouncement
from gcd.undo.mhistory import history_prefix
from gcd.undo.restore import JournaledDeletion, RestoreOutcome, restore
from l0gc import exitcodes
from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from tests.clirun import Cli, CliResult
from tests.conftest import S3Server
from tests.gcd.cli.test_sweep_cli import prepare_etcd
from tests.gcd.sweep.test_stores_s3 import client_for
from tests.gcd.sweep.test_stores_s3 import versions as all_versions
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)


def make_bucket(client: Any, *, versioned: bool) -> str:
    name = f"l0gc-undo-{random.randrange(10**9)}"
    client.create_bucket(Bucket=name)
    if versioned:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def seed(client: Any, bucket: str) -> tuple[dict[str, bytes], set[str], str]:
    """Eligible keys (epochs 1-5, two versions each: their current bytes), live keys
    (epochs 6, 9) and one eligible key another writer deleted (its marker on top)."""
    eligible: dict[str, bytes] = {}
    live: set[str] = set()
    for prefix in (1, 417):
        for epoch in (1, 3, 5, 6, 9):
            key = LAYOUT.format(prefix, epoch, f"seg-{prefix}-{epoch}.log")
            client.put_object(Bucket=bucket, Key=key, Body=b"old bytes")
            body = f"bytes of {key} ".encode() * 10
            client.put_object(Bucket=bucket, Key=key, Body=body)
            if epoch <= 5:
                eligible[key] = body
            else:
                live.add(key)
    foreign = LAYOUT.format(2, 2, "deleted-by-the-writer.log")
    client.put_object(Bucket=bucket, Key=foreign, Body=b"x")
    client.delete_object(Bucket=bucket, Key=foreign)
    return eligible, live, foreign


def versions(client: Any, bucket: str) -> set[tuple[str, str, bool]]:
    """Every version and marker but the binding's claim object's."""
    return {v for v in all_versions(client, bucket) if not v[0].endswith(".l0gc-claim.json")}


def current(client: Any, bucket: str) -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    keys = {item["Key"] for page in pages for item in page.get("Contents", [])}
    return {key for key in keys if not key.endswith(".l0gc-claim.json")}  # the binding's claim


def etcd_flags(etcd: LocalEtcd, namespace: str) -> list[str]:
    return ["--etcd", etcd.endpoint, "--namespace", namespace]


def sweep(
    server: S3Server, bucket: str, etcd: LocalEtcd, namespace: str, journal: str, window: str
) -> list[str]:
    return [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        server.endpoint_url,
        "--region",
        "us-east-1",
        "--grace",
        "0",
        "--json",
        "--undo-window",
        window,
        "--journal-dir",
        journal,
        *etcd_flags(etcd, namespace),
    ]


def test_hide_restore_repair_resume_keeps_every_key(
    s3_any: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Any,
    cli: Cli,
) -> None:
    """A 1 h window hides eligible keys with their bytes kept; restore refuses while GC
    runs, restores every key with its own bytes while paused; after the printed repair
    and resume the next round keeps them; the writer's own marker is never touched."""
    client = client_for(s3_any.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    eligible, live, _ = seed(client, bucket)
    prepare_etcd(etcd_server, namespace, bound_to=(s3_any, bucket))  # type: ignore[arg-type]
    journal = str(tmp_path / "journal")
    before = versions(client, bucket)

    run = cli("gcd", *sweep(s3_any, bucket, etcd_server, namespace, journal, "1h"))
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["markers_written"] == len(eligible)
    assert summary["versions_reclaimed"] == 0
    assert summary["deleted_bytes"] == 0
    assert summary["undo"]["rule"] == "hide-then-reclaim"
    assert summary["undo"]["foreign_markers"] == 1
    assert current(client, bucket) == live
    after = versions(client, bucket)
    assert before <= after  # every version kept, the writer's marker too
    assert {key for key, _, marker in after - before} == set(eligible)
    assert all(marker for _, _, marker in after - before)

    # `gcd explain` says so: deleted (hidden behind l0gc's marker) and restorable.
    hidden = next(iter(eligible))
    run = cli(
        "gcd",
        "explain",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_any.endpoint_url,
        "--region",
        "us-east-1",
        "--journal-dir",
        journal,
        "--json",
        hidden,
        *etcd_flags(etcd_server, namespace),
    )
    assert run.code == 0
    (told,) = json.loads(run.out)["keys"]
    assert (told["verdict"], told["restorable"]) == ("deleted", True), told
    assert told["restore"] == f"gcd restore --key {hidden}"

    restore = [
        "restore",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_any.endpoint_url,
        "--region",
        "us-east-1",
        "--journal-dir",
        journal,
        "--partition",
        "t/0",
        *etcd_flags(etcd_server, namespace),
    ]
    run = cli("gcd", *restore)
    code, err = run.code, run.err
    assert code == exitcodes.USAGE
    said = [line for line in err.splitlines() if line.startswith("gcd restore:")]
    assert len(said) == 1
    assert "run `gcd pause" in said[0]
    assert current(client, bucket) == live

    run = cli("gcd", "pause", "--reason", "wrong M(p)", *etcd_flags(etcd_server, namespace))
    assert run.code == 0
    run = cli("gcd", *restore, "--json")
    code, report = run.code, run.json
    assert code == exitcodes.OK, report
    assert report["restored"] == len(eligible)
    assert report["already_reclaimed"] == report["never_deleted"] == 0
    assert current(client, bucket) == live | set(eligible)
    for key, body in eligible.items():
        assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    assert versions(client, bucket) == before  # exactly l0gc's markers went
    assert list((tmp_path / "journal").glob("restore-*.jsonl"))  # journaled

    repair, resume = report["steps"]
    assert repair.startswith("watermark partition repair t/0 --watermark 0 --force")
    assert resume == "gcd resume"
    argv = [
        *repair.split()[1:4],
        "--watermark",
        "0",
        "--force",
        "--revoke-wait",
        "0",
        "--reason",
        "restored",
        *etcd_flags(etcd_server, namespace),
    ]
    run = cli("watermark", *argv)
    assert run.code == 0
    run = cli("gcd", "resume", *etcd_flags(etcd_server, namespace))
    assert run.code == 0
    run = cli("gcd", *sweep(s3_any, bucket, etcd_server, namespace, journal, "1h"))
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["markers_written"] == 0
    assert current(client, bucket) == live | set(eligible)


def test_a_short_window_frees_every_version_of_hidden_keys_only(
    s3_any: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Any,
    cli: Cli,
) -> None:
    """With a 2 s window a later round frees every version and l0gc marker of the hidden
    keys; every live version and the writer's own marker stay."""
    client = client_for(s3_any.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    eligible, _, foreign = seed(client, bucket)
    prepare_etcd(etcd_server, namespace, bound_to=(s3_any, bucket))  # type: ignore[arg-type]
    journal = str(tmp_path / "journal")
    before = versions(client, bucket)
    argv = sweep(s3_any, bucket, etcd_server, namespace, journal, "2s")
    run = cli("gcd", *argv)
    code, first = run.code, run.json
    assert code == exitcodes.OK
    assert first["markers_written"] == len(eligible)
    hidden_at = time.time()
    wait_until_sync(lambda: time.time() - hidden_at > 3, timeout_s=10, what="the window passed")
    run = cli("gcd", *argv)
    code, second = run.code, run.json
    assert code == exitcodes.OK, second
    after = versions(client, bucket)
    assert {v for v in after if v[0] in eligible} == set()
    assert {v for v in before if v[0] not in eligible} == after
    assert second["versions_reclaimed"] == 3 * len(eligible)  # two versions + the marker
    assert second["deleted_bytes"] > 0
    assert second["undo"]["foreign_markers"] == 1
    assert foreign in {key for key, _, _ in after}


def test_a_plain_bucket_keeps_what_only_just_became_garbage(
    s3_any: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Any,
    cli: Cli,
) -> None:
    """Without versions: no history one window old deletes nothing and says so; with M =
    3 two hours ago and 5 now a 1 h window deletes epochs <= 3 only, a 0 window the rest."""
    client = client_for(s3_any.endpoint_url)
    bucket = make_bucket(client, versioned=False)
    eligible, live, _ = seed(client, bucket)
    eligible = {key: body for key, body in eligible.items() if "deleted-by" not in key}
    prepare_etcd(etcd_server, namespace, bound_to=(s3_any, bucket))  # type: ignore[arg-type]
    journal = str(tmp_path / "journal")
    argv = sweep(s3_any, bucket, etcd_server, namespace, journal, "1h")
    run = cli("gcd", *argv)
    code, first = run.code, run.json
    assert code == exitcodes.OK, first
    assert first["deleted"] == 0
    assert first["undo"]["rule"] == "delayed-m"
    assert "no M history" in first["undo"]["note"]
    assert first["undo"]["pending_keys"] == len(eligible)

    async def write_old_history() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        try:
            at = time.time() - 7200
            doc = json.dumps({"m": 3, "at": at, "window_s": 3600.0}).encode()
            await kv.txn([], [Put(f"{history_prefix(namespace)}{int(at * 1000):016d}", doc)])
        finally:
            await kv.close()

    asyncio.run(write_old_history())
    run = cli("gcd", *argv)
    code, second = run.code, run.json
    assert code == exitcodes.OK, second
    old = {key for key in eligible if LAYOUT.parse(key).epoch <= 3}  # type: ignore[union-attr]
    assert second["undo"]["delayed_safe_epoch"] == 3
    assert second["deleted"] == len(old)
    assert current(client, bucket) == live | (set(eligible) - old)
    run = cli("gcd", *sweep(s3_any, bucket, etcd_server, namespace, journal, "0"))
    code, third = run.code, run.json
    assert code == exitcodes.OK
    assert third["undo"] is None
    assert current(client, bucket) == live


def test_suspended_versioning_is_never_hidden_over_its_null_versions(
    s3_server: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Any,
    cli: Cli,
) -> None:
    """Issue 51 (1): key A written while versioning was Enabled, B and C after it was
    Suspended (version "null"). A 1 h window used to hide all three: the hide's marker
    (version "null") replaced B's and C's only data version, their bytes gone at "hide"
    time, and the sweep counted markers the store never returned. Now a Suspended bucket
    is swept by the delayed M (as a plain bucket): nothing is hidden, every byte stays
    until the keys have been garbage for a whole window, and the round says which rule."""
    client = client_for(s3_server.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    a, b, c = (LAYOUT.format(7, 2, f"{name}.log") for name in "abc")
    client.put_object(Bucket=bucket, Key=a, Body=b"bytes of a")
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    bodies = {a: b"bytes of a", b: b"bytes of b", c: b"bytes of c"}
    for key in (b, c):
        client.put_object(Bucket=bucket, Key=key, Body=bodies[key])
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))  # type: ignore[arg-type]
    before = versions(client, bucket)
    assert {version for key, version, _ in before if key in (b, c)} == {"null"}

    run = cli(
        "gcd", *sweep(s3_server, bucket, etcd_server, namespace, str(tmp_path / "journal"), "1h")
    )
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["undo"]["rule"] == "delayed-m"
    assert (summary["markers_written"], summary["deleted"]) == (0, 0)
    assert summary["undo"]["pending_keys"] == 3
    assert versions(client, bucket) == before
    for key, body in bodies.items():
        assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == body


Hidden = tuple[Any, str, dict[str, bytes], set[str]]


def _hidden(s3: S3Server, etcd: LocalEtcd, namespace: str, journal: Path, cli: Cli) -> Hidden:
    """A versioned bucket swept with a 1 h window: (client, bucket, hidden keys and their
    bytes, live keys)."""
    client = client_for(s3.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    eligible, live, _ = seed(client, bucket)
    prepare_etcd(etcd, namespace, bound_to=(s3, bucket))  # type: ignore[arg-type]
    run = cli("gcd", *sweep(s3, bucket, etcd, namespace, str(journal), "1h"))
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["markers_written"] == len(eligible)
    return client, bucket, eligible, live


def _restore(
    s3: S3Server,
    bucket: str,
    etcd: LocalEtcd,
    namespace: str,
    journal: Path,
    cli: Cli,
) -> CliResult:
    """`gcd pause`, then `gcd restore --json` of every journaled deletion."""
    run = cli("gcd", "pause", "--reason", "restore", *etcd_flags(etcd, namespace))
    assert run.code == 0
    return cli(
        "gcd",
        "restore",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3.endpoint_url,
        "--region",
        "us-east-1",
        "--journal-dir",
        str(journal),
        "--json",
        *etcd_flags(etcd, namespace),
    )


def test_restore_leaves_a_key_written_again_alone_and_reads_every_other_back(
    s3_server: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Issue 51 (1): a hidden key a writer wrote again after the hide is SUPERSEDED, its
    new bytes left alone; every other hidden key comes back, and the version reported is
    the one the store serves now (read back, not taken from the delete's answer)."""
    journal = tmp_path / "journal"
    client, bucket, eligible, _ = _hidden(s3_server, etcd_server, namespace, journal, cli)
    rewritten = min(eligible)
    client.put_object(Bucket=bucket, Key=rewritten, Body=b"written again after the hide")
    run = _restore(s3_server, bucket, etcd_server, namespace, journal, cli)
    code, report = run.code, run.json
    assert code == exitcodes.OK, report
    by_key = {entry["key"]: entry for entry in report["keys"]}
    assert by_key[rewritten]["outcome"] == "superseded", by_key[rewritten]
    assert (report["superseded"], report["restored"]) == (1, len(eligible) - 1)
    assert client.get_object(Bucket=bucket, Key=rewritten)["Body"].read() == (
        b"written again after the hide"
    )
    for key, body in eligible.items():
        if key != rewritten:
            assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == body
            current_version = client.head_object(Bucket=bucket, Key=key)["VersionId"]
            assert by_key[key]["version_id"] == current_version


def test_restore_acts_on_no_journal_record_that_does_not_verify(
    s3_server: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Issue 51 (2): (a) a before/after pair appended to a real segment, naming a live key
    with its current *data* version as the "marker"; (b) a new segment in the journal
    directory with another namespace and bucket in its header, naming a live key and a
    key outside the root. Restore used to delete both for good. Now the tampered
    sweeper's journal (its chain breaks) and the unanchored one are left out, named on
    stderr, nothing is deleted, and the exit code is 1."""
    journal = tmp_path / "journal"
    client, bucket, _, live = _hidden(s3_server, etcd_server, namespace, journal, cli)
    before_restore = versions(client, bucket)
    victim, other = sorted(live)[:2]
    data_version = client.head_object(Bucket=bucket, Key=victim)["VersionId"]
    (segment,) = journal.glob("journal-*.jsonl")
    docs = [json.loads(line) for line in segment.read_text().splitlines()]
    before = next(d for d in docs if d.get("type") == "before" and d.get("hides"))
    after = next(d for d in docs if d.get("type") == "after" and d.get("markers"))
    forged_before = {
        **before,
        "request": "forged",
        "keys": [victim],
        "epochs": [9],
        "hides": [[data_version]],
        "seq": docs[-1]["seq"] + 1,
    }
    forged_after = {
        **after,
        "request": "forged",
        "deleted": [victim],
        "markers": [[victim, data_version]],
        "seq": docs[-1]["seq"] + 2,
    }
    with segment.open("a") as out:
        out.write(json.dumps(forged_before) + "\n" + json.dumps(forged_after) + "\n")
    header = {
        **docs[0],
        "sweeper": "intruder",
        "namespace": "/other",
        "bucket": "elsewhere",
        "seq": 1,
        "prev": "",
    }
    other_version = client.head_object(Bucket=bucket, Key=other)["VersionId"]
    planted = [
        header,
        {
            **forged_before,
            "sweeper": "intruder",
            "keys": [other, "outside/the/root"],
            "epochs": [9, 1],
            "hides": [[other_version], []],
            "seq": 2,
        },
        {
            **forged_after,
            "sweeper": "intruder",
            "deleted": [other, "outside/the/root"],
            "markers": [[other, other_version]],
            "seq": 3,
        },
    ]
    (journal / "journal-intruder-000001.jsonl").write_text(
        "".join(json.dumps(doc) + "\n" for doc in planted)
    )

    run = _restore(s3_server, bucket, etcd_server, namespace, journal, cli)
    code, report, err = run.code, run.json, run.err
    assert code == exitcodes.PARTIAL_FAILURE, report
    said = [line for line in err.splitlines() if line.startswith("gcd restore:")]
    assert any("sweeper intruder's journal left out" in line for line in said), said
    assert any(
        f"sweeper {before['sweeper']}'s journal left out (damage" in line for line in said
    ), said
    assert report["restored"] == 0
    assert versions(client, bucket) == before_restore  # nothing deleted, nothing restored
    assert client.head_object(Bucket=bucket, Key=victim)["VersionId"] == data_version
    assert client.head_object(Bucket=bucket, Key=other)["VersionId"] == other_version


async def test_restore_refuses_a_marker_the_store_says_is_data(s3_server: S3Server) -> None:
    """The store-side rail under the journal check: a deletion whose "marker" is a data
    version in the store (a journal of a bucket whose "null" marker a writer has since
    overwritten) is REFUSED and never deleted."""
    client = client_for(s3_server.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    key = LAYOUT.format(3, 2, "live.log")
    version = client.put_object(Bucket=bucket, Key=key, Body=b"live bytes")["VersionId"]
    deletion = JournaledDeletion(key, 2, time.time(), "s", None, marker=version, hides=(version,))
    settings = S3Settings(bucket, s3_server.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        (result,) = await restore(store, {key: deletion})
    assert result.outcome is RestoreOutcome.REFUSED, result
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"live bytes"


def test_a_window_a_lifecycle_rule_cannot_keep_is_refused_naming_the_rule(
    s3_server: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Issue 51: a lifecycle rule expiring noncurrent versions after 7 days would free
    hidden objects before a 30-day window ends: the sweep exits 2 naming the rule and
    deletes nothing; a 1 h window, which the rule keeps, sweeps."""
    client = client_for(s3_server.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    eligible, live, _ = seed(client, bucket)
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "expire-old-versions",
                    "Status": "Enabled",
                    "Filter": {"Prefix": "level_zero/"},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 7},
                }
            ]
        },
    )
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))  # type: ignore[arg-type]
    journal = str(tmp_path / "journal")
    before = versions(client, bucket)
    run = cli("gcd", *sweep(s3_server, bucket, etcd_server, namespace, journal, "30d"))
    code, err = run.code, run.err
    assert code == exitcodes.USAGE, err
    said = [line for line in err.splitlines() if line.startswith("gcd sweep: error:")]
    assert len(said) == 1, err
    rule = (
        "lifecycle rule 'expire-old-versions' (prefix 'level_zero/') expires noncurrent "
        "versions after 7 days"
    )
    assert f"an --undo-window of 30 days cannot be kept: {rule}" in said[0]
    assert versions(client, bucket) == before
    run = cli("gcd", *sweep(s3_server, bucket, etcd_server, namespace, journal, "1h"))
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["markers_written"] == len(eligible)
    assert current(client, bucket) == live


def test_status_shows_the_window_and_what_is_pending() -> None:
    """A round's undo report fits the shard announcement's `store` and `gcd status`
    prints the window, the rule, the pending keys and bytes and the oldest marker."""
    undo = {
        "window_s": 3600.0,
        "rule": "hide-then-reclaim",
        "pending_keys": 12,
        "pending_bytes": 4096,
        "oldest_pending": "2026-11-22T02:44:38Z",
    }
    store = {"versioning": "Enabled", **undo_fields(undo)}
    me = ShardAnnouncement("s1", 0, 1, 1.0, store)
    assert ShardAnnouncement.decode(me.encode()).store == store  # round-trips, validated
    assert _undo_line(store) == (
        "3600s (hide-then-reclaim), pending 12 keys, 4096 bytes, oldest 2026-11-22T02:44:38Z"
    )


@pytest.mark.parametrize("how", ["flag", "env"])
def test_spark_sweep_refuses_an_undo_window_without_its_journal(
    how: str, tmp_path: Any, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gcd spark-sweep` keeps deletions reversible through its journal in the bucket: a
    window given by flag or by L0GC_UNDO_WINDOW without --journal-prefix exits 2 with one
    line naming the value and the flag to add, before any Spark job or summary; a window
    of 0 needs no journal."""
    argv = [
        "spark-sweep",
        "--bucket",
        "b",
        "--list",
        "--output",
        str(tmp_path / "out"),
        "--safe-epoch",
        "5",
    ]
    if how == "flag":
        argv += ["--undo-window", "1h"]
    else:
        monkeypatch.setenv("L0GC_UNDO_WINDOW", "1h")
    run = cli("gcd", *argv)
    assert run.code == exitcodes.USAGE
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "--undo-window 3600s needs --journal-prefix PREFIX" in lines[0]
    assert "e.g. --journal-prefix l0gc-audit/journal" in lines[0]
    assert not (tmp_path / "out" / "summary.json").exists()
    monkeypatch.delenv("L0GC_UNDO_WINDOW", raising=False)
    zero = [
        *argv[:7],
        "--undo-window",
        "0",
        "--bucket",
        "no-such-bucket-l0gc",
        "--endpoint-url",
        "http://127.0.0.1:9",
    ]
    assert "--undo-window" not in cli("gcd", *zero).err


def test_restore_and_explain_read_the_journal_dir_and_the_shipped_segments_both(
    s3_server: S3Server,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Issue 55: swept as the chart runs it (`--journal-dir` and `--journal-prefix`, the
    local segments deleted once shipped), the directory alone holds no record: restore
    says the segments were shipped and to give the prefix, explain still says the key is
    deleted (hidden behind a marker no record read names), never kept. Given both, as
    the sweepers run, explain finds l0gc's marker and restore brings every key back."""
    journal = tmp_path / "journal"
    client = client_for(s3_server.endpoint_url)
    bucket = make_bucket(client, versioned=True)
    eligible, live, _ = seed(client, bucket)
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))  # type: ignore[arg-type]
    shipped = ["--journal-prefix", "l0gc-journal"]
    run = cli(
        "gcd", *sweep(s3_server, bucket, etcd_server, namespace, str(journal), "1h"), *shipped
    )
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["markers_written"] == len(eligible)
    assert not list(journal.glob("journal-*.jsonl"))  # shipped, then deleted here
    store = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
        "--journal-dir",
        str(journal),
        *etcd_flags(etcd_server, namespace),
    ]
    hidden = min(eligible)

    def data(client: Any, bucket: str) -> set[str]:  # not the shipped journal
        return {key for key in current(client, bucket) if key.startswith(ROOT)}

    def explained(*extra: str) -> dict[str, Any]:
        run = cli("gcd", "explain", *store, *extra, "--json", hidden)
        assert run.code == 0
        (told,) = json.loads(run.out)["keys"]
        return dict(told)

    alone = explained()
    assert (alone["verdict"], alone["reason"]) == ("deleted", "hidden_by_delete_marker"), alone
    assert alone["restorable"] is None
    assert "--journal-prefix" in alone["summary"]
    both = explained(*shipped)
    assert (both["verdict"], both["reason"], both["restorable"]) == (
        "deleted",
        "journaled",
        True,
    ), both

    run = cli("gcd", "pause", "--reason", "restore", *etcd_flags(etcd_server, namespace))
    assert run.code == 0
    run = cli("gcd", "restore", *store, "--json")
    code, err = run.code, run.err
    assert code == exitcodes.USAGE
    assert "were shipped and deleted here: give --journal-prefix" in err, err
    assert data(client, bucket) == live
    run = cli("gcd", "restore", *store, *shipped, "--json")
    code, report = run.code, run.json
    assert code == exitcodes.OK, report
    assert report["restored"] == len(eligible)
    assert data(client, bucket) == live | set(eligible)
    for key, body in eligible.items():
        assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == body
