"""`gcd.service.runtime`: a sweep assembled in one place, on ONE etcd connection.

The connections are counted from outside: a loopback TCP proxy in front of a real etcd
counts what it accepts, while `gcd sweep` and `gcd daemon` run against a real S3 server
with every etcd user switched on (watermark source, shard announcement and usage record,
the journal's anchors, M's history for the undo window).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gcd.rules.layout import KeyLayout
from gcd.service.reader import open_reader
from gcd.service.runtime import JournalSettings, SweepRuntime, SweepSettings
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig
from gcd.sweep.usage import usage_key
from gcd.undo.mhistory import history_prefix
from l0gc import exitcodes
from l0gc.contract.journal_anchor import anchors_prefix
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd, LocalS3, free_port
from tests.clirun import Cli
from tests.etcdproxy import CountingProxy
from tests.gcd.cli.test_sweep_cli import prepare_etcd, seed, sweep_args
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
REPO = Path(__file__).resolve().parents[3]


async def _etcd_keys(etcd: LocalEtcd, prefix: str) -> list[str]:
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace="/l0gc/reader"))
    try:
        return [item.key for item in (await kv.range_prefix(prefix)).items]
    finally:
        await kv.close()


@pytest.mark.parametrize("undo", [False, True], ids=["journal", "journal-and-undo-window"])
def test_one_sweep_round_opens_one_etcd_connection(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
    undo: bool,
) -> None:
    """`gcd sweep` with a journal (and an undo window): every etcd user of a round (the
    namespace check, M, the shard announcement, the usage record, the journal's anchor,
    M's history) on exactly one etcd connection."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    garbage = seed(s3_server, bucket)
    keys = s3_server.keys(bucket)
    extra = ["--undo-window", "1h"] if undo else []
    with CountingProxy(etcd_server.endpoint) as proxy:
        run = cli(
            "gcd",
            *sweep_args(
                s3_server,
                bucket,
                "--etcd",
                proxy.endpoint,
                "--namespace",
                namespace,
                "--journal-dir",
                str(tmp_path / "journal"),
                *extra,
            ),
        )
        code, summary = run.code, run.json
        accepted = proxy.accepted
    assert code == exitcodes.OK, summary
    assert (summary["safe_epoch"], summary["blocked_reason"]) == (5, None)
    assert accepted == 1
    usage = asyncio.run(_etcd_keys(etcd_server, usage_key(namespace, 0, 1)))
    anchors = asyncio.run(_etcd_keys(etcd_server, anchors_prefix(namespace)))
    history = asyncio.run(_etcd_keys(etcd_server, history_prefix(namespace)))
    assert usage == [usage_key(namespace, 0, 1)]
    if undo:
        # Unversioned: the window deletes only what was garbage all along it, by M's
        # history, which this first round starts; no deletion, no journal record.
        assert (summary["eligible"], summary["deleted"]) == (0, 0)
        assert s3_server.keys(bucket) == keys
        assert (len(history), anchors) == (1, [])
    else:
        assert summary["deleted"] == len(garbage)
        assert keys - s3_server.keys(bucket) == garbage
        assert (history, len(anchors)) == ([], 1)
        # The journal records the target the namespace is bound to (its kind too).
        (segment,) = (tmp_path / "journal").glob("journal-*.jsonl")
        header = json.loads(segment.read_text().splitlines()[0])
        target = S3Settings(bucket, s3_server.endpoint_url).target(ROOT)
        assert {k: header[k] for k in ("kind", "bucket", "root", "endpoint_url")} == {
            "kind": "s3",
            "bucket": bucket,
            "root": ROOT,
            "endpoint_url": target.endpoint_url,
        }


def test_a_namespace_with_nothing_stored_is_refused_on_that_one_connection(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """The namespace check is the runtime's first use of its client: exit 2 naming the
    namespace, nothing written there, one connection."""
    seed(s3_server, bucket)
    with CountingProxy(etcd_server.endpoint) as proxy:
        run = cli(
            "gcd",
            *sweep_args(s3_server, bucket, "--etcd", proxy.endpoint, "--namespace", namespace),
        )
        code = run.code
        accepted = proxy.accepted
    assert code == exitcodes.USAGE
    assert f"nothing is stored under {namespace}/" in run.err
    assert accepted == 1
    assert asyncio.run(_etcd_keys(etcd_server, namespace + "/")) == []


async def test_the_daemon_sweeps_on_one_etcd_connection_and_stops_on_sigterm(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
) -> None:
    """`python -m gcd daemon` through the counting proxy: it deletes the garbage (M followed
    with a watch, the journal anchored), is ready, and exits 0 on SIGTERM, having opened
    one etcd connection."""
    await asyncio.to_thread(prepare_etcd, etcd_server, namespace, bound_to=(s3_server, bucket))
    garbage = await asyncio.to_thread(seed, s3_server, bucket)
    port = free_port()
    log_path = tmp_path / "daemon.log"
    with CountingProxy(etcd_server.endpoint) as proxy:
        command = [
            sys.executable,
            "-m",
            "gcd",
            "daemon",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--etcd",
            proxy.endpoint,
            "--namespace",
            namespace,
            "--grace",
            "1m",
            "--interval",
            "0.05s",
            "--idle-interval",
            "0.1s",
            "--journal-dir",
            str(tmp_path / "journal"),
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(port),
        ]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            async with aiohttp.ClientSession() as http:

                async def swept() -> bool:
                    assert proc.poll() is None, log_path.read_text()[-3000:]
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
                        ready = resp.status == 200
                    return ready and not garbage & s3_server.keys(bucket)

                await wait_until(
                    swept,
                    timeout_s=60,
                    what="the daemon deleted the garbage",
                    ignore=(aiohttp.ClientError,),
                    detail=lambda: log_path.read_text()[-3000:],
                )
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        accepted = proxy.accepted
    assert code == exitcodes.OK, log_path.read_text()[-3000:]
    assert accepted == 1
    assert len(await _etcd_keys(etcd_server, anchors_prefix(namespace))) == 1
    # M followed and checked every 30 reads, at most once per 30 x --interval (0.05 s)
    started = next(
        json.loads(ln) for ln in log_path.read_text().splitlines() if '"daemon.started"' in ln
    )
    assert (started["verify_m_every"], started["check_interval_s"]) == (30, 1.5), started


async def test_the_runtime_closes_what_it_opened_when_a_piece_fails(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A journal flag mistake found while opening (a retention without a prefix) raises
    ConfigError naming the flag; nothing is announced in etcd (the announcement comes last)."""
    await asyncio.to_thread(prepare_etcd, etcd_server, namespace, bound_to=(s3_server, bucket))
    settings = SweepSettings(
        RoundConfig(layout=LAYOUT),
        S3Settings(bucket, s3_server.endpoint_url, "us-east-1"),
        EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace),
        journal=JournalSettings(directory=str(tmp_path / "j"), retention_s=3600.0),
    )
    with pytest.raises(ConfigError, match="--journal-retention needs --journal-prefix"):
        async with SweepRuntime.open(settings):
            pytest.fail("the runtime opened with a retention and no prefix")
    assert await _etcd_keys(etcd_server, f"{namespace}/sweepers/") == []


async def test_a_reader_reads_m_through_the_binding(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
) -> None:
    """`open_reader` (gcd explain, the Spark driver): M through the binding of the target
    the store settings name; a store the namespace is not bound to is refused."""
    await asyncio.to_thread(prepare_etcd, etcd_server, namespace, bound_to=(s3_server, bucket))
    etcd = EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace)
    bound = S3Settings(bucket, s3_server.endpoint_url, "us-east-1")
    async with open_reader(etcd, bound, ROOT) as reader:
        source = reader.source
        assert source is not None
        assert source.target == bound.target(ROOT)
        read = await source.read_safe_epoch()
    assert (read.safe_epoch, read.refused_reason) == (5, None)
    async with open_reader(etcd, bound, "level_zero/other") as reader:
        source = reader.source
        assert source is not None
        refused = await source.read_safe_epoch()
    assert refused.refused_reason is not None
    assert "level_zero/other" in refused.refused_reason
