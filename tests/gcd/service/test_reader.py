"""`gcd.service.reader`: every command that does not sweep opens etcd ONCE.

Counted from outside, as for `gcd sweep` (tests/gcd/service/test_runtime.py): a loopback
TCP proxy in front of a real etcd counts what it accepts while each command runs against
a real S3 server and a journal a real sweep wrote.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gcd.cli import spark
from l0gc.options import CommandParser
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.clirun import Cli
from tests.etcdproxy import CountingProxy
from tests.gcd.cli.test_sweep_cli import LAYOUT, prepare_etcd, seed, sweep_args

pytestmark = pytest.mark.integration

COMMANDS = {
    "status --why": ["status", "--why"],
    "explain": ["explain", LAYOUT.format(1, 9, "live"), "{store}", "{journal}"],
    "journal verify": ["journal", "verify", "{journal}"],
    "restore --dry-run": ["restore", "--dry-run", "{store}", "{journal}"],
    "pause": ["pause", "--reason", "counting"],
    "namespace show": ["namespace", "show"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_that_does_not_sweep_opens_one_etcd_connection(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    cli: Cli,
    name: str,
) -> None:
    """Each reading (or pausing, binding) command's etcd users share one connection:
    `gcd status --why` reads the namespace, the pinned partitions' history and the
    oldest kept key; `gcd restore` checks the pause and the journal's anchors."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    seed(s3_server, bucket)
    journal = str(tmp_path / "journal")
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    run = cli("gcd", *sweep_args(s3_server, bucket, *etcd, "--journal-dir", journal))
    assert run.code == 0
    store = ["--bucket", bucket, "--endpoint-url", s3_server.endpoint_url, "--region", "us-east-1"]
    argv: list[str] = []
    for word in COMMANDS[name]:
        argv += {"{store}": store, "{journal}": ["--journal-dir", journal]}.get(word, [word])
    with CountingProxy(etcd_server.endpoint) as proxy:
        run = cli("gcd", *argv, "--etcd", proxy.endpoint, "--namespace", namespace)
        code = run.code
    assert code == 0, run
    assert proxy.accepted == 1


def test_the_spark_driver_reads_m_on_one_etcd_connection(
    s3_server: LocalS3, bucket: str, etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """The driver's one etcd user (M through the binding, then the pause key it follows
    and the job's announcement while the job runs: `admitted`) opens one connection;
    executors run no etcd client."""
    prepare_etcd(etcd_server, namespace, bound_to=(s3_server, bucket))
    parser = CommandParser(prog="gcd spark-sweep")
    spark.add_arguments(parser)
    with CountingProxy(etcd_server.endpoint) as proxy:
        flags = ["--etcd", proxy.endpoint, "--namespace", namespace]
        store = ["--bucket", bucket, "--endpoint-url", s3_server.endpoint_url]
        out = ["--list", "--output", str(tmp_path / "out"), "--root", LAYOUT.root]
        args = parser.parse_args([*store, "--region", "us-east-1", *out, *flags])
        spark.parse_run(args)  # flags > env > config > defaults, as the command resolves them

        async def admit() -> Any:
            async with spark.admitted(args, None) as (admission, reader):
                assert reader is not None
                assert reader.source is not None
                assert await reader.source.get_paused() is None  # the brake's read
                kv, store = reader.etcd()  # the job's announcement: the same client
                assert await kv.get(f"{store.namespace}/jobs/spark") is None
                return admission

        admission = asyncio.run(admit())
    assert (admission.allowed, admission.safe_epoch) == (True, 5)
    assert proxy.accepted == 1
