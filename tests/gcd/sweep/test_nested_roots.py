"""Issue 25, finding 1: the roots of two namespaces never nest (real etcd, a real S3 server).

Namespace /a owns `level_zero/data` (M = 1999); namespace /b was given
`level_zero/data/417` with an 18-digit key template (M = 4999). Before the fix /b's sweep
deleted `level_zero/data/417/000000000000002000/live1`, live for /a.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import ListPage, ObjectInfo
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.binding import bind_namespace
from gcd.sweep.nesting import NestedRoots
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0gc import exitcodes
from l0gc.contract.binding import StorageTarget, claim_key
from l0gc.contract.namespace import Publication
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.sim.checks import ViolationKind
from l0lab.sim.runner import first_kind, run_seed
from l0lab.sim.world import SimConfig
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from l0lab.testing.memory import MemoryObjectStore
from tests.clirun import Cli

pytestmark = pytest.mark.integration

OUTER, INNER = "level_zero/data", "level_zero/data/417"
B_LAYOUT = (
    "--key-pattern",
    "(?P<epoch>[0-9]{18})/(?P<name>[^/]+)",
    "--key-template",
    "{epoch:018d}/{name}",
    "--epoch-width",
    "18",
)
OLD = datetime.now(UTC) - timedelta(hours=2)
A = KeyLayout.default(OUTER)
LIVE_FOR_A = f"{INNER}/000000000000002000/live1"  # /a's prefix 417, epoch 2000 > 1999
A_GARBAGE_IN_B = f"{INNER}/000000000000001000/old"  # /a's garbage, but under /b's claim
A_GARBAGE = [A.format(1, 1000, "g"), A.format(500, 1999, "g")]
A_LIVE = [A.format(1, 2000, "l"), LIVE_FOR_A]


def cluster(etcd: LocalEtcd, namespace: str, safe: int) -> None:
    """One partition at M(p) = `safe` (registered at cluster epoch `safe` + 1)."""

    async def setup() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(safe + 1)
            await store.register_partition("t/0")
            owned = await store.acquire_ownership("t/0", "p")
            await store.publish_one(Publication("t/0", "p", owned.owner_epoch, safe))
        finally:
            await kv.close()

    asyncio.run(setup())


class _BeforeTheFix:
    """A claim store that shows no listing: `bind_namespace` as it ran before nesting was
    checked, to build the overlap an older version (or a bind race) left behind."""

    def __init__(self, inner: S3ObjectStore) -> None:
        self.inner = inner

    async def list_page(self, prefix: str, **_: Any) -> ListPage:
        return ListPage((), None)

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        return await self.inner.get_object(key, max_bytes=max_bytes)

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        return await self.inner.put_object(key, body, if_absent=if_absent)


def legacy_bind(etcd: LocalEtcd, s3: LocalS3, bucket: str, namespace: str, root: str) -> None:
    """Bind without the nesting check (see `_BeforeTheFix`)."""

    async def run() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        settings = S3Settings(bucket=bucket, endpoint_url=s3.endpoint_url, region="us-east-1")
        try:
            async with S3ObjectStore.open(settings) as objects:
                await bind_namespace(
                    WatermarkStore(kv, namespace),
                    _BeforeTheFix(objects),
                    StorageTarget(bucket, root, s3.endpoint_url),
                )
        finally:
            await kv.close()

    asyncio.run(run())


def storage(s3: LocalS3, bucket: str, etcd: LocalEtcd, namespace: str) -> tuple[str, ...]:
    return (
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
    )


def test_nested_root_of_another_namespace_is_never_swept(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """The issue's scenario: /b's sweep deletes nothing of /a's; /a keeps /b's subtree."""
    ns_a, ns_b = f"{namespace}/a", f"{namespace}/b"
    cluster(etcd_server, ns_a, 1999)
    cluster(etcd_server, ns_b, 4999)
    keys = [*A_GARBAGE, *A_LIVE, A_GARBAGE_IN_B]
    s3_server.seed(bucket, keys, last_modified=OLD)
    a, b = (
        storage(s3_server, bucket, etcd_server, ns_a),
        storage(s3_server, bucket, etcd_server, ns_b),
    )
    run = cli("gcd", "namespace", "bind", *a, "--root", OUTER, "--json")
    code, bound = run.code, run.json
    assert code == exitcodes.OK, bound
    run = cli("gcd", "namespace", "bind", *b, "--root", INNER, "--json")
    code, refused = run.code, run.json
    assert code == exitcodes.BLOCKED, refused
    for name in (ns_b, f"s3://{bucket}/{INNER}", ns_a, f"s3://{bucket}/{OUTER}"):
        assert name in refused["problem"], refused
    legacy_bind(etcd_server, s3_server, bucket, ns_b, INNER)  # the overlap, as left before

    run = cli("gcd", "sweep", *b, "--root", INNER, "--grace", "1m", *B_LAYOUT, "--json")
    code, summary = run.code, run.json
    assert s3_server.keys(bucket) >= set(keys), "/b deleted /a's objects"
    assert (code, summary["deleted"]) == (exitcodes.BLOCKED, 0), summary
    assert f"inside s3://{bucket}/{OUTER}" in summary["blocked_reason"]
    assert repr(ns_a) in summary["blocked_reason"]

    run = cli("gcd", "sweep", *a, "--root", OUTER, "--grace", "1m", "--json")
    code, summary = run.code, run.json
    assert code == exitcodes.OK, summary
    assert summary["nested_roots"] == [INNER]
    assert (summary["deleted"], summary["skipped_nested"]) == (2, 1)
    assert s3_server.keys(bucket) == {*A_LIVE, A_GARBAGE_IN_B, claim_key(OUTER), claim_key(INNER)}


def test_bind_refuses_nesting_in_either_order_and_compares_at_slashes(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Inner first, then outer: refused too; `level_zero/data2` is no child of `.../data`."""

    def bind(ns: str, root: str) -> tuple[int, dict[str, Any]]:
        run = cli(
            "gcd",
            "namespace",
            "bind",
            *storage(s3_server, bucket, etcd_server, ns),
            "--root",
            root,
            "--json",
        )
        return run.code, run.json

    assert bind(f"{namespace}/inner", INNER)[0] == exitcodes.OK
    code, refused = bind(f"{namespace}/outer", OUTER)
    assert code == exitcodes.BLOCKED, refused
    assert f"contains s3://{bucket}/{INNER}" in refused["problem"]
    assert f"{namespace}/inner" in refused["problem"]
    assert claim_key(OUTER) not in s3_server.keys(bucket)  # nothing written when refused
    code, refused = bind(f"{namespace}/top", "level_zero")
    assert code == exitcodes.BLOCKED, refused
    assert bind(f"{namespace}/beside", f"{INNER}x")[0] == exitcodes.OK  # 417x: not inside 417
    assert bind(f"{namespace}/sibling", "level_zero/data2")[0] == exitcodes.OK
    assert bind(f"{namespace}/inner", INNER)[0] == exitcodes.OK  # idempotent, still


