"""The deletion journal: records, rotation, the checks of `gcd journal verify`, and `show`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.journal.anchor import AnchorKeeper
from gcd.journal.chain import keys_digest
from gcd.journal.check import (
    FindingKind,
    check_history,
    check_records,
    find_key,
    history_reader,
)
from gcd.journal.records import JournalWriter, check_audit_prefix, read_journal
from gcd.observe.events import (
    BatchAttempt,
    BatchOutcome,
    DeleteBasis,
    DeletionNotRecorded,
)
from gcd.observe.metrics import SweeperMetrics
from gcd.rules.admission import SafetyGate
from gcd.rules.layout import KeyLayout
from gcd.service.daemon import Daemon, DaemonConfig
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from l0gc import exitcodes
from l0gc.contract.journal_anchor import JournalAnchor, anchor_key, anchors_prefix
from l0gc.contract.namespace import Publication
from l0gc.errors import ConfigError
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3, etcd_binary
from l0lab.testing.memory import MemoryObjectStore
from tests.binding import bind_sync
from tests.clirun import Cli

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)


def key(epoch: int, name: str = "x", prefix: int = 7) -> str:
    """A layout key of `epoch`."""
    return LAYOUT.format(prefix, epoch, name)


_requests = iter(range(1, 1_000_000))


def attempt(
    keys: list[str],
    *,
    m: int = 5,
    cluster: int = 8,
    revision: int | None = 40,
    batch: int = 1,
    number: int = 0,
) -> BatchAttempt:
    """An attempt to delete `keys` under M = `m` (each a request of its own)."""
    epochs = tuple(LAYOUT.parse(k).epoch for k in keys)  # type: ignore[union-attr]
    basis = DeleteBasis(m, cluster, revision, (("orders/3", m),))
    return BatchAttempt(basis, tuple(keys), epochs, number, batch, next(_requests))


def writer(
    directory: Path, namespace: str = "/l0gc/t", sweeper: str = "s-1", **options: object
) -> JournalWriter:
    """A journal writer for sweeper s-1 with a fixed clock."""
    clock = iter(float(t) for t in range(1000, 100000))
    return JournalWriter(
        directory,
        sweeper,
        namespace=namespace,
        bucket="b",
        root=ROOT,
        clock=lambda: next(clock),
        fsync=False,
        **options,
    )  # type: ignore[arg-type]


async def anchor_end(etcd: LocalEtcd, namespace: str, journal: JournalWriter) -> int:
    """Anchor `journal`'s end in etcd as a sweeper's keeper does; the seq anchored."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    try:
        await AnchorKeeper(journal, kv=kv, namespace=namespace).step()
    finally:
        await kv.close()
    end = journal.anchor()
    assert end is not None
    return end.seq


def write_batch(journal: JournalWriter, keys: list[str], **kw: object) -> None:
    """A before and an after record in which every key was deleted."""
    tried = attempt(keys, **kw)  # type: ignore[arg-type]
    journal.before(tried)
    journal.after(BatchOutcome(tried, deleted=tuple(keys)))


# -- writing ----------------------------------------------------------------------------


def test_records_say_why_and_what_came_of_each_key(tmp_path: Path) -> None:
    """A before record carries M, revision, pinning, keys and digest; the after the outcome."""
    metrics = SweeperMetrics()
    journal = writer(tmp_path, metrics=metrics)
    tried = attempt([key(3, "a"), key(4, "b"), key(5, "c")])
    journal.before(tried)
    failed = ((key(4, "b"), "AccessDenied"),)
    journal.after(BatchOutcome(tried, deleted=(key(3, "a"),), failed=failed))
    journal.close()
    lines = [json.loads(line) for line in journal.closed_segments[0].read_text().splitlines()]
    header, before, after = lines
    assert (header["type"], header["namespace"]) == ("segment", "/l0gc/t")
    assert (before["safe_epoch"], before["revision"], before["cluster_epoch"]) == (5, 40, 8)
    assert before["pinning"] == [["orders/3", 5]]
    assert (before["count"], before["epochs"]) == (3, [3, 4, 5])
    assert before["digest"] == keys_digest(before["keys"])
    assert (before["first"], before["last"]) == (key(3, "a"), key(5, "c"))
    assert after["deleted"] == [key(3, "a")]
    assert after["failed"] == [[key(4, "b"), "AccessDenied"]]
    assert after["unanswered"] == [key(5, "c")]
    assert [line["seq"] for line in lines] == [1, 2, 3]
    assert metrics.journal_records._value.get() == 3


