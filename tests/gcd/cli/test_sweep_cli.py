"""`gcd sweep` end to end (real S3 server and etcd), and the CLI plumbing it rests on.

Tests gcd/cli/sweep.py: test_sweep.py once tests/gcd/{sweep,storage} stop importing it."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.cli import sweep as sweep_module
from gcd.cli.options import ROUND_OPTIONS, resolve
from gcd.cli.output import ProgressLine
from gcd.observe.report import RoundCounts
from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0gc.contract.kv import Delete, Put
from l0gc.contract.namespace import Publication
from l0gc.contract.spark_job import SparkJob, spark_job_key
from l0gc.errors import ConfigError, StorageError, WatermarkUnavailable
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0gc.logs import redact
from l0gc.options import CommandParser, add_options, duration
from l0lab.testing.faultproxy import FaultConfig, ThreadedFaultProxy
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.clirun import Cli

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
OLD = datetime.now(UTC) - timedelta(hours=2)
SUMMARY_FIELDS = [
    "version",
    "safe_epoch",
    "cluster_epoch",
    "dry_run",
    "listed",
    "eligible",
    "deleted",
    "deleted_bytes",
    "skipped_not_eligible",
    "skipped_young",
    "unparsable",
    "errors",
    "skipped_paused",
    "unsafe_keys",
    "list_requests",
    "delete_requests",
    "duration_s",
    "blocked_reason",
    "deleted_versions",
    "deleted_markers",
    "locked",
    "locked_reasons",
    "locked_earliest_retain_until",
    "store",
    "skipped_nested",
    "nested_roots",
    "unlistable_prefixes",
    "poison_keys",
    "deadline_exceeded",
    "round",
    "markers_written",
    "versions_reclaimed",
    "undo",
    "reference_conflicts",
    "conflicting_keys",
    "cost",
]


def prepare_etcd(
    etcd: LocalEtcd,
    namespace: str,
    *,
    safe: int = 5,
    cluster: int = 8,
    malformed: bool = False,
    paused: str | None = None,
    bound_to: tuple[LocalS3, str] | None,
) -> None:
    """Cluster epoch `cluster`, one partition at M(p) = `safe`, optional faults; bound to
    `bound_to` (server, bucket) unless it is None."""
    if bound_to is not None:
        bind_sync(etcd.endpoint, namespace, bound_to[0].endpoint_url, bound_to[1], ROOT)

    async def setup() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(1)
            await store.register_partition("t/0")
            owned = await store.acquire_ownership("t/0", "p")
            for _ in range(cluster - 1):
                await store.advance_cluster_epoch()
            await store.publish_one(Publication("t/0", "p", owned.owner_epoch, safe))
            if malformed:
                await kv.txn([], [Put(store.partition_key("t/broken"), b"not json")])
            if paused is not None:
                await store.set_paused(paused)
        finally:
            await kv.close()

    asyncio.run(setup())


def seed(s3: LocalS3, bucket: str) -> set[str]:
    """Garbage at epochs 1-5 plus live, young and junk keys; returns the garbage."""
    garbage = {LAYOUT.format(p, e, "g") for p in (1, 500, 999) for e in range(1, 6)}
    live = [LAYOUT.format(p, e, "live") for p in (1, 500, 999) for e in (6, 9)]
    s3.seed(bucket, [*garbage, *live, f"{ROOT}/junk", f"{ROOT}/001/x/y"], last_modified=OLD)
    s3.seed(bucket, [LAYOUT.format(7, 1, "young")], last_modified=datetime.now(UTC))
    return garbage


def sweep_args(s3: LocalS3 | str, bucket: str, *extra: str) -> list[str]:
    endpoint = s3 if isinstance(s3, str) else s3.endpoint_url
    return [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        endpoint,
        "--region",
        "us-east-1",
        "--grace",
        "1m",
        "--json",
        *extra,
    ]


@pytest.mark.integration
def test_sweep_deletes_garbage_and_prints_summary(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Exit 0; the JSON summary has exactly the documented fields; only garbage is gone."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    garbage = seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    run = cli(
        "gcd",
        *sweep_args(s3_server, bucket, "--etcd", etcd_server.endpoint, "--namespace", namespace),
    )
    code, summary = run.code, run.json
    assert code == exitcodes.OK
    assert list(summary) == SUMMARY_FIELDS
    assert summary["version"] == 1
    assert summary["safe_epoch"] == 5
    assert summary["cluster_epoch"] == 8
    assert summary["deleted"] == len(garbage)
    assert before - s3_server.keys(bucket) == garbage


@pytest.mark.integration
def test_a_store_url_sweeps_what_the_flags_sweep(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """`--store s3://BUCKET/ROOT` names the bucket and the root at once: the namespace's
    binding is checked against it and the same garbage goes; with --bucket too, exit 2."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    garbage = seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    store = ["--store", f"s3://{bucket}/{ROOT}", "--endpoint-url", s3_server.endpoint_url]
    argv = ["sweep", *store, "--region", "us-east-1", "--grace", "1m", "--json", *etcd]
    run = cli("gcd", *argv, "--bucket", bucket)
    assert run.code == exitcodes.USAGE
    assert "--store" in run.err
    run = cli("gcd", *argv)
    code, summary = run.code, run.json
    assert (code, summary["deleted"]) == (exitcodes.OK, len(garbage))
    assert before - s3_server.keys(bucket) == garbage


