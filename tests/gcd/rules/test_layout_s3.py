"""Issue 13 finding 3 end to end: custom key patterns that match too much, against the real
etcd and S3 servers through `gcd sweep`. Nothing live may be deleted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from l0gc import exitcodes
from l0gc.contract.namespace import Publication
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.clirun import Cli

pytestmark = pytest.mark.integration

SAFE = 5
OLD = datetime.now(UTC) - timedelta(hours=2)
GREEDY = r".*?(?P<epoch>[0-9]+).*"
SPANNING = r".+/(?P<epoch>[0-9]{18})/(?P<name>[^/]+)"


def prepare(etcd: LocalEtcd, namespace: str, s3: LocalS3, bucket: str, root: str) -> None:
    """M = SAFE at cluster epoch 8, the namespace bound to s3://bucket/root."""
    bind_sync(etcd.endpoint, namespace, s3.endpoint_url, bucket, root)

    async def setup() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(1)
            await store.register_partition("t/0")
            owned = await store.acquire_ownership("t/0", "p")
            for _ in range(7):
                await store.advance_cluster_epoch()
            await store.publish_one(Publication("t/0", "p", owned.owner_epoch, SAFE))
        finally:
            await kv.close()

    asyncio.run(setup())


def sweep_args(etcd: LocalEtcd, namespace: str, s3: LocalS3, bucket: str, *flags: str) -> list[str]:
    """`gcd sweep --json ...` of `bucket` with `namespace`."""
    return [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3.endpoint_url,
        "--region",
        "us-east-1",
        "--etcd",
        etcd.endpoint,
        "--namespace",
        namespace,
        "--grace",
        "1m",
        "--json",
        *flags,
    ]


def test_a_greedy_pattern_is_refused_and_cannot_delete_a_live_object(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """`.*?(?P<epoch>[0-9]+).*` reads prefix 004 as epoch 4 <= M: refused without a template
    (exit 2, naming the pattern); with one, the live key does not parse and stays."""
    prepare(etcd_server, namespace, s3_server, bucket, "level_zero/data")
    live = f"level_zero/data/004/{7:018d}/seg.log"  # epoch 7 > M = 5
    s3_server.seed(bucket, [live, f"level_zero/data/003/{2:018d}/old.log"], last_modified=OLD)
    before = s3_server.keys(bucket)

    run = cli(
        "gcd", *sweep_args(etcd_server, namespace, s3_server, bucket, "--key-pattern", GREEDY)
    )
    code, summary, err = run.code, run.json, run.err
    assert code == exitcodes.USAGE
    assert GREEDY in err
    assert "--key-template" in err
    assert summary is not None  # --json: the failure is a JSON error document (issue 27)
    assert (summary["error"], summary["exit_code"]) == ("usage", exitcodes.USAGE)
    assert s3_server.keys(bucket) == before

    template = ("--key-template", "{epoch}/{name}")
    run = cli(
        "gcd",
        *sweep_args(etcd_server, namespace, s3_server, bucket, "--key-pattern", GREEDY, *template),
    )
    code, summary = run.code, run.json
    assert code == exitcodes.OK
    assert summary is not None
    assert summary["deleted"] == 0
    assert summary["unparsable"] == 2
    assert s3_server.keys(bucket) == before


def test_a_pattern_spanning_two_roots_never_deletes_the_sibling_root(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Root `level_zero` with a pattern whose `.+` spans `data/` and `data2/`: refused without
    a template; with one, only the template's directory is swept, `data2/` stays whole."""
    prepare(etcd_server, namespace, s3_server, bucket, "level_zero")
    ours = [f"level_zero/data/417/{e:018d}/g" for e in range(1, 4)]
    sibling = [f"level_zero/data2/417/{e:018d}/g" for e in range(1, 4)]
    s3_server.seed(bucket, ours + sibling, last_modified=OLD)
    flags = ("--root", "level_zero", "--key-pattern", SPANNING, "--epoch-width", "18")

    run = cli("gcd", *sweep_args(etcd_server, namespace, s3_server, bucket, *flags))
    code, err = run.code, run.err
    assert code == exitcodes.USAGE
    assert SPANNING in err
    assert set(ours + sibling) <= s3_server.keys(bucket)

    run = cli(
        "gcd",
        *sweep_args(
            etcd_server,
            namespace,
            s3_server,
            bucket,
            *flags,
            "--key-template",
            "data/417/{epoch:018d}/{name}",
        ),
    )
    code, summary = run.code, run.json
    assert code == exitcodes.OK
    assert summary is not None
    assert summary["deleted"] == len(ours)
    remaining = s3_server.keys(bucket)
    assert not set(ours) & remaining
    assert set(sibling) <= remaining