def test_segments_rotate_by_size_and_the_chain_spans_them(tmp_path: Path) -> None:
    """Past max_bytes a new segment opens with a header; verify finds the chain intact."""
    metrics = SweeperMetrics()
    journal = writer(tmp_path, max_bytes=1024, metrics=metrics)
    for batch in range(6):
        write_batch(journal, [key(2, f"k{batch}-{i}") for i in range(4)], batch=batch)
    journal.close()
    assert len(journal.closed_segments) >= 3
    assert metrics.journal_segments._value.get() == len(journal.closed_segments)
    report = check_records(read_journal([tmp_path]), layout=LAYOUT)
    assert report.findings == []
    assert (report.attempts, report.keys_deleted) == (6, 24)


def test_a_journal_that_cannot_be_written_stops_the_delete(tmp_path: Path) -> None:
    """before() raises DeletionNotRecorded when the segment cannot be written."""
    metrics = SweeperMetrics()
    journal = writer(tmp_path, metrics=metrics)
    write_batch(journal, [key(1)])
    journal._file.close()  # the disk goes away under it
    with pytest.raises(DeletionNotRecorded, match="1 keys not deleted"):
        journal.before(attempt([key(2)]))
    assert metrics.journal_errors._value.get() == 1


def test_the_audit_prefix_must_lie_outside_the_root() -> None:
    """A prefix equal to, inside or around the root is refused."""
    assert check_audit_prefix("l0gc-audit/journal/", ROOT) == "l0gc-audit/journal"
    for bad in (ROOT, f"{ROOT}/journal", "level_zero", " "):
        with pytest.raises(ConfigError):
            check_audit_prefix(bad, ROOT)


# -- verifying the journal alone --------------------------------------------------------


def journal_lines(tmp_path: Path) -> list[str]:
    """A fresh two-batch journal, as lines."""
    journal = writer(tmp_path)
    write_batch(journal, [key(3, "a"), key(4, "b")], batch=1)
    write_batch(journal, [key(5, "c")], batch=2, m=6)
    journal.close()
    return journal.closed_segments[0].read_text().splitlines()


def rewrite(tmp_path: Path, lines: list[str]) -> None:
    """Replace the journal with `lines`."""
    (path,) = tmp_path.glob("journal-*.jsonl")
    path.write_text("\n".join(lines) + "\n")


def test_a_deletion_above_the_claimed_m_is_a_violation(tmp_path: Path) -> None:
    """A key whose epoch is above the record's M is reported with both numbers."""
    journal = writer(tmp_path)
    write_batch(journal, [key(3), key(9, "late")], m=5)
    journal.close()
    report = check_records(read_journal([tmp_path]), layout=LAYOUT)
    (finding,) = report.findings
    assert finding.kind is FindingKind.VIOLATION
    assert "has epoch 9, M = 5" in finding.message


def test_an_edited_or_removed_record_breaks_the_chain(tmp_path: Path) -> None:
    """Dropping a line shows missing records; editing one shows a broken chain."""
    lines = journal_lines(tmp_path)
    rewrite(tmp_path, [lines[0], *lines[2:]])
    messages = [f.message for f in check_records(read_journal([tmp_path])).findings]
    assert any("records 2..2 are missing" in m for m in messages)
    lines = journal_lines(tmp_path / "again")
    edited = json.loads(lines[2])
    edited["deleted"] = edited["deleted"][:1]
    rewrite(tmp_path / "again", [*lines[:2], json.dumps(edited), *lines[3:]])
    report = check_records(read_journal([tmp_path / "again"]))
    assert [f.kind for f in report.findings] == [FindingKind.DAMAGE]
    assert "chain is broken" in report.findings[0].message


def test_m_going_backwards_in_one_sweeper_is_a_violation(tmp_path: Path) -> None:
    """A later request of the same sweeper under a lower M is reported."""
    journal = writer(tmp_path)
    write_batch(journal, [key(3)], m=6, batch=1)
    write_batch(journal, [key(2)], m=4, batch=2)
    journal.close()
    report = check_records(read_journal([tmp_path]))
    assert [f.kind for f in report.findings] == [FindingKind.VIOLATION]
    assert "M went backwards" in report.findings[0].message


