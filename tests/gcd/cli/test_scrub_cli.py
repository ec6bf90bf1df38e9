"""`gcd scrub` against real etcd and a real S3 server (moto): a healthy namespace reports
nothing; a referenced key deleted behind l0gc's back, or by a journaled sweep, is missing
with the journal's answer; stranded and unparsable keys are reported; the daemon mode's
metrics say the same."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import boto3
import pytest

from gcd.cli.scrub import metrics_server, scrub_forever
from gcd.rules.layout import KeyLayout
from gcd.scrub.metrics import ScrubMetrics
from gcd.scrub.report import ScrubReport
from gcd.scrub.run import Scrubber, ScrubSettings
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.contract.references import References
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.clirun import Cli
from tests.gcd.cli.test_status import setup as setup_partitions

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
OLD = datetime.now(UTC) - timedelta(hours=3)


def key(epoch: int, name: str, prefix: int = 7) -> str:
    """A layout key of `epoch`."""
    return LAYOUT.format(prefix, epoch, name)


def reference(etcd: LocalEtcd, namespace: str, refs: dict[str, list[str]], m: int) -> None:
    """Each partition of `refs` (owned anew by 'pub', at M(p) `m`) references its keys
    at offset 1, as the publisher stores them for a writer that names its objects."""

    async def go() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            for name, keys in refs.items():
                owned = await store.acquire_ownership(name, "pub")
                await store.publish_one(
                    Publication(
                        name,
                        "pub",
                        owned.owner_epoch,
                        m,
                        references=References(((1, tuple(keys)),)),
                    )
                )
        finally:
            await kv.close()

    asyncio.run(go())


def record_m(etcd: LocalEtcd, namespace: str, m: int, at: float) -> None:
    """An entry of M's history, as a sweeper with an undo window writes it."""

    async def go() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        try:
            doc = json.dumps({"m": m, "at": at, "window_s": 3600.0}).encode()
            await kv.txn([], [Put(f"{namespace}/gc/m-history/{int(at * 1000):016d}", doc)])
        finally:
            await kv.close()

    asyncio.run(go())


def common(etcd: LocalEtcd, s3: LocalS3, bucket: str, namespace: str) -> list[str]:
    """The flags every run here takes."""
    return [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3.endpoint_url,
        "--etcd",
        etcd.endpoint,
        "--namespace",
        namespace,
        "--root",
        ROOT,
        "--log-level",
        "warning",
    ]


