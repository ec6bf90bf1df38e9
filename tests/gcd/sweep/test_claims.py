"""`watermark namespace repair-claims` on real etcd and moto (red-team round 4, finding
5): a writer allowed to PutObject under the root overwrote the root's claim (every sweep
blocked, `bind` refused to repair it) or planted a junk claim below the root (that
directory was never collected). The namespace's admin repairs both from the binding."""

from __future__ import annotations

import asyncio

import pytest

from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc import exitcodes
from l0gc.contract.binding import Binding, StorageTarget, claim_key
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.clirun import Cli
from tests.gcd.sweep.test_binding import LAYOUT, ROOT, cluster, namespace_args, objects, sweep_args

pytestmark = pytest.mark.integration


def put(s3: LocalS3, bucket: str, key: str, body: bytes) -> None:
    """Write `key` as a writer with PutObject under the root would."""

    async def write() -> None:
        settings = S3Settings(bucket=bucket, endpoint_url=s3.endpoint_url, region="us-east-1")
        async with S3ObjectStore.open(settings) as store:
            await store.put_object(key, body, if_absent=False)

    asyncio.run(write())


def test_an_overwritten_root_claim_is_rewritten_from_the_binding(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Junk over the root's claim blocks every sweep; repair-claims rewrites it from the
    etcd binding (saying what it held) and the next sweep deletes the garbage."""
    cluster(etcd_server, namespace)
    keys = objects(s3_server, bucket)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
    put(s3_server, bucket, claim_key(ROOT), b'{"namespace": "/mine-now"}')
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, _ = run.code, run.json
    assert code == exitcodes.BLOCKED
    assert s3_server.keys(bucket) == keys | {claim_key(ROOT)}
    run = cli(
        "gcd", *namespace_args(etcd_server, namespace, "repair-claims", "--region", "us-east-1")
    )
    code, done = run.code, run.json
    assert code == exitcodes.OK, done
    assert done["claim_rewritten"] is True
    assert "/mine-now" in str(done["previous_claim"])
    run = cli("gcd", *namespace_args(etcd_server, namespace, "show", "--region", "us-east-1"))
    code, again = run.code, run.json
    assert (code, again["consistent"]) == (exitcodes.OK, True)
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, summary = run.code, run.json
    assert (code, summary["deleted"]) == (exitcodes.OK, 4)


def test_a_planted_nested_claim_is_removed_and_a_real_one_needs_force(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """A junk claim below the root keeps its directory's garbage; --remove-claim deletes
    it and the next sweep collects the directory. A valid claim of another namespace is
    refused without --force (nothing removed), anything not a claim below the root too."""
    cluster(etcd_server, namespace)
    objects(s3_server, bucket)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
    directory = LAYOUT.format(1, 1, "o").rsplit("/", 1)[0]
    planted = f"{directory}/.l0gc-claim.json"
    put(s3_server, bucket, planted, b"junk")
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, summary = run.code, run.json
    assert code == exitcodes.OK
    assert summary["nested_roots"], summary
    kept = {key for key in s3_server.keys(bucket) if key.startswith(directory + "/")}
    assert LAYOUT.format(1, 1, "o") in kept
    run = cli(
        "gcd",
        *namespace_args(
            etcd_server,
            namespace,
            "repair-claims",
            "--remove-claim",
            f"{ROOT}/x.json",
            "--region",
            "us-east-1",
        ),
    )
    code, refused = run.code, run.json
    assert code == exitcodes.BLOCKED, refused
    run = cli(
        "gcd",
        *namespace_args(
            etcd_server,
            namespace,
            "repair-claims",
            "--remove-claim",
            planted,
            "--region",
            "us-east-1",
        ),
    )
    code, done = run.code, run.json
    assert (code, done["removed_claims"], done["claim_rewritten"]) == (
        exitcodes.OK,
        [planted],
        False,
    )
    run = cli("gcd", *sweep_args(s3_server, bucket, etcd_server, namespace))
    code, _ = run.code, run.json
    assert code == exitcodes.OK
    assert LAYOUT.format(1, 1, "o") not in s3_server.keys(bucket)
    # A real nested namespace (bound before nesting was refused) is not removed lightly.
    other = Binding(
        "/l0gc/nested",
        StorageTarget(bucket, f"{ROOT}/nested", s3_server.endpoint_url),
        "0123456789abcdef",
        "cluster-x",
        1.0,
    )
    real = claim_key(other.target.root)
    put(s3_server, bucket, real, other.claim().encode())
    run = cli(
        "gcd",
        *namespace_args(
            etcd_server, namespace, "repair-claims", "--remove-claim", real, "--region", "us-east-1"
        ),
    )
    code, refused = run.code, run.json
    assert code == exitcodes.BLOCKED, refused
    assert "--force" in str(refused["problem"])
    assert real in s3_server.keys(bucket)
    run = cli(
        "gcd",
        *namespace_args(
            etcd_server,
            namespace,
            "repair-claims",
            "--remove-claim",
            real,
            "--force",
            "--region",
            "us-east-1",
        ),
    )
    code, done = run.code, run.json
    assert (code, done["removed_claims"]) == (exitcodes.OK, [real])
    assert real not in s3_server.keys(bucket)