def test_a_deleted_key_the_before_record_did_not_name_is_a_violation(tmp_path: Path) -> None:
    """An after record may only delete keys its before record named."""
    journal = writer(tmp_path)
    tried = attempt([key(3)])
    journal.before(tried)
    journal.after(BatchOutcome(tried, deleted=(key(3), key(4, "stray"))))
    journal.close()
    report = check_records(read_journal([tmp_path]))
    assert [f.kind for f in report.findings] == [FindingKind.VIOLATION]
    assert "not in the batch's before record" in report.findings[0].message


def test_garbage_lines_are_damage_not_a_crash(tmp_path: Path) -> None:
    """Undecodable, deeply nested or foreign lines are reported as damage."""
    lines = journal_lines(tmp_path)
    rewrite(tmp_path, [*lines, "{not json", "[" * 100_000, '{"v": 7}'])
    report = check_records(read_journal([tmp_path]))
    assert report.count(FindingKind.DAMAGE) == 3
    assert report.count(FindingKind.VIOLATION) == 0


def test_show_explains_every_attempt_on_a_key(tmp_path: Path) -> None:
    """find_key returns who tried, under which M and revision, and the outcome."""
    journal = writer(tmp_path)
    target = key(4, "b")
    first = attempt([key(3, "a"), target], batch=1)
    journal.before(first)
    journal.after(BatchOutcome(first, request_error="SlowDown"))
    retry = attempt([key(3, "a"), target], batch=1, number=1)
    journal.before(retry)
    journal.after(BatchOutcome(retry, deleted=(key(3, "a"), target)))
    journal.close()
    stories = find_key(read_journal([tmp_path]), target)
    assert [s.outcome for s in stories] == ["request failed (SlowDown), retried", "deleted"]
    assert (stories[1].sweeper, stories[1].safe_epoch, stories[1].revision) == ("s-1", 5, 40)
    assert stories[1].epoch == 4
    assert find_key(read_journal([tmp_path]), key(9, "never")) == []


# -- against etcd's history --------------------------------------------------------------


async def history_cluster(etcd: LocalEtcd, namespace: str) -> tuple[int, int]:
    """Cluster epoch 8 with M(p) = 5 at revision r1, then M(p) = 7 at r2."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    store = WatermarkStore(kv, namespace)
    try:
        await store.init_cluster_epoch(1)
        await store.register_partition("orders/3")
        owned = await store.acquire_ownership("orders/3", "p")
        for _ in range(7):
            await store.advance_cluster_epoch()
        await store.publish_one(Publication("orders/3", "p", owned.owner_epoch, 5))
        first = (await store.read_gc_view()).revision
        await store.publish_one(Publication("orders/3", "p", owned.owner_epoch, 7))
        return first, (await store.read_gc_view()).revision
    finally:
        await kv.close()


async def verify_against(etcd: LocalEtcd, namespace: str, directory: Path) -> list[str]:
    """check_history's findings as "kind: message"."""
    read = read_journal([directory])
    report = check_records(read, layout=LAYOUT)
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    try:
        await check_history(read, history_reader(kv, namespace), report)
    finally:
        await kv.close()
    return [f"{f.kind.value}: {f.message}" for f in report.findings]