@pytest.mark.integration
def test_a_healthy_namespace_reports_nothing_and_exits_0(
    etcd_server: LocalEtcd, s3_server: LocalS3, bucket: str, namespace: str, cli: Cli
) -> None:
    """Every referenced key present, nothing old, nothing odd: clean, one HEAD per
    referenced key, exit 0, in text and in JSON."""
    setup_partitions(etcd_server, namespace, {"a/0": 8, "a/1": 8}, cluster=10)
    refs = {"a/0": [key(9, "x"), key(9, "y")], "a/1": [key(10, "z")]}
    reference(etcd_server, namespace, refs, 8)
    s3_server.seed(bucket, [k for keys in refs.values() for k in keys])
    record_m(etcd_server, namespace, 8, time.time() - 7200)
    flags = common(etcd_server, s3_server, bucket, namespace)
    run = cli("gcd", "scrub", *flags, "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["version"] == 1
    assert doc["healthy"] is True
    assert doc["references"]["keys"] == doc["references"]["present"] == 3
    assert doc["requests"]["head"] == 3
    assert doc["missing"] == doc["unknown"] == doc["silent_partitions"] == []
    assert (doc["stranded"]["checked"], doc["stranded"]["count"]) == (True, 0)
    assert (doc["unparsable"]["checked"], doc["unparsable"]["count"]) == (True, 0)
    assert doc["uncovered_prefixes"]["applicable"] is False
    text = cli("gcd", "scrub", *flags)
    assert text.code == 0
    assert text.out.startswith("gcd scrub: clean")
    for word in ("MISSING", "UNKNOWN", "STRANDED", "UNPARSABLE", "SILENT"):
        assert word not in text.out


@pytest.mark.integration
def test_a_key_deleted_behind_l0gcs_back_is_absent_from_the_journal(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """A plain boto3 delete of a referenced key: missing, absent from the journal
    (which holds a sweep's records of other keys), exit 1."""
    setup_partitions(etcd_server, namespace, {"a/0": 3}, cluster=10)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    s3_server.seed(bucket, [key(2, "garbage")], last_modified=OLD)
    flags = common(etcd_server, s3_server, bucket, namespace)
    journal = ["--journal-dir", str(tmp_path / "journal")]
    swept = cli("gcd", "sweep", *flags, *journal, "--shard-ttl", "1s", "--json")
    assert swept.code == 0, swept.err
    live, lost = key(9, "live"), key(9, "lost")
    reference(etcd_server, namespace, {"a/0": [live, lost]}, 3)
    s3_server.seed(bucket, [live, lost])
    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    client.delete_object(Bucket=bucket, Key=lost)
    run = cli("gcd", "scrub", *flags, *journal, "--json")
    assert run.code == 1, run.err
    doc = json.loads(run.out)
    assert [(m["key"], m["cause"], m["partition"]) for m in doc["missing"]] == [
        (lost, "absent_from_journal", "a/0")
    ]
    assert doc["missing"][0]["deletion"] is None
    assert doc["references"]["present"] == 1
    assert doc["journal"]["searched"] is True
    text = cli("gcd", "scrub", *flags, *journal)
    assert text.code == 1
    assert f"MISSING     {lost}" in text.out
    assert "ABSENT FROM THE JOURNAL" in text.out


@pytest.mark.integration
def test_a_key_a_journaled_sweep_deleted_is_deleted_by_l0gc_with_its_round(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """A sweep deletes a key at or below M (nothing referenced it then); a writer then
    references it (M was wrong): scrub says l0gc deleted it, with the round, the time,
    M then and the sender, and exits 1."""
    setup_partitions(etcd_server, namespace, {"a/0": 3}, cluster=10)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    victim = key(2, "victim")
    s3_server.seed(bucket, [victim], last_modified=OLD)
    flags = common(etcd_server, s3_server, bucket, namespace)
    journal = ["--journal-dir", str(tmp_path / "journal")]
    before = time.time()
    swept = cli("gcd", "sweep", *flags, *journal, "--shard-ttl", "1s", "--json")
    assert swept.code == 0, swept.err
    assert json.loads(swept.out.splitlines()[-1])["deleted"] == 1
    reference(etcd_server, namespace, {"a/0": [victim]}, 3)
    run = cli("gcd", "scrub", *flags, *journal, "--json")
    assert run.code == 1, run.err
    [missing] = json.loads(run.out)["missing"]
    assert (missing["key"], missing["cause"], missing["epoch"]) == (victim, "deleted_by_l0gc", 2)
    deletion = missing["deletion"]
    assert deletion["round"]
    assert deletion["safe_epoch"] == 3
    assert deletion["outcome"] == "deleted"
    assert before <= deletion["at"] <= time.time()
    assert deletion["sender"].startswith("sweeper ")
    text = cli("gcd", "scrub", *flags, *journal)
    assert "DELETED BY L0GC: deleted by sweeper" in text.out
    assert f"round {deletion['round']}" in text.out
    without = cli("gcd", "scrub", *flags, "--json")
    assert json.loads(without.out)["missing"][0]["cause"] == "journal_not_read"


@pytest.mark.integration
def test_stranded_and_unparsable_keys_are_reported(
    etcd_server: LocalEtcd, s3_server: LocalS3, bucket: str, namespace: str, cli: Cli
) -> None:
    """M was 5 two hours ago (M's history): keys of epoch <= 5 written three hours ago
    and still listed are stranded (count, bytes, lowest epochs first); a young key of an
    old epoch and a key above M are not; a key the layout does not parse is reported;
    the root's claim is neither. Nothing is missing: exit 0."""
    setup_partitions(etcd_server, namespace, {"a/0": 8}, cluster=10)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    record_m(etcd_server, namespace, 5, time.time() - 7200)
    stranded = [key(4, "s1"), key(2, "s2", prefix=900)]
    s3_server.seed(bucket, stranded, last_modified=OLD, body=b"12345")
    s3_server.seed(bucket, [key(7, "above")], last_modified=OLD)
    s3_server.seed(bucket, [key(3, "young")])
    odd = f"{ROOT}/007/not-an-epoch/x"
    s3_server.seed(bucket, [odd], last_modified=OLD)
    flags = common(etcd_server, s3_server, bucket, namespace)
    run = cli("gcd", "scrub", *flags, "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["healthy"] is False
    found = doc["stranded"]
    assert (found["count"], found["bytes"]) == (2, 10)
    assert [k["key"] for k in found["oldest"]] == [stranded[1], stranded[0]]
    assert found["rule"]["threshold_epoch"] == 5
    assert (doc["unparsable"]["count"], doc["unparsable"]["examples"][0]["key"]) == (1, odd)
    text = cli("gcd", "scrub", *flags).out
    assert "STRANDED    2 keys" in text
    assert "UNPARSABLE  1 keys" in text
    assert odd in text
    no_history = cli("gcd", "scrub", *flags, "--stranded-after", "3h", "--json")
    assert no_history.code == 0
    assert json.loads(no_history.out)["stranded"]["checked"] is False


@pytest.mark.integration
async def test_the_daemon_mode_exports_the_findings_as_metrics(
    etcd_server: LocalEtcd, s3_server: LocalS3, bucket: str, namespace: str
) -> None:
    """`--every`'s loop with /metrics: one run's missing key, requests and time are on
    the scrape."""
    await asyncio.to_thread(setup_partitions, etcd_server, namespace, {"a/0": 3}, cluster=10)
    lost, live = key(9, "lost"), key(9, "live")
    await asyncio.to_thread(reference, etcd_server, namespace, {"a/0": [live, lost]}, 3)
    s3_server.seed(bucket, [live])
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    settings = S3Settings(bucket=bucket, endpoint_url=s3_server.endpoint_url, region="us-east-1")
    reports: list[ScrubReport] = []
    stop = asyncio.Event()

    def seen(report: ScrubReport) -> None:
        reports.append(report)
        stop.set()

    metrics = ScrubMetrics()
    try:
        async with S3ObjectStore.open(settings) as objects:
            scrubber = Scrubber(
                WatermarkStore(kv, namespace),
                objects,
                LAYOUT,
                store_name="s3",
                settings=ScrubSettings(listing=False),
            )
            async with metrics_server(metrics.registry, "127.0.0.1", 0) as port:
                await scrub_forever(scrubber, 3600.0, metrics, stop, seen)
                url = f"http://127.0.0.1:{port}/metrics"
                async with aiohttp.ClientSession() as session, session.get(url) as answer:
                    assert answer.status == 200
                    scrape = await answer.text()
    finally:
        await kv.close()
    assert len(reports) == 1
    assert 'l0gc_scrub_missing_keys{cause="journal_not_read"} 1.0' in scrape
    assert 'l0gc_scrub_missing_keys{cause="deleted_by_l0gc"} 0.0' in scrape
    assert 'l0gc_scrub_requests_total{kind="head"} 2.0' in scrape
    assert 'l0gc_scrub_requests_total{kind="list"} 1.0' in scrape
    assert "l0gc_scrub_unknown_keys 0.0" in scrape
    [stamp] = [
        float(line.split()[1])
        for line in scrape.splitlines()
        if line.startswith("l0gc_scrub_last_run_timestamp_seconds ")
    ]
    assert stamp == pytest.approx(reports[0].at)
