"""`gcd explain` against real etcd and a real S3 server (moto): each key gets the verdict
the sweeper's rule gives it, with the facts behind it (issue 39's "Show")."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.rules.layout import KeyLayout
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.clirun import Cli, CliResult
from tests.gcd.cli.test_status import setup as setup_partitions

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)


def key(epoch: int, name: str, prefix: int = 7) -> str:
    """A layout key of `epoch`."""
    return LAYOUT.format(prefix, epoch, name)


def by_key(run: CliResult) -> dict[str, dict[str, object]]:
    """A `gcd explain --json` run that exited 0: each key's object by key."""
    assert run.code == 0
    doc = json.loads(run.out)
    assert doc["version"] == 1
    return {item["key"]: item for item in doc["keys"]}


@pytest.mark.integration
def test_each_key_gets_the_verdict_the_rule_gives_it(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """Two partitions pin M at different heights (a/0 at 3, a/1 at 6, a/2 ahead at 9):
    a swept key is `deleted` (found in the journal, with the time), an eligible one
    `deletable`, a kept one names exactly the partitions below its epoch, a young one is
    in the grace period, keys outside the root or not parsed are `never`, and a key
    never written is `absent`, with the segments searched."""
    setup_partitions(etcd_server, namespace, {"a/0": 3, "a/1": 6, "a/2": 9}, cluster=10)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    old = datetime.now(UTC) - timedelta(hours=2)
    swept = key(2, "swept")
    s3_server.seed(bucket, [swept], last_modified=old)
    journal = tmp_path / "journal"
    common = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--root",
        ROOT,
        "--journal-dir",
        str(journal),
    ]
    before_sweep = datetime.now(UTC).timestamp()
    run = cli("gcd", "sweep", *common, "--shard-ttl", "1s", "--json", "--log-level", "warning")
    assert run.code == 0
    assert json.loads(run.out.splitlines()[-1])["deleted"] == 1
    assert list(journal.glob("journal-*.jsonl.idx")), "the closed segment has its index"
    eligible, waits_a, waits_ab, young = key(3, "e"), key(5, "w1"), key(7, "w2"), key(1, "y")
    s3_server.seed(bucket, [eligible, waits_a, waits_ab], last_modified=old)
    s3_server.seed(bucket, [young], last_modified=datetime.now(UTC))
    outside, unparsable, never_written = "other/x", f"{ROOT}/007/notanepoch/x", key(1, "none")
    keys = [swept, eligible, waits_a, waits_ab, young, outside, unparsable, never_written]
    got = by_key(cli("gcd", "explain", *common, "--json", *keys))
    assert {k: got[k]["verdict"] for k in keys} == {
        swept: "deleted",
        eligible: "deletable",
        waits_a: "kept",
        waits_ab: "kept",
        young: "kept",
        outside: "never",
        unparsable: "never",
        never_written: "absent",
    }
    assert [p["partition"] for p in got[waits_a]["waiting_on"]] == ["a/0"]  # type: ignore[union-attr]
    assert [p["partition"] for p in got[waits_ab]["waiting_on"]] == ["a/0", "a/1"]  # type: ignore[union-attr]
    first = got[waits_a]["waiting_on"][0]  # type: ignore[index]
    assert (first["watermark"], first["owner"]) == (3, "pub")
    assert got[waits_a]["estimate"]["estimate"] is True  # type: ignore[index]
    assert (got[young]["reason"], got[young]["grace_s"]) == ("grace_period", 600.0)
    assert got[young]["grace_ends"] > datetime.now(UTC).timestamp() + 500  # type: ignore[operator]
    assert got[outside]["reason"] == "outside_root"
    assert got[unparsable]["reason"] == "unparsable"
    deleted = got[swept]["deleted"]
    assert deleted["outcome"] == "deleted"  # type: ignore[index]
    assert (deleted["safe_epoch"], deleted["epoch"]) == (3, 2)  # type: ignore[index]
    assert before_sweep <= deleted["at"] <= datetime.now(UTC).timestamp()  # type: ignore[index,operator]
    searched = got[never_written]["journal_searched"]
    assert searched["segments_total"] == 1  # type: ignore[index]
    # the same answers for keys from a file and in words
    listing = tmp_path / "keys.txt"
    listing.write_text("\n".join(keys) + "\n")
    run = cli("gcd", "explain", *common, "--from-file", str(listing))
    assert run.code == 0
    text = run.out
    assert f"{waits_ab}: KEPT" in text
    assert "  waiting on a/0  M(p) 3  owner pub" in text
    assert "  waiting on a/1  M(p) 6  owner pub" in text
    assert "a/2" not in text
    assert f"{swept}: DELETED" in text
    assert f"{outside}: NEVER" in text