@pytest.mark.integration
async def test_a_claimed_m_above_etcds_history_is_a_violation(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """M is recomputed at each claimed revision: 5 at r1 and 7 at r2; claiming 7 at r1 fails."""
    r1, r2 = await history_cluster(etcd_server, namespace)
    journal = writer(tmp_path)
    write_batch(journal, [key(5)], m=5, revision=r1, batch=1)
    write_batch(journal, [key(7)], m=7, revision=r2, batch=2)
    journal.close()
    assert await verify_against(etcd_server, namespace, tmp_path) == []
    lying = writer(tmp_path / "lying")
    write_batch(lying, [key(6)], m=7, revision=r1)
    lying.close()
    found = await verify_against(etcd_server, namespace, tmp_path / "lying")
    assert found == [f"violation: revision {r1}: claims M = 7, etcd gives M = 5"]


@pytest.mark.integration
async def test_a_compacted_revision_is_unverifiable_not_fine(
    etcd_private: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """Once etcd compacted the claimed revision, verify says it cannot check it."""
    r1, r2 = await history_cluster(etcd_private, namespace)
    journal = writer(tmp_path)
    write_batch(journal, [key(5)], m=5, revision=r1)
    journal.close()
    etcdctl = str(etcd_binary().with_name("etcdctl"))
    subprocess.run(
        [etcdctl, "--endpoints", f"http://{etcd_private.endpoint}", "compact", str(r2)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    found = await verify_against(etcd_private, namespace, tmp_path)
    assert found == [f"unverifiable: revision {r1}: compacted: etcd no longer holds this revision"]


@pytest.mark.integration
def test_gcd_journal_verify_and_show_exit_codes(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path, cli: Cli
) -> None:
    """verify exits 0 on a true journal and 1 on a lying one; show finds the key."""
    r1, _ = asyncio.run(history_cluster(etcd_server, namespace))
    journal = writer(tmp_path / "ok", namespace)
    write_batch(journal, [key(4, "z")], m=5, revision=r1)
    journal.close()
    asyncio.run(anchor_end(etcd_server, namespace, journal))
    common = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    run = cli("gcd", "journal", "verify", "--journal-dir", str(tmp_path / "ok"), *common)
    assert run.code == 0
    assert "journal verify: OK" in run.out
    lying = writer(tmp_path / "bad", namespace, "s-2")
    write_batch(lying, [key(6, "z")], m=6, revision=r1)
    lying.close()
    asyncio.run(anchor_end(etcd_server, namespace, lying))
    run = cli("gcd", "journal", "verify", "--journal-dir", str(tmp_path / "bad"), *common, "--json")
    code = run.code
    doc = json.loads(run.out)
    assert (code, doc["violations"], doc["ok"]) == (exitcodes.PARTIAL_FAILURE, 1, False)
    run = cli("gcd", "journal", "show", "--key", key(4, "z"), "--journal-dir", str(tmp_path / "ok"))
    assert run.code == 0
    out = run.out
    assert "deleted  by sweeper s-1" in out
    assert f"etcd revision {r1}" in out
    run = cli("gcd", "journal", "show", "--key", "nope", "--journal-dir", str(tmp_path / "ok"))
    assert run.code == 1


_JOURNAL_BEFORE_KIND = (
    '{"v":1,"type":"segment","sweeper":"s-old","seq":1,"at":1000.0,"prev":"","segment'
    '":1,"namespace":"/l0gc/old","bucket":"b","root":"level_zero/data","endpoint_url"'
    ":null}\n"
    '{"v":1,"type":"before","sweeper":"s-old","seq":2,"at":1000.0,"prev":"da7d40c3e34'
    '544317bc138d685116dc03fc9a85f023277306f1b8dc13595358f","request":1,"batch":1,"at'
    'tempt":0,"safe_epoch":5,"cluster_epoch":8,"revision":40,"override":false,"pinnin'
    'g":[["orders/3",5]],"count":2,"first":"level_zero/data/007/000000000000000003/a"'
    ',"last":"level_zero/data/007/000000000000000004/b","digest":"34d61e2815098e3d9f9'
    '7b50f8c6c73b3ef1d5daf9b28f11d3bf034be40b61ee8","keys":["level_zero/data/007/0000'
    '00000000000003/a","level_zero/data/007/000000000000000004/b"],"epochs":[3,4]}\n'
    '{"v":1,"type":"after","sweeper":"s-old","seq":3,"at":1001.0,"prev":"2203cd3d0db8'
    '20a54fdd762cef690da720d73d3a32997c93b6f80b7eaa9d496e","request":1,"batch":1,"att'
    'empt":0,"deleted":["level_zero/data/007/000000000000000003/a","level_zero/data/0'
    '07/000000000000000004/b"],"failed":[],"unanswered":[],"request_error":null}\n'
)
"""A segment as the writer wrote it before the header named the kind of store (git
main of 2026-11-28): sweeper s-old, namespace /l0gc/old, s3 bucket b, one batch."""


def test_a_journal_from_before_the_header_named_the_store_still_verifies_and_shows(
    tmp_path: Path, cli: Cli
) -> None:
    """On-disk compatibility: an older writer's segment (no "kind" in its header) reads
    clean (chain, digests, epochs), `gcd journal show` finds its keys, and `gcd journal
    verify` finds nothing wrong in it (exit 3 only because no etcd was given)."""
    directory = tmp_path / "old"
    directory.mkdir()
    (directory / "journal-s-old-000001.jsonl").write_text(_JOURNAL_BEFORE_KIND)
    read = read_journal([directory])
    (header,) = [r.doc for r in read.records if r.kind == "segment"]
    assert "kind" not in header
    report = check_records(read, layout=LAYOUT)
    assert (report.findings, report.keys_deleted) == ([], 2)
    run = cli("gcd", "journal", "show", "--key", key(4, "b"), "--journal-dir", str(directory))
    assert run.code == 0
    assert "deleted  by sweeper s-old" in run.out
    run = cli("gcd", "journal", "verify", "--journal-dir", str(directory), "--json")
    code = run.code
    doc = json.loads(run.out)
    assert (code, doc["violations"], doc["damage"], doc["keys_deleted"]) == (
        exitcodes.BLOCKED,
        0,
        0,
        2,
    )
    assert doc["verdict"].startswith("NOT FULLY CHECKED: nothing wrong in the journal itself")


def test_the_segment_header_names_the_storage_target(tmp_path: Path) -> None:
    """A writer given a target's kind records it beside bucket, root and endpoint (an
    Azure container at its account URL), and the journal still reads clean."""
    journal = JournalWriter(
        tmp_path,
        "s-az",
        namespace="/l0gc/t",
        bucket="l0c",
        root=ROOT,
        endpoint_url="https://acct.blob.core.windows.net",
        kind="azure",
        fsync=False,
    )
    write_batch(journal, [key(3, "a")])
    journal.close()
    read = read_journal([tmp_path])
    (header,) = [r.doc for r in read.records if r.kind == "segment"]
    assert {k: header[k] for k in ("bucket", "root", "endpoint_url", "kind")} == {
        "bucket": "l0c",
        "root": ROOT,
        "endpoint_url": "https://acct.blob.core.windows.net",
        "kind": "azure",
    }
    assert check_records(read, layout=LAYOUT).findings == []


# -- the deleter's sinks ---------------------------------------------------------------


class RefusingSink:
    """A sink whose disk is full: it refuses every attempt."""

    def before(self, attempt: BatchAttempt) -> None:
        """Refuse."""
        raise DeletionNotRecorded("disk full")

    def after(self, outcome: BatchOutcome) -> None:
        """Never reached."""
        raise AssertionError("after without before")


async def pinned_store() -> WatermarkStore:
    """Cluster epoch 8, one partition orders/3 at M(p) = 5, in memory."""
    store = WatermarkStore(MemoryKV(), "/l0gc/unit")
    await store.init_cluster_epoch(1)
    await store.register_partition("orders/3")
    owned = await store.acquire_ownership("orders/3", "p")
    for _ in range(7):
        await store.advance_cluster_epoch()
    await store.publish_one(Publication("orders/3", "p", owned.owner_epoch, 5))
    return store


async def test_a_sweeper_round_journals_every_request_with_its_admission(tmp_path: Path) -> None:
    """Each DeleteObjects request is recorded with M, revision and pinning, then its outcome."""
    store = await pinned_store()
    objects = MemoryObjectStore()
    for epoch in (2, 3, 5, 6):
        objects.put(key(epoch, f"e{epoch}"))
    journal = writer(tmp_path)
    sweeper = Sweeper(objects, RoundConfig(layout=LAYOUT, grace_s=0, batch_size=2), sinks=[journal])
    result = await run_round(sweeper, SafetyGate(), store)
    journal.close()
    assert result.summary.deleted == 3
    read = read_journal([tmp_path])
    report = check_records(read, layout=LAYOUT)
    assert (report.findings, report.keys_deleted, report.outcome_unknown) == ([], 3, 0)
    befores = [r.doc for r in read.records if r.kind == "before"]
    revision = (await store.read_gc_view()).revision
    assert {(d["safe_epoch"], d["cluster_epoch"], d["revision"]) for d in befores} == {
        (5, 8, revision)
    }
    assert befores[0]["pinning"] == [["orders/3", 5]]
    assert sorted(k for d in befores for k in d["keys"]) == sorted(
        key(e, f"e{e}") for e in (2, 3, 5)
    )


async def test_a_sink_that_cannot_record_stops_the_delete() -> None:
    """DeletionNotRecorded from a sink: no request is sent, the keys count as errors."""
    store = await pinned_store()
    objects = MemoryObjectStore()
    objects.put(key(2, "kept"))
    sweeper = Sweeper(objects, RoundConfig(layout=LAYOUT, grace_s=0), sinks=[RefusingSink()])
    result = await run_round(sweeper, SafetyGate(), store)
    assert (result.summary.deleted, result.summary.errors) == (0, 1)
    assert objects.keys() == {key(2, "kept")}


async def test_the_daemon_journals_the_revision_it_read(tmp_path: Path) -> None:
    """A daemon iteration hands its admission (revision, pinning) to the journal."""
    store = await pinned_store()
    objects = MemoryObjectStore()
    objects.put(key(4, "old"))
    journal = writer(tmp_path)
    sweeper = Sweeper(objects, RoundConfig(layout=LAYOUT, grace_s=0), sinks=[journal])
    await Daemon(sweeper, store, DaemonConfig()).run_once()
    journal.close()
    (before,) = [r.doc for r in read_journal([tmp_path]).records if r.kind == "before"]
    assert before["revision"] == (await store.read_gc_view()).revision
    assert (before["safe_epoch"], before["pinning"]) == (5, [["orders/3", 5]])


# -- gcd sweep with a journal, against real servers -------------------------------------


@pytest.mark.integration
def test_gcd_sweep_journals_ships_and_verifies(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    namespace: str,
    bucket: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """A real sweep writes the journal, ships it outside the root; verify passes both ways."""
    asyncio.run(history_cluster(etcd_server, namespace))  # M = 7 now
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, [key(e, f"o{e}") for e in (2, 6, 7, 9)], last_modified=old)
    journal_dir = tmp_path / "journal"
    common = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
    ]
    run = cli(
        "gcd",
        "sweep",
        *common,
        "--journal-dir",
        str(journal_dir),
        "--journal-prefix",
        "l0gc-audit/journal",
        "--journal-keep-local",
        "--shard-ttl",
        "2s",
        "--json",
    )  # the journal is kept locally, to verify the directory too
    assert run.code == 0
    assert json.loads(run.out)["deleted"] == 3
    assert s3_server.keys(bucket) & {key(e, f"o{e}") for e in (2, 6, 7, 9)} == {key(9, "o9")}
    shipped = [
        k
        for k in s3_server.keys(bucket)
        if k.startswith("l0gc-audit/journal/journal-") and k.endswith(".jsonl")
    ]
    assert len(shipped) == 1
    assert shipped[0] + ".idx" in s3_server.keys(bucket)  # its index, for `gcd explain`
    for source in (
        ["--journal-dir", str(journal_dir)],
        [
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--journal-prefix",
            "l0gc-audit/journal",
        ],
    ):
        run = cli(
            "gcd",
            "journal",
            "verify",
            *source,
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
            "--json",
        )
        assert run.code == 0
        doc = json.loads(run.out)
        assert (doc["keys_deleted"], doc["revisions_checked"], doc["findings"]) == (3, 1, [])
    # the end is anchored in etcd and in the audit prefix: removing the shipped segment shows
    (segment,) = journal_dir.glob("journal-*.jsonl")
    last_seq = json.loads(segment.read_bytes().splitlines()[-1])["seq"]
    stored = asyncio.run(etcd_anchors(etcd_server, namespace))
    assert [anchor.seq for anchor in stored.values()] == [last_seq]
    assert any(k.startswith("l0gc-audit/journal/anchor-") for k in s3_server.keys(bucket))
    s3_server._backend().get_bucket(bucket).keys.pop(shipped[0])
    run = cli(
        "gcd",
        "journal",
        "verify",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--journal-prefix",
        "l0gc-audit/journal",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
    )
    assert run.code == 1
    out = run.out
    assert "the audit prefix anchors its journal at record" in out
    assert "none of its records is here: its segments were deleted" in out


@pytest.mark.integration
def test_a_journal_prefix_inside_the_root_is_a_usage_error(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    namespace: str,
    bucket: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """--journal-prefix under --root exits 2 before anything is deleted."""
    asyncio.run(history_cluster(etcd_server, namespace))
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    s3_server.seed(bucket, [key(2, "kept")], last_modified=datetime.now(UTC) - timedelta(hours=2))
    run = cli(
        "gcd",
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--journal-dir",
        str(tmp_path),
        "--journal-prefix",
        f"{ROOT}/audit",
    )
    code = run.code
    assert code == exitcodes.USAGE
    assert "overlaps the swept root" in run.err
    assert key(2, "kept") in s3_server.keys(bucket)


async def etcd_anchors(etcd: LocalEtcd, namespace: str) -> dict[str, JournalAnchor]:
    """The journal anchors stored under `namespace`, by sweeper."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    try:
        items = (await kv.range_prefix(anchors_prefix(namespace))).items
    finally:
        await kv.close()
    return {a.sweeper: a for a in (JournalAnchor.decode(i.value, i.key) for i in items)}


# -- tampering: issue 25, finding 4 -------------------------------------------------------


def test_two_intact_records_swapped_in_a_segment_break_the_chain(tmp_path: Path) -> None:
    """The chain is checked in file order: swapping two whole records shows (it verified
    clean while records were sorted by seq first)."""
    lines = journal_lines(tmp_path)
    rewrite(tmp_path, [lines[0], lines[2], lines[1], *lines[3:]])
    report = check_records(read_journal([tmp_path]))
    assert report.count(FindingKind.DAMAGE) >= 1
    assert any("out of order" in f.message for f in report.findings)


def test_a_torn_last_line_is_a_torn_tail_not_damage(tmp_path: Path) -> None:
    """A crash mid-write leaves the last line short, without a newline: a torn tail. The
    same bytes in a segment that is not the sweeper's last are damage."""
    lines = journal_lines(tmp_path)
    (path,) = tmp_path.glob("journal-*.jsonl")
    path.write_bytes(("\n".join(lines) + "\n").encode() + lines[1].encode()[:40])
    report = check_records(read_journal([tmp_path]))
    assert [f.kind for f in report.findings] == [FindingKind.TORN_TAIL]
    assert "crash mid-write" in report.findings[0].message
    later = tmp_path / path.name.replace("000001", "000002")
    later.write_bytes(lines[0].encode() + b"\n")
    report = check_records(read_journal([tmp_path]))
    assert FindingKind.DAMAGE in [f.kind for f in report.findings]


def test_verify_of_an_empty_journal_directory_says_so(tmp_path: Path, cli: Cli) -> None:
    """No segments: exit 2 naming the directory (it verified OK, exit 0)."""
    run = cli("gcd", "journal", "verify", "--journal-dir", str(tmp_path))
    assert run.code == exitcodes.USAGE
    assert f"no journal segments (journal-*.jsonl) in {tmp_path}" in run.err
    assert "journal verify: OK" not in run.out


def test_verify_without_etcd_says_what_it_did_not_check(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --etcd: not a bare OK but what was not checked, exit 3 (it printed OK, exit 0)."""
    monkeypatch.delenv("L0GC_ETCD", raising=False)
    journal_lines(tmp_path)
    run = cli("gcd", "journal", "verify", "--journal-dir", str(tmp_path))
    code = run.code
    out = run.out
    assert code == exitcodes.BLOCKED
    assert "journal verify: NOT FULLY CHECKED" in out
    assert "NOT checked (no --etcd)" in out
    assert "the last segment or the last records removed would not show" in out
    assert "journal verify: OK" not in out


async def test_the_anchor_never_goes_back(tmp_path: Path) -> None:
    """The keeper's CAS: a stale writer of the same sweeper cannot lower the anchor."""
    kv = MemoryKV()
    newer = writer(tmp_path / "a")
    for batch in range(3):
        write_batch(newer, [key(3, f"n{batch}")], batch=batch)
    await AnchorKeeper(newer, kv=kv, namespace="/l0gc/t").step()
    older = writer(tmp_path / "b")
    write_batch(older, [key(3, "o")])
    newer.close()
    older.close()
    stale = AnchorKeeper(older, kv=kv, namespace="/l0gc/t")
    await stale.step()
    item = await kv.get(anchor_key("/l0gc/t", "s-1"))
    assert item is not None
    assert JournalAnchor.decode(item.value, "k").seq == 7
    assert stale.anchored == 0


def tampered(directory: Path, namespace: str, sweeper: str, revision: int) -> JournalWriter:
    """Six batches of sweeper `sweeper` over several segments, each record claiming M = 5
    at `revision` (true in `history_cluster`)."""
    journal = writer(directory, namespace, sweeper, max_bytes=1024)
    for batch in range(6):
        write_batch(
            journal,
            [key(4, f"{sweeper}-{batch}-{i}") for i in range(4)],
            m=5,
            revision=revision,
            batch=batch,
        )
    journal.close()
    assert len(journal.closed_segments) >= 3
    return journal


def rechain(segment: Path) -> None:
    """Edit the segment's first after record and recompute every later `prev`: a chain
    that verifies on its own (what an editor who knows the format would do)."""
    lines = segment.read_bytes().splitlines()
    first = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "after")
    out: list[bytes] = lines[:first]
    for line in lines[first:]:
        doc = json.loads(line)
        if len(out) == first:
            doc["deleted"] = doc["deleted"][:1]
        if out:
            doc["prev"] = hashlib.sha256(out[-1]).hexdigest()
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    segment.write_bytes(b"\n".join(out) + b"\n")


@pytest.mark.integration
def test_cutting_the_end_of_a_journal_shows_against_its_etcd_anchor(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path, cli: Cli
) -> None:
    """Each sweeper's end is anchored in etcd: the last segment deleted or the last
    complete records cut exit 1 (both verified OK before); a torn last line exits 0 as a
    torn tail (it was damage, exit 1)."""
    r1, _ = asyncio.run(history_cluster(etcd_server, namespace))
    journals = {
        case: tampered(tmp_path / case, namespace, f"s-{case}", r1)
        for case in ("intact", "segment", "cut", "torn", "rechained")
    }
    for journal in journals.values():
        asyncio.run(anchor_end(etcd_server, namespace, journal))
    journals["segment"].closed_segments[-1].unlink()
    last = journals["cut"].closed_segments[-1]
    last.write_bytes(b"".join(last.read_bytes().splitlines(keepends=True)[:-2]))
    torn = journals["torn"].closed_segments[-1]
    torn.write_bytes(torn.read_bytes() + b'{"v":1,"type":"before","sweeper":"s-torn","se')
    rechain(journals["rechained"].closed_segments[-1])
    assert check_records(read_journal([tmp_path / "rechained"])).findings == []  # chain alone

    def verify(case: str) -> tuple[int, str]:
        run = cli(
            "gcd",
            "journal",
            "verify",
            "--journal-dir",
            str(tmp_path / case),
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
        )
        return run.code, run.out

    code, out = verify("intact")
    assert (code, out.splitlines()[0]) == (exitcodes.OK, "journal verify: OK")
    for case in ("segment", "cut"):
        code, out = verify(case)
        assert code == exitcodes.PARTIAL_FAILURE, out
        assert f"sweeper s-{case}: the journal ends at record" in out
        assert "(the last segment or the last records were removed)" in out
    code, out = verify("rechained")
    assert code == exitcodes.PARTIAL_FAILURE, out
    assert "is not the one anchored in etcd (its digest differs): the journal was rewritten" in out
    code, out = verify("torn")
    assert code == exitcodes.OK, out
    assert out.splitlines()[0].startswith("journal verify: OK, with a torn tail")
    assert "torn tails 1" in out


@pytest.mark.integration
def test_verify_with_a_mistyped_namespace_says_nothing_is_stored_there(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path, cli: Cli
) -> None:
    """A namespace the journal does not name, or one with nothing in etcd, exits 2 and
    never suggests creating state (it reported violations advising `epoch advance`)."""
    r1, _ = asyncio.run(history_cluster(etcd_server, namespace))
    journal = tampered(tmp_path / "ok", namespace, "s-ok", r1)
    asyncio.run(anchor_end(etcd_server, namespace, journal))
    typo = namespace + "-typo"
    elsewhere = tampered(tmp_path / "typo", typo, "s-typo", r1)
    elsewhere.close()
    for directory, given, expected in (
        ("ok", typo, f"written by sweepers of '{namespace}': is --namespace right?"),
        ("typo", typo, f"nothing is stored under namespace '{typo}' in etcd"),
    ):
        run = cli(
            "gcd",
            "journal",
            "verify",
            "--journal-dir",
            str(tmp_path / directory),
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            given,
        )
        code = run.code
        assert code == exitcodes.USAGE
        assert expected in run.err
        assert "advance" not in run.out + run.err
        assert "VIOLATION" not in run.out