@pytest.mark.integration
def test_malformed_partition_record_exits_3_and_deletes_nothing(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Fail closed: exit 3, blocked_reason names the partition, every key is still there."""
    prepare_etcd(etcd_server, namespace, malformed=True, bound_to=(s3_server, bucket))
    seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    run = cli(
        "gcd",
        *sweep_args(s3_server, bucket, "--etcd", etcd_server.endpoint, "--namespace", namespace),
    )
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "t/broken" in str(summary["blocked_reason"])
    assert summary["deleted"] == 0
    assert s3_server.keys(bucket) == before


@pytest.mark.integration
def test_paused_exits_3_with_reason(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """A paused namespace: exit 3, blocked_reason 'paused: <reason>', nothing deleted."""
    prepare_etcd(etcd_server, namespace, paused="migration", bound_to=(s3_server, bucket))
    seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    run = cli(
        "gcd",
        *sweep_args(s3_server, bucket, "--etcd", etcd_server.endpoint, "--namespace", namespace),
    )
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert summary["blocked_reason"] == "paused: migration"
    assert s3_server.keys(bucket) == before


@pytest.mark.integration
def test_a_sweep_waits_while_a_spark_job_sweeps_the_namespace(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """While a Spark job holds the namespace (`{ns}/jobs/spark`) a sweep deletes nothing
    (exit 3, the job named): the job alone uses the namespace's rate. An unreadable
    record refuses too, naming the key to delete; once it is gone the sweep deletes."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    garbage = seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    job = SparkJob("driver-1-abc", "spark-sweep", 1.0, 30.0, "app-7")
    argv = sweep_args(s3_server, bucket, "--etcd", etcd_server.endpoint, "--namespace", namespace)
    for value, said in (
        (job.encode(), "a Spark job is sweeping this namespace: spark-sweep (job driver-1-abc"),
        (b"{not json", f"etcdctl del {spark_job_key(namespace)}"),
    ):
        _put(etcd_server, namespace, spark_job_key(namespace), value)
        run = cli("gcd", *argv)
        assert run.code == exitcodes.BLOCKED
        assert said in run.json["blocked_reason"]
        assert s3_server.keys(bucket) == before
    _put(etcd_server, namespace, spark_job_key(namespace), None)
    assert cli("gcd", *argv).code == exitcodes.OK
    assert not garbage & s3_server.keys(bucket)


def _put(etcd: LocalEtcd, namespace: str, key: str, value: bytes | None) -> None:
    async def run() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        try:
            await kv.txn([], [Delete(key) if value is None else Put(key, value)])
        finally:
            await kv.close()

    asyncio.run(run())


@pytest.mark.integration
def test_safe_epoch_override_is_checked_against_cluster_epoch(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """--safe-epoch above the cluster epoch exits 3; without etcd it is used as given."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    garbage = seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    run = cli("gcd", *sweep_args(s3_server, bucket, *etcd, "--safe-epoch", "9"))
    code, summary = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert "above the cluster epoch 8" in str(summary["blocked_reason"])
    assert s3_server.keys(bucket) == before
    run = cli("gcd", *sweep_args(s3_server, bucket, "--safe-epoch", "3"))
    code, summary = run.code, run.json
    assert code == exitcodes.OK
    assert summary["cluster_epoch"] is None
    assert before - s3_server.keys(bucket) == {k for k in garbage if LAYOUT.parse(k).epoch <= 3}  # type: ignore[union-attr]


@pytest.mark.integration
def test_etcd_unreachable_exits_4(s3_server: LocalS3, bucket: str, cli: Cli) -> None:
    """No etcd answering: exit 4 (etcd unreachable, as for every command), nothing deleted,
    and with --json a JSON error document on stdout."""
    seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    run = cli("gcd", *sweep_args(s3_server, bucket, "--etcd", "127.0.0.1:1", "--etcd-timeout", "1"))
    code, summary = run.code, run.json
    assert code == exitcodes.ETCD_UNREACHABLE
    assert summary["error"] == "etcd_unreachable"
    assert summary["exit_code"] == exitcodes.ETCD_UNREACHABLE
    assert "127.0.0.1:1" in str(summary["message"])
    assert s3_server.keys(bucket) == before


@pytest.mark.integration
def test_a_mistyped_namespace_exits_2_and_writes_nothing_there(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Issue 25: `gcd sweep` on a namespace with nothing stored: exit 2, "is --namespace
    right?", no advice to create state, no shard announcement left there, nothing deleted."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    typo = namespace + "-typo"
    run = cli(
        "gcd",
        *sweep_args(
            s3_server,
            bucket,
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            typo,
            "--shard-count",
            "2",
            "--shard-index",
            "0",
        ),
    )
    code, document = run.code, run.json
    assert code == exitcodes.USAGE
    assert document["error"] == "usage"
    assert "is --namespace right?" in str(document["message"])
    assert "epoch advance" not in str(document["message"])
    assert s3_server.keys(bucket) == before

    async def stored() -> int:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=typo))
        try:
            return len((await kv.range_prefix(typo + "/")).items)
        finally:
            await kv.close()

    assert asyncio.run(stored()) == 0


@pytest.mark.integration
def test_dry_run_plan_matches_the_real_run(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
) -> None:
    """--dry-run --plan-out deletes nothing; the real run deletes exactly the plan."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    seed(s3_server, bucket)
    before = s3_server.keys(bucket)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    plan = tmp_path / "plan.jsonl"
    run = cli("gcd", *sweep_args(s3_server, bucket, *etcd, "--dry-run", "--plan-out", str(plan)))
    code, summary = run.code, run.json
    assert code == exitcodes.OK
    assert summary["dry_run"] is True
    assert summary["deleted"] == 0
    assert s3_server.keys(bucket) == before
    rows = [json.loads(line) for line in plan.read_text().splitlines()]
    assert len(rows) == summary["eligible"]
    assert all(set(row) == {"key", "epoch", "size", "last_modified"} for row in rows)
    datetime.fromisoformat(rows[0]["last_modified"])
    run = cli("gcd", *sweep_args(s3_server, bucket, *etcd))
    code, _ = run.code, run.json
    assert code == exitcodes.OK
    assert before - s3_server.keys(bucket) == {row["key"] for row in rows}


@pytest.mark.integration
def test_injected_faults_are_survived_and_permanent_ones_exit_1(
    s3_server: LocalS3, bucket: str, cli: Cli
) -> None:
    """SlowDown/500 through the fault proxy: exit 0, all garbage gone; AccessDenied: exit 1."""
    garbage = seed(s3_server, bucket)
    faults = FaultConfig(share=0.3, codes=("SlowDown", "InternalError"), seed=2)
    with ThreadedFaultProxy(s3_server.endpoint_url, faults) as proxy:
        run = cli(
            "gcd", *sweep_args(proxy.endpoint_url, bucket, "--safe-epoch", "5", "--batch-size", "2")
        )
        code, summary = run.code, run.json
        assert sum(proxy.proxy.faults.values()) > 0
    assert code == exitcodes.OK
    assert summary["errors"] == 0
    assert not garbage & s3_server.keys(bucket)
    more = {LAYOUT.format(3, 1, f"g{i}") for i in range(4)}
    s3_server.seed(bucket, sorted(more), last_modified=OLD)
    denied = FaultConfig(share=1.0, codes=("AccessDenied",), operations=frozenset({"delete"}))
    with ThreadedFaultProxy(s3_server.endpoint_url, denied) as proxy:
        run = cli("gcd", *sweep_args(proxy.endpoint_url, bucket, "--safe-epoch", "5"))
        code, summary = run.code, run.json
    assert code == exitcodes.PARTIAL_FAILURE
    assert summary["errors"] == len(more)
    assert more <= s3_server.keys(bucket)


def test_bad_values_are_usage_errors_naming_the_value(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Exit 2 with a message naming the flag, env var or config key and the bad value."""
    run = cli("gcd", "sweep", "--safe-epoch", "1")
    assert run.code == exitcodes.USAGE
    assert "--bucket" in run.err
    run = cli("gcd", "sweep", "--bucket", "b", "--safe-epoch", "1", "--batch-size", "0")
    assert run.code == 2
    assert "flag --batch-size: invalid value '0'" in run.err
    run = cli("gcd", "sweep", "--bucket", "b", "--safe-epoch", "1", "--batch-size", "1001")
    assert run.code == 2
    assert "batch size 1001" in run.err
    monkeypatch.setenv("L0GC_GRACE", "soon")
    run = cli("gcd", "sweep", "--bucket", "b", "--safe-epoch", "1")
    assert run.code == 2
    assert "env L0GC_GRACE: invalid value 'soon'" in run.err
    monkeypatch.delenv("L0GC_GRACE")
    config = tmp_path / "gcd.toml"
    config.write_text('bucket = "b"\nbatch_sise = 5\n')
    run = cli("gcd", "sweep", "--config", str(config), "--safe-epoch", "1")
    assert run.code == 2
    assert "unknown key 'batch_sise'" in run.err
    run = cli(
        "gcd",
        "sweep",
        "--bucket",
        "b",
        "--safe-epoch",
        "1",
        "--shard-index",
        "3",
        "--shard-count",
        "2",
    )
    assert run.code == 2
    assert "shard index 3" in run.err
    run = cli("gcd", "sweep", "--bucket", "b", "--safe-epoch", "1", "--key-pattern", "([0-9]+")
    assert run.code == 2
    assert "not a valid regular expression" in run.err
    run = cli("gcd", "sweep", "--bucket", "b", "--no-such-flag")
    assert run.code == 2


def test_precedence_is_flag_then_env_then_config_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option takes the flag, else the env var, else the config file, else its default."""
    config = tmp_path / "gcd.toml"
    config.write_text('grace = "5m"\nbatch_size = 10\nconcurrency = 3\ninterval = "1s"\n')
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_options(parser, ROUND_OPTIONS)
    ns = parser.parse_args(["--config", str(config), "--batch-size", "20"])
    resolve(ns, ROUND_OPTIONS, environ={"L0GC_CONCURRENCY": "4", "L0GC_BATCH_SIZE": "30"})
    assert ns.batch_size == 20  # flag
    assert ns.concurrency == 4  # env
    assert ns.grace == 300.0  # config
    assert ns.list_concurrency == 4  # default
    assert ns.max_deletes is None


@pytest.mark.parametrize("command", ["sweep", "daemon"])
def test_every_flag_shows_its_env_var_and_default(command: str) -> None:
    """Each `gcd sweep`/`gcd daemon` flag's help names its env var and, unless it is a
    switch or required, its default (the shared help rule of l0gc.options)."""
    module = importlib.import_module(f"gcd.cli.{command}")
    parser = CommandParser(prog=f"gcd {command}")
    module.add_arguments(parser)
    flags = [a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")]
    assert {a.dest for a in flags} == {o.dest for o in parser.options}
    for action in flags:
        env = "L0GC_" + action.dest.upper()
        assert f"env {env}" in str(action.help), action.option_strings
        if action.nargs != 0:
            assert "default" in str(action.help) or "required" in str(action.help), action.dest


def test_config_file_sets_etcd_with_durations(tmp_path: Path) -> None:
    """The config file's etcd keys work like any other: a list of endpoints, a 2s timeout."""
    config = tmp_path / "gcd.toml"
    config.write_text('bucket = "b"\netcd = ["e0:1", "e1:2"]\netcd_timeout = "2s"\n')
    parser = CommandParser(prog="gcd sweep")
    sweep_module.add_arguments(parser)
    ns = parser.parse_args(["--config", str(config), "--safe-epoch", "3"])
    resolve(ns, parser.options, environ={})
    etcd = sweep_module.round_setup(ns, {}).etcd
    assert etcd is not None  # given in the file: still checked against the cluster epoch
    assert (etcd.endpoints, etcd.timeout_s) == (("e0:1", "e1:2"), 2.0)


def test_durations() -> None:
    """Durations take seconds or a unit; anything else is refused."""
    assert duration("90") == 90.0
    assert duration(1.5) == 1.5
    assert duration("500ms") == 0.5
    assert duration("10m") == 600.0
    assert duration("2h") == 7200.0
    for bad in ("-1", "soon", "1y", True):
        with pytest.raises(ValueError):
            duration(bad)


def test_unknown_and_uninstalled_commands_are_usage_errors(
    cli: Cli,
) -> None:
    """Unknown commands and missing modules exit 2; --help lists every command and exits 0."""
    run = cli("gcd", "frobnicate")
    assert run.code == exitcodes.USAGE
    assert "unknown command 'frobnicate'" in run.err
    run = cli("gcd")
    assert run.code == exitcodes.USAGE
    run = cli("gcd", "--help")
    assert run.code == exitcodes.OK
    out = run.out
    for name in (
        "sweep",
        "daemon",
        "status",
        "pause",
        "resume",
        "demo",
        "simulate",
        "spark-sweep",
        "spark-report",
    ):
        assert f"  {name} " in out
    run = cli("gcd", "sweep", "--help")
    assert run.code == exitcodes.OK


def test_sweep_does_not_import_pyspark_or_other_commands() -> None:
    """Selecting `sweep` imports only its own module, never pyspark, nor the Azure SDK
    (0.23 s of start-up that an S3 sweep does not need)."""
    code = (
        "import sys\n"
        "from gcd.cli.main import main\n"
        "main(['sweep', '--help'])\n"
        "bad = [m for m in sys.modules if m.startswith(('pyspark', 'gcd.cli.spark', "
        "'gcd.cli.demo', 'gcd.spark', 'azure', 'gcd.storage.azure.client'))]\n"
        "print('IMPORTED', bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[3],
    ).stdout
    assert "IMPORTED []" in out


_LEAN_CHECK = """
import sys
from gcd.cli.main import main
code = main(sys.argv[1:])
heavy = ("aiohttp.web", "azure", "google", "pyspark", "gcd.spark", "gcd.service.daemon",
         "gcd.explainer.http", "aetcd", "grpc", "prometheus_client", "watermark")
loaded = sorted(m for m in sys.modules if m.startswith(heavy))
connector = sys.modules["aiohttp.connector"]
contexts = {type(connector._SSL_CONTEXT_VERIFIED).__name__,
            type(connector._SSL_CONTEXT_UNVERIFIED).__name__}
print("EXIT", code, "HEAVY", loaded, "AIOHTTP_CAS", sorted(contexts), file=sys.stderr)
"""


@pytest.mark.integration
def test_a_one_shot_round_imports_no_server_sdk_or_grpc(s3_server: LocalS3, bucket: str) -> None:
    """A real `gcd sweep` round (M from --safe-epoch, no etcd) ends without having
    imported aiohttp.web (the daemon's server), an Azure or Google SDK, protobuf or
    gRPC (etcd's client), Spark (issue 43), prometheus_client (a one-shot exports no
    metrics) or the publisher's events (issue 56): start-up cost it does not need. Nor
    did aiohttp load a CA store for the two contexts it makes at import and an http://
    endpoint never uses (`l0gc.process.tls`)."""
    garbage = seed(s3_server, bucket)
    argv = sweep_args(s3_server, bucket, "--safe-epoch", "5")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    err = subprocess.run(
        [sys.executable, "-c", _LEAN_CHECK, *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[3],
        env=env,
    ).stderr
    assert "EXIT 0 HEAVY [] AIOHTTP_CAS ['_DeferredCAContext']" in err, err[-2000:]
    assert not garbage & s3_server.keys(bucket)  # the round did run and delete


def test_exception_mapping() -> None:
    """ConfigError -> 2, WatermarkUnavailable -> 3, other L0gcError -> 1, bugs re-raised."""
    assert exitcodes.exit_code_for(ConfigError("x")) == exitcodes.USAGE
    assert exitcodes.exit_code_for(WatermarkUnavailable("x")) == exitcodes.BLOCKED
    assert exitcodes.exit_code_for(StorageError("x", "SlowDown", True)) == 1
    assert exitcodes.exit_code_for(RuntimeError("bug")) is None


def test_progress_line_and_redaction() -> None:
    """The TTY progress line shows counts and bytes; secrets never reach a log line."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    counts = RoundCounts(listed=12345, eligible=10, deleted=7, deleted_bytes=3 * 1024 * 1024)
    line = ProgressLine(lambda: counts, stream=Tty(), clock=lambda: 0.0).render()
    assert line.startswith("listed 12,345")  # no listing planned yet: no percentage
    assert "deleted 7 (3.0 MiB)" in line
    clock = iter([0.0, 30.0])
    counts.prefixes_total, counts.prefixes_done = 10, 4
    line = ProgressLine(lambda: counts, stream=Tty(), clock=lambda: next(clock)).render()
    assert line.startswith("40% ETA ~45s  listed 12,345"), line  # 30 s for 4 of 10 prefixes
    event = redact(None, "info", {"event": "x", "aws_secret_access_key": "s", "password": "p"})
    assert event == {"event": "x", "aws_secret_access_key": "[redacted]", "password": "[redacted]"}