@pytest.mark.integration
def test_one_hostile_key_is_unknown_and_every_other_key_is_answered(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    cli: Cli,
) -> None:
    """Issue 51 (5): a key holding control characters (moto echoes StartAfter unescaped,
    so the answer to its LIST is not XML) failed `gcd explain` for the whole batch. Now
    that key alone is `unknown`, saying why, and every other key gets its verdict."""
    setup_partitions(etcd_server, namespace, {"a/0": 5}, cluster=10)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    old = datetime.now(UTC) - timedelta(hours=2)
    hostile, before, after = key(3, "bad\x01\x02name"), key(3, "aaa"), key(3, "zzz")
    s3_server.seed(bucket, [before, after], last_modified=old)
    common = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--root",
        ROOT,
    ]
    got = by_key(cli("gcd", "explain", *common, "--json", before, hostile, after, key(4, "none")))
    assert got[hostile]["verdict"] == "unknown", got[hostile]
    assert got[hostile]["reason"] == "store_unreadable"
    assert (got[before]["verdict"], got[after]["verdict"]) == ("deletable", "deletable")
    assert got[key(4, "none")]["verdict"] == "absent"


@pytest.mark.integration
def test_paused_gc_keeps_an_eligible_key_and_says_why(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    cli: Cli,
) -> None:
    """While GC is paused an eligible key is kept, with the pause's reason."""
    setup_partitions(etcd_server, namespace, {"a/0": 5}, cluster=8)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    s3_server.seed(bucket, [key(2, "p")], last_modified=datetime.now(UTC) - timedelta(hours=1))
    common = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--root",
        ROOT,
    ]
    run = cli(
        "gcd",
        "pause",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--reason",
        "incident 4711",
    )
    assert run.code == 0
    got = by_key(cli("gcd", "explain", *common, "--json", key(2, "p")))[key(2, "p")]
    assert (got["verdict"], got["reason"]) == ("kept", "paused")
    assert "incident 4711" in str(got["refused"])


def test_no_key_is_a_usage_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without keys (and an empty stdin) explain exits 2 saying how to give keys."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    run = cli("gcd", "explain", "--bucket", "b", "--safe-epoch", "3")
    assert run.code == 2
    assert "no key to explain" in run.err


@pytest.mark.integration
def test_status_names_the_partition_pinned_longest_and_why_explains_the_oldest_kept_key(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    cli: Cli,
) -> None:
    """`gcd status` says which partition holds M back (a/0, since its publish, owner pub);
    `--why` explains the key of the lowest epoch above M, naming a/0 as what it waits on."""
    setup_partitions(etcd_server, namespace, {"a/0": 3, "a/1": 6}, cluster=10)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(
        bucket, [key(2, "gone"), key(7, "later"), key(5, "oldest", prefix=900)], last_modified=old
    )
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    run = cli("gcd", "status", *etcd, "--json", "--why")
    assert run.code == 0
    doc = json.loads(run.out)
    held = doc["pinned_longest"]
    assert (held["partition"], held["watermark"], held["owner"]) == ("a/0", 3, "pub")
    assert held["since"] <= datetime.now(UTC).timestamp()
    assert (doc["why"]["key"], doc["why"]["verdict"]) == (key(5, "oldest", prefix=900), "kept")
    assert [p["partition"] for p in doc["why"]["waiting_on"]] == ["a/0"]
    run = cli("gcd", "status", *etcd, "--why")
    assert run.code == 0
    text = run.out
    assert "pinned longest a/0  M(p) 3 since " in text
    assert f"{key(5, 'oldest', prefix=900)}: KEPT" in text


def test_help_lists_only_the_flags_explain_uses_and_accepts_the_others(
    cli: Cli,
) -> None:
    """Issue 55: `gcd explain --help` listed every sweeper flag (batch size, shards,
    prices...) and described --journal-prefix as the sweeper's upload. They are still
    accepted (a config file or environment shared with the sweepers), not listed."""
    run = cli("gcd", "explain", "--help")
    assert run.code == 0
    text = run.out
    for flag in (
        "--batch-size",
        "--shard-index",
        "--price-list",
        "--undo-window",
        "--journal-max-bytes",
        "--max-deletes",
    ):
        assert flag not in text, flag
    for flag in ("--bucket", "--root", "--grace", "--safe-epoch", "--journal-dir", "--etcd"):
        assert flag in text, flag
    assert "read the journal segments the sweepers shipped" in text
    assert "also upload each closed journal segment" not in text
    run = cli(
        "gcd",
        "explain",
        "--batch-size",
        "5",
        "--shard-count",
        "2",
        "--from-file",
        "/nonexistent/keys",
    )
    code = run.code
    assert code == 2
    assert "--from-file /nonexistent/keys: cannot be read" in run.err
