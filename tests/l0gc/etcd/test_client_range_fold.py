"""A prefix read page by page into a fold (`EtcdKV.range_fold`), on a real etcd: every key
once across page boundaries, all at the first page's revision while writers race, a
compaction mid-read restarts the fold at a new revision (or fails a read at an explicit
one), never a mix; and a follower built from small pages judges as a full read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import pytest
from aetcd import rpc

from l0gc.contract.kv import Delete, Put
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import compute_safe_epoch
from l0gc.errors import EtcdUnavailable
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.follow import GcFollower
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd

pytestmark = pytest.mark.integration

NAMES = [f"k{i:02d}" for i in range(23)]


class Collected:
    """A fold that keeps what it is given, and how often the read (re)started."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.items: list[tuple[str, bytes]] = []
        self.pages = 0

    def start(self, revision: int, cluster_id: int) -> None:
        assert cluster_id != 0
        self.starts.append(revision)
        self.items = []

    def add(self, items: Iterable[tuple[str, bytes]]) -> None:
        self.pages += 1
        self.items.extend(items)


class AfterPage:
    """Wraps the KV stub: runs `action` once, after the `page`-th Range answer, and keeps
    every Range request."""

    def __init__(self, stub: Any, page: int, action: Callable[[], Awaitable[None]]) -> None:
        self._stub, self._page, self._action = stub, page, action
        self.requests: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    async def Range(self, request: Any, **kwargs: Any) -> Any:
        self.requests.append(request)
        response = await self._stub.Range(request, **kwargs)
        if len(self.requests) == self._page:
            await self._action()
        return response


async def seeded(endpoint: str, prefix: str, page_size: int) -> tuple[EtcdKV, EtcdKV]:
    """A writer that stored NAMES under `prefix` (value: the name), and a reader with
    fixed pages of `page_size` keys."""
    writer = EtcdKV([endpoint], timeout_s=5.0)
    await writer.txn([], [Put(prefix + name, name.encode()) for name in NAMES])
    await writer.txn([], [Put(prefix[:-1] + "0", b"beside the prefix")])
    reader = EtcdKV([endpoint], timeout_s=5.0, page_size=page_size, page_target_bytes=None)
    await reader.connect()
    return writer, reader


def hooked(reader: EtcdKV, page: int, action: Callable[[], Awaitable[None]]) -> AfterPage:
    """Put an `AfterPage` between the reader and etcd."""
    session = reader._session  # test hook into the channel
    assert session is not None
    session.kv = AfterPage(session.kv, page, action)
    return session.kv  # type: ignore[no-any-return]


