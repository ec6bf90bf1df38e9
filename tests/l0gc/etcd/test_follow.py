"""A sweeper's namespace view followed with an etcd watch, on a real etcd: it gives what a
full read gives after every change, blocks at once on a malformed record, checks itself
against full reads, and falls back to full reads when the watch is lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aetcd import rpc

from l0gc.contract.kv import Change, Put
from l0gc.contract.namespace import Publication
from l0gc.contract.safe_epoch import compute_safe_epoch
from l0gc.errors import EtcdUnavailable
from l0gc.etcd.follow import FULL_CHECK_EVERY, GcFollower
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0gc.etcd.watch import EtcdWatch
from l0lab.testing.local_servers import LocalEtcd, LocalEtcdCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


async def open_store(endpoint: str | tuple[str, ...], namespace: str) -> WatermarkStore:
    """A store on the real etcd (one endpoint or a cluster's). A call's timeout is not
    short: a stopped etcd refuses at once, and a loaded one may take seconds to answer."""
    endpoints = (endpoint,) if isinstance(endpoint, str) else endpoint
    kv = await open_kv(EtcdSettings(endpoints=endpoints, namespace=namespace, timeout_s=30.0))
    return WatermarkStore(kv, namespace)


_FOLLOWERS: list[GcFollower] = []


def following(store: WatermarkStore, **options: Any) -> GcFollower:
    """A follower the `store` fixture closes before its client (as the daemon does: an
    open watch would hold the channel's close for its whole grace period)."""
    follower = GcFollower(store, **options)
    _FOLLOWERS.append(follower)
    return follower


@pytest.fixture
async def store(etcd_server: LocalEtcd, namespace: str) -> AsyncIterator[WatermarkStore]:
    """Cluster epoch 10, partitions p/0..p/2 owned by pub-1 at M(p) 9 (created at 10)."""
    made = await open_store(etcd_server.endpoint, namespace)
    await made.init_cluster_epoch(10)
    for name in ("p/0", "p/1", "p/2"):
        await made.register_partition(name)
        await made.acquire_ownership(name, "pub-1")
    try:
        yield made
    finally:
        while _FOLLOWERS:
            await _FOLLOWERS.pop().close()
        await made.kv.close()


async def publish(store: WatermarkStore, name: str, watermark: int) -> None:
    """Publish M(p) as its owner would."""
    record = await store.get_partition(name)
    assert record is not None
    await store.publish_one(Publication(name, "pub-1", record.owner_epoch, watermark))


async def same_as_full(store: WatermarkStore, follower: GcFollower) -> int | None:
    """Read through the follower; assert it equals a full read now; return M."""
    _, safe = await follower.read()
    full = compute_safe_epoch(await store.read_gc_view())
    assert (safe.safe_epoch, safe.blocked_reason, safe.paused, safe.partition_count) == (
        full.safe_epoch,
        full.blocked_reason,
        full.paused,
        full.partition_count,
    )
    assert [r.partition for r in safe.pinning] == [r.partition for r in full.pinning]
    return safe.safe_epoch


async def reads_in_full_then_follows(store: WatermarkStore, follower: GcFollower, m: int) -> None:
    """After a lost watch: the next read (at M = `m`) is a full one, the one after follows."""
    await store.advance_cluster_epoch()
    assert (await follower.read())[1].safe_epoch == m
    assert follower.last_kind == "full"
    await store.advance_cluster_epoch()
    assert (await follower.read())[1].safe_epoch == m + 1
    assert follower.last_kind == "incremental"


async def test_the_follower_reads_in_full_once_then_follows_every_change(
    store: WatermarkStore,
) -> None:
    """Publications, a pause, a malformed record (blocks at once), its repair, a
    deregistration: each read equals a full read, and only the first is a full one."""
    follower = following(store, verify_every=1000)
    assert await same_as_full(store, follower) == 9
    assert follower.last_kind == "full"
    await store.advance_cluster_epoch()
    await publish(store, "p/0", 10)
    await publish(store, "p/1", 10)
    assert await same_as_full(store, follower) == 9  # p/2 pins
    assert follower.last_kind == "incremental"
    await publish(store, "p/2", 10)
    assert await same_as_full(store, follower) == 10
    await store.set_paused("maintenance")
    _, safe = await follower.read()
    assert (safe.paused, safe.paused_reason) == (True, "maintenance")
    await store.clear_paused()
    await store.kv.txn([], [Put(store.partition_key("p/1"), b"{broken")])
    _, safe = await follower.read()
    assert (safe.safe_epoch, safe.blocked_partition) == (None, "p/1")
    await store.kv.txn([], [Put(store.partition_key("p/1"), b"")])
    assert await same_as_full(store, follower) is None
    await store.deregister_partition("p/1")
    assert await same_as_full(store, follower) == 10
    assert follower.last_kind == "incremental"
    assert follower.changes_applied >= 8


async def test_a_change_made_before_the_watch_opens_is_never_vouched_for_unseen(
    store: WatermarkStore,
) -> None:
    """A publish lands between the full read at R and the watch opened from R + 1, so
    etcd (3.5.1 here) must replay it to the new watch, and answers the first progress
    request before it has: the index must not claim that answer's revision. Every read
    is checked: the keys-only check at etcd's answer fails while the publish is on its
    way (not lost), the one at the index's own revision passes, and no read differs; the
    publish is seen once the watch delivers it (the regression: the index claimed the
    answer's revision and the check found p/0 differing, a blocked round)."""
    await store.advance_cluster_epoch()
    follower = following(store, verify_every=1)
    kv: Any = store.kv
    opened = kv.watch_prefix

    async def after_a_publish(prefix: str, start_revision: int) -> Any:
        await publish(store, "p/0", 10)
        return await opened(prefix, start_revision)

    kv.watch_prefix = after_a_publish
    assert (await follower.read())[1].safe_epoch == 9
    kv.watch_prefix = opened
    seen: list[str] = []

    async def publish_seen() -> bool:
        _, safe = await follower.read()
        seen.append(follower.last_kind or "")
        full = follower._checks % FULL_CHECK_EVERY == 0  # every 30th check reads in full
        assert follower.last_kind == ("verified" if full else "checked"), seen
        assert safe.safe_epoch == 9
        return [pin.partition for pin in safe.pinning] == ["p/1", "p/2"]

    await wait_until(publish_seen, timeout_s=30, what="the publish before the watch seen")


def losing(follower: GcFollower, lost: str) -> None:
    """Make the follower's watch lose every change of key `lost` from now on."""
    watch = follower._watch
    assert watch is not None
    real_sync = watch.sync

    async def losing_sync() -> tuple[list[Change], int]:
        changes, revision = await real_sync()
        return [change for change in changes if change.key != lost], revision

    watch.sync = losing_sync  # type: ignore[method-assign]


async def test_every_nth_read_is_checked_and_an_update_the_watch_lost_is_caught(
    store: WatermarkStore,
) -> None:
    """verify_every=2: the second read checks the index against etcd by keys and mod
    revisions ("checked"); an update the watch never delivered is found by the next
    check, confirmed by a full read at the index's revision, blocks that round, and the
    next read is a full one."""
    follower = following(store, verify_every=2)
    await follower.read()
    await store.advance_cluster_epoch()
    await publish(store, "p/0", 10)
    _, safe = await follower.read()
    assert follower.last_kind == "checked"
    assert safe.safe_epoch == 9
    await follower.read()  # 3rd: incremental
    losing(follower, store.partition_key("p/1"))
    await publish(store, "p/1", 10)  # etcd has it, the index never hears of it
    _, blocked = await follower.read()  # 4th: checked, differs, then read in full
    assert follower.last_kind == "mismatch"
    assert blocked.safe_epoch is None
    assert "differs from a full read" in str(blocked.blocked_reason)
    assert "'p/1'" in str(blocked.blocked_reason)
    assert await same_as_full(store, follower) == 9
    assert follower.last_kind == "full"


async def test_a_delete_the_watch_lost_is_caught_by_the_count(store: WatermarkStore) -> None:
    """A partition deregistered while the watch loses it: etcd holds one record fewer
    than the index, so the check reads in full and blocks the round."""
    follower = following(store, verify_every=2)
    await follower.read()
    losing(follower, store.partition_key("p/2"))
    await store.deregister_partition("p/2")
    _, blocked = await follower.read()
    assert follower.last_kind == "mismatch"
    assert blocked.safe_epoch is None
    assert "the index holds 3 partition records, the full read 2" in str(blocked.blocked_reason)


async def test_every_nth_check_reads_in_full(store: WatermarkStore) -> None:
    """Checks read keys only but every `FULL_CHECK_EVERY`-th, which reads the namespace
    in full: a difference only a value comparison finds (the index's own bug, not the
    watch's) is found there."""
    follower = following(store, verify_every=1)
    await follower.read()
    kinds = []
    for round_no in range(FULL_CHECK_EVERY):
        await publish(store, "p/0", 10 + round_no)
        await follower.read()
        kinds.append(follower.last_kind)
    assert kinds == ["checked"] * (FULL_CHECK_EVERY - 1) + ["verified"]
    index = follower._index
    assert index is not None
    raw = (await store.kv.get(store.partition_key("p/0"))).value  # type: ignore[union-attr]
    index._set_partition("p/2", raw)  # the index applied a wrong value: no watch to blame
    for _ in range(FULL_CHECK_EVERY - 1):
        await follower.read()
        assert follower.last_kind == "checked"  # keys and revisions agree
    _, blocked = await follower.read()
    assert follower.last_kind == "mismatch"
    assert "'p/2'" in str(blocked.blocked_reason)


async def test_checks_wait_for_the_check_interval(store: WatermarkStore) -> None:
    """check_interval_s (a daemon: --verify-m-every x --interval): a verify_every-th read
    that comes sooner than the interval after the last check (or the full read) is not
    checked; the first read once the interval has passed is, and the next check waits
    again. A change the watch lost is still found, at that later check."""
    now = [1000.0]
    follower = following(store, verify_every=2, check_interval_s=60.0, monotonic=lambda: now[0])
    await follower.read()
    assert follower.last_kind == "full"
    kinds = []
    for _ in range(5):  # reads 2-6, all within 60 s of the full read
        now[0] += 10.0
        await follower.read()
        kinds.append(follower.last_kind)
    assert kinds == ["incremental"] * 5
    now[0] += 10.0  # 60 s since the full read; read 7 is not a 2nd read, but one is due
    await follower.read()
    assert follower.last_kind == "checked"
    losing(follower, store.partition_key("p/1"))
    await publish(store, "p/1", 9)  # etcd has it, the index never hears of it
    now[0] += 59.0
    for _ in range(3):  # due at read 8, but 59 s after the check
        await follower.read()
        assert follower.last_kind == "incremental"
    now[0] += 1.0
    _, blocked = await follower.read()
    assert follower.last_kind == "mismatch"
    assert "'p/1'" in str(blocked.blocked_reason)


async def test_a_lost_watch_falls_back_to_full_reads(
    etcd_private: LocalEtcd, namespace: str
) -> None:
    """etcd restarted under the watch: the read after is a full one (or fails while etcd
    is down: no stale M is ever returned), and following resumes."""
    store = await open_store(etcd_private.endpoint, namespace)
    try:
        await store.init_cluster_epoch(5)
        follower = GcFollower(store)
        assert (await follower.read())[1].safe_epoch == 4
        etcd_private.stop()
        with pytest.raises(EtcdUnavailable):
            await follower.read()
        etcd_private.start()
        await reads_in_full_then_follows(store, follower, 5)
    finally:
        await follower.close()
        await store.kv.close()


@pytest.mark.parametrize("ordered", [True, False], ids=["etcd-3.5.13+", "etcd-3.5.1"])
async def test_a_quiet_namespace_through_a_compaction(
    etcd_private: LocalEtcd, namespace: str, ordered: bool
) -> None:
    """A quiet namespace while etcd's revision moves on elsewhere, then a compaction.
    Where progress answers are ordered with events (etcd 3.5.13+; this etcd is told so,
    which is safe here: no change of the namespace is in flight), the index moves on with
    etcd's revision at every read. Where they are not (this etcd as it is), the index
    stays at its last change between checks, and the check, made at etcd's last answer
    and passing there, moves it on. Either way the check is made at a revision etcd has:
    no needless full read. A check that cannot be made at all is decided by a full read
    (an etcd of this test's own: compaction would take other tests' history)."""
    store = await open_store(etcd_private.endpoint, namespace)
    follower = GcFollower(store, verify_every=2)
    try:
        await store.init_cluster_epoch(10)
        session = await store.kv._connected()  # type: ignore[attr-defined]
        session.ordered_progress = ordered
        await follower.read()
        other = WatermarkStore(store.kv, namespace + "-elsewhere")
        await other.init_cluster_epoch(1)
        for _ in range(3):  # revisions move on outside the namespace
            await other.advance_cluster_epoch()
        head = (await store.kv.get(other.epoch_key)).mod_revision  # type: ignore[union-attr]
        await rpc.KVStub(session.channel).Compact(rpc.CompactionRequest(revision=head))
        _, safe = await follower.read()
        assert follower.last_kind == "checked"
        assert follower._index is not None
        assert follower._index.revision == head
        assert safe.safe_epoch == 9

        async def refused(*_args: object, **_kw: object) -> int:
            raise EtcdUnavailable("127.0.0.1:1", "refused by the test")

        store.kv.count = refused  # type: ignore[attr-defined]
        await follower.read()
        _, safe = await follower.read()
        assert follower.last_kind == "verified"  # the quick check failed: a full one decided
        assert safe.safe_epoch == 9
    finally:
        await follower.close()
        await store.kv.close()


async def test_a_watch_whose_member_died_falls_back_to_another_member(tmp_path: Path) -> None:
    """Three etcd members; the one serving the watch is killed and its stream has ended
    (a gRPC call that is done refuses writes with InvalidStateError, not an RPC error):
    the next read is a full one from a live member, not a failed round, forever."""
    cluster = LocalEtcdCluster(base_dir=tmp_path)
    await asyncio.to_thread(cluster.start)
    store = await open_store(cluster.endpoints, "/follow")
    follower = GcFollower(store)
    try:
        await store.init_cluster_epoch(5)
        assert (await follower.read())[1].safe_epoch == 4
        watch = follower._watch
        assert isinstance(watch, EtcdWatch)
        victim = next(m for m in cluster.members if m.endpoint == watch._endpoint)
        await asyncio.to_thread(victim.stop, kill=True)
        await wait_until(watch._call.done, timeout_s=30, what="the watch stream ended")
        await reads_in_full_then_follows(store, follower, 5)
    finally:
        await follower.close()
        await store.kv.close()
        await asyncio.to_thread(cluster.close)