def test_a_key_sorting_before_its_directorys_claim_is_kept() -> None:
    """`-early` sorts before `.l0gc-claim.json`: on a page of its own, the claim is not
    seen yet, so one one-key LIST decides; without a claim the key is deleted."""
    nested = A.format(417, 1, "x").rsplit("/", 1)[0]  # an epoch directory, claimed
    plain = A.format(500, 1, "x").rsplit("/", 1)[0]  # the same shape, no claim
    store = MemoryObjectStore()
    keys = [
        f"{nested}/-early",
        f"{nested}/late",
        claim_key(nested),
        f"{plain}/-early",
        A.format(1, 1, "g"),
    ]
    for key in keys:
        store.put(key, last_modified_s=0.0)
    config = RoundConfig(layout=A, grace_s=0.0, page_size=1, list_concurrency=1)
    result = asyncio.run(Sweeper(store, config, clock=lambda: 100.0).sweep(5, None))
    assert result.summary.nested_roots == (nested,)
    assert store.keys() == {f"{nested}/-early", f"{nested}/late", claim_key(nested)}
    # the nested claim parses as an L0 key of this layout: kept too, not deleted
    assert (result.summary.deleted, result.summary.skipped_nested) == (2, 3)


def test_an_oversized_claim_says_what_it_is_not_check_credentials(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    cli: Cli,
) -> None:
    """Finding 8: a 20 KB object at the claim key blocks with a message about the object."""
    cluster(etcd_server, namespace, 5)
    args = storage(s3_server, bucket, etcd_server, namespace)
    run = cli("gcd", "namespace", "bind", *args, "--root", OUTER, "--json")
    code, _ = run.code, run.json
    assert code == exitcodes.OK
    s3_server.seed(bucket, {claim_key(OUTER): b" " * 20_000})
    run = cli("gcd", "sweep", *args, "--root", OUTER, "--json")
    code, summary = run.code, run.json
    reason = summary["blocked_reason"]
    assert code == exitcodes.BLOCKED, summary
    assert f"{claim_key(OUTER)} is larger than 16384 bytes, so l0gc did not write it" in reason
    assert "credentials" not in reason
    other = storage(s3_server, bucket, etcd_server, f"{namespace}-2")
    run = cli("gcd", "namespace", "bind", *other, "--root", OUTER, "--json")
    code, refused = run.code, run.json
    assert code == exitcodes.BLOCKED, refused
    assert "is larger than 16384 bytes" in refused["problem"]
    assert "credentials" not in refused["problem"]