@pytest.mark.parametrize("page_size", [1, 4, 11, 22, 23, 24])
async def test_every_key_once_in_key_order_across_page_boundaries(
    etcd_server: LocalEtcd, namespace: str, page_size: int
) -> None:
    """Pages of 1, 4, 11 (23 keys: a short last page), 22 (a last page of one), 23 (one
    full page) and 24 keys: no key lost or given twice where one page ends."""
    prefix = f"{namespace}/f/"
    writer, reader = await seeded(etcd_server.endpoint, prefix, page_size)
    try:
        fold = Collected()
        await reader.range_fold(prefix, fold)
        assert [key for key, _ in fold.items] == [prefix + name for name in NAMES]
        assert [value.decode() for _, value in fold.items] == NAMES
        assert fold.pages == -(-len(NAMES) // page_size)
        assert len(fold.starts) == 1
        whole = await reader.range_prefix(prefix)
        assert [(i.key, i.value) for i in whole.items] == fold.items
    finally:
        await reader.close()
        await writer.close()


async def test_pages_after_the_first_are_read_at_its_revision_while_writers_race(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """After the first page (k00-k03), a writer changes a key of a later page, deletes the
    first key of the next page, adds one at a page boundary and one at the end: the fold
    gets the namespace as it was at the first page's revision, nothing of the writes."""
    prefix = f"{namespace}/f/"
    writer, reader = await seeded(etcd_server.endpoint, prefix, 4)

    async def race() -> None:
        changes = [
            Put(prefix + "k09", b"changed"),
            Delete(prefix + "k04"),
            Put(prefix + "k07x", b"new"),
            Put(prefix + "zz", b"new"),
        ]
        await writer.txn([], changes)

    try:
        recording = hooked(reader, 1, race)
        fold = Collected()
        await reader.range_fold(prefix, fold)
        assert fold.items == [(prefix + name, name.encode()) for name in NAMES]
        first, *later = recording.requests
        assert first.revision == 0
        assert later
        assert {request.revision for request in later} == {fold.starts[0]}
        after = Collected()
        await reader.range_fold(prefix, after)  # the writes are there for the next read
        assert after.starts[0] > fold.starts[0]
        assert dict(after.items)[prefix + "k09"] == b"changed"
        assert prefix + "k04" not in dict(after.items)
        assert len(after.items) == len(NAMES) + 1
    finally:
        await reader.close()
        await writer.close()


async def compact_after_a_write(writer: EtcdKV, key: str) -> int:
    """Write `key`, then compact etcd's history up to that write; return its revision."""
    revision = (await writer.txn([], [Put(key, b"written mid-read")])).revision
    session = await writer._connected()
    await rpc.KVStub(session.channel).Compact(rpc.CompactionRequest(revision=revision))
    return revision


async def test_a_compaction_mid_read_restarts_the_fold_at_a_new_revision(
    etcd_private: LocalEtcd, namespace: str
) -> None:
    """The first page's revision is compacted after page 2: the read starts over at the
    current revision and tells the fold (`start` again), which then holds exactly that
    revision's keys, each once (an etcd of this test's own: compaction is global)."""
    prefix = f"{namespace}/f/"
    writer, reader = await seeded(etcd_private.endpoint, prefix, 5)
    written: list[int] = []

    async def compact() -> None:
        written.append(await compact_after_a_write(writer, prefix + "k00a"))

    try:
        hooked(reader, 2, compact)
        fold = Collected()
        await reader.range_fold(prefix, fold)
        assert len(fold.starts) == 2
        assert fold.starts[0] < written[0] <= fold.starts[1]
        names = sorted([*NAMES, "k00a"])
        assert [key for key, _ in fold.items] == [prefix + name for name in names]
    finally:
        await reader.close()
        await writer.close()


async def test_a_fold_at_an_explicit_revision_that_is_compacted_mid_read_fails(
    etcd_private: LocalEtcd, namespace: str
) -> None:
    """A read at a given revision (a follower's check) cannot start over elsewhere: once
    that revision is compacted mid-read it fails, and the caller gets no view at all."""
    prefix = f"{namespace}/f/"
    writer, reader = await seeded(etcd_private.endpoint, prefix, 5)
    try:
        revision = (await reader.range_prefix(prefix)).revision

        async def compact() -> None:
            await compact_after_a_write(writer, prefix + "k00a")

        hooked(reader, 2, compact)
        with pytest.raises(EtcdUnavailable, match="OUT_OF_RANGE"):
            await reader.range_fold(prefix, Collected(), revision=revision)
    finally:
        await reader.close()
        await writer.close()


async def test_a_follower_built_from_small_pages_judges_as_a_full_read(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """300 records read 7 at a time into the follower's index (a malformed one at a page
    boundary, then repaired): M, the count and the pinning partitions equal a full read,
    and a check at every read (the same small pages) finds no difference."""
    kv = EtcdKV([etcd_server.endpoint], timeout_s=5.0, page_size=7, page_target_bytes=None)
    store = WatermarkStore(kv, namespace)
    follower = GcFollower(store, verify_every=1)
    names = [f"t/{i:03d}" for i in range(300)]
    try:
        await store.init_cluster_epoch(100)
        puts = [
            Put(store.partition_key(name), PartitionRecord(name, 50 + i % 13, 1).encode())
            for i, name in enumerate(names)
        ]
        for start in range(0, len(puts), 100):
            await kv.txn([], puts[start : start + 100])
        # pages of 7 keys: the epoch and t/000-t/005, then t/006 (the malformed one)-t/012
        await kv.txn([], [Put(store.partition_key("t/006"), b"{not json")])
        _, safe = await follower.read()
        assert follower.last_kind == "full"
        full = compute_safe_epoch(await store.read_gc_view())
        assert safe == full
        assert (safe.safe_epoch, safe.blocked_partition) == (None, "t/006")
        repaired = PartitionRecord("t/006", 60, 1).encode()
        await kv.txn([], [Put(store.partition_key("t/006"), repaired)])
        _, safe = await follower.read()
        assert follower.last_kind == "checked"  # keys and revisions, at the same revision
        full = compute_safe_epoch(await store.read_gc_view())
        assert safe == full
        assert (safe.safe_epoch, safe.partition_count) == (50, 300)
        assert [p.partition for p in safe.pinning] == [f"t/{i:03d}" for i in range(0, 130, 13)]
    finally:
        await follower.close()
        await kv.close()


async def test_a_page_larger_than_a_slice_is_handed_over_in_slices_each_key_once(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """One page of 4,500 keys reaches the fold in slices of 2,000 (the event loop runs in
    between, so the next page is fetched meanwhile): 2,000 + 2,000 + 500, in key order."""
    prefix = f"{namespace}/s/"
    names = [f"{i:05d}" for i in range(4500)]
    writer = EtcdKV([etcd_server.endpoint], timeout_s=5.0)
    reader = EtcdKV([etcd_server.endpoint], timeout_s=5.0, page_size=4500, page_target_bytes=None)
    try:
        for start in range(0, len(names), 100):
            await writer.txn([], [Put(prefix + n, n.encode()) for n in names[start : start + 100]])
        sizes: list[int] = []

        class Sizes(Collected):
            def add(self, items: Iterable[tuple[str, bytes]]) -> None:
                before = len(self.items)
                super().add(items)
                sizes.append(len(self.items) - before)

        fold = Sizes()
        await reader.range_fold(prefix, fold)
        assert sizes == [2000, 2000, 500]
        assert [key for key, _ in fold.items] == [prefix + n for n in names]
    finally:
        await reader.close()
        await writer.close()