def test_the_simulation_catches_a_sweeper_blind_to_nested_roots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `nested_root`, the simulated bucket holds another namespace's root inside ours
    (`l0lab.sim.actions`): a sweeper that ignores it deletes that namespace's objects, and the
    run says so; the real sweeper keeps them over every seed tried."""

    async def blind(_self: NestedRoots, _key: str, _page: ListPage) -> str | None:
        return None

    config = SimConfig(steps=120, nested_root=True)
    assert [first_kind(run_seed(seed, config)) for seed in range(4)] == [None] * 4
    monkeypatch.setattr(NestedRoots, "blocks", blind)
    assert first_kind(run_seed(0, config)) is ViolationKind.DELETED_OUTSIDE_LAYOUT


async def test_an_unordered_listing_probes_every_directory_before_deleting() -> None:
    """Issue 28 x 25: an unordered listing (S3 Express) may show a key on a page before its
    directory's claim; no page then says the claim is absent, so every directory between
    the root and the key is probed (once per round) and a claimed one keeps the key."""
    root = "level_zero/data"
    key = f"{root}/417/000000000000000002/a"
    page = ListPage((ObjectInfo(key, 1, 0.0),), next_token="more")
    claims = {f"{root}/417/.l0gc-claim.json"}
    probed: list[str] = []

    async def probe(claim: str) -> bool:
        probed.append(claim)
        return claim in claims

    ordered = NestedRoots(root, probe)
    assert await ordered.blocks(key, page) is None  # in order the claim came first: scanned
    assert probed == []
    unordered = NestedRoots(root, probe, ordered=False)
    assert await unordered.blocks(key, page) == f"{root}/417"
    assert probed == [f"{root}/417/.l0gc-claim.json"]
    assert unordered.found == {f"{root}/417": f"{root}/417/.l0gc-claim.json"}
    free = f"{root}/002/000000000000000002/b"
    assert await unordered.blocks(free, page) is None
    assert await unordered.blocks(free, page) is None  # probed once per directory
    assert probed[1:] == [
        f"{root}/002/.l0gc-claim.json",
        f"{root}/002/000000000000000002/.l0gc-claim.json",
    ]
