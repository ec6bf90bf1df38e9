"""MemoryKV keeps etcd's semantics: revisions, mod_revision compares, leases, outages."""

from __future__ import annotations

import pytest

from l0gc.contract.kv import Compare, Delete, Put
from l0gc.errors import EtcdUnavailable, LeaseExpired
from l0gc.etcd.memory import MAX_TXN_OPS, MemoryKV


class FakeClock:
    """A virtual clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_txn_bumps_one_revision_and_tracks_create_and_mod() -> None:
    """A successful txn bumps the revision once; create_revision stays, mod_revision moves."""
    kv = MemoryKV()
    start = kv.revision
    result = await kv.txn([], [Put("a", b"1"), Put("b", b"2")])
    assert result.succeeded
    assert result.revision == start + 1
    first = await kv.get("a")
    assert first is not None
    assert (first.create_revision, first.mod_revision) == (start + 1, start + 1)
    await kv.txn([], [Put("a", b"3")])
    second = await kv.get("a")
    assert second is not None
    assert second.value == b"3"
    assert second.create_revision == start + 1
    assert second.mod_revision == start + 2


async def test_compare_mod_revision_zero_means_absent() -> None:
    """Create-if-absent succeeds once; a second create fails and changes nothing."""
    kv = MemoryKV()
    assert (await kv.txn([Compare("k", 0)], [Put("k", b"first")])).succeeded
    revision = kv.revision
    failed = await kv.txn([Compare("k", 0)], [Put("k", b"second")])
    assert not failed.succeeded
    assert failed.revision == revision
    item = await kv.get("k")
    assert item is not None
    assert item.value == b"first"


async def test_compare_on_stale_mod_revision_fails() -> None:
    """A CAS against an old mod_revision fails after someone else wrote the key."""
    kv = MemoryKV()
    await kv.txn([], [Put("k", b"1")])
    seen = await kv.get("k")
    assert seen is not None
    await kv.txn([], [Put("k", b"2")])
    assert not (await kv.txn([Compare("k", seen.mod_revision)], [Put("k", b"3")])).succeeded


async def test_delete_of_absent_key_does_not_bump_revision() -> None:
    """Deleting nothing changes nothing, as in etcd."""
    kv = MemoryKV()
    revision = kv.revision
    assert (await kv.txn([], [Delete("nope")])).succeeded
    assert kv.revision == revision


async def test_range_prefix_is_sorted_and_bounded_by_prefix() -> None:
    """range_prefix returns exactly the keys under the prefix, sorted, with the revision."""
    kv = MemoryKV()
    await kv.txn([], [Put("/ns/b", b""), Put("/ns/a", b""), Put("/nsx", b""), Put("/n", b"")])
    result = await kv.range_prefix("/ns/")
    assert [item.key for item in result.items] == ["/ns/a", "/ns/b"]
    assert result.revision == kv.revision


async def test_lease_expiry_deletes_keys_on_the_injected_clock() -> None:
    """Keys on a lease vanish once the virtual clock passes the TTL without refresh."""
    clock = FakeClock()
    kv = MemoryKV(now=clock)
    lease = await kv.lease_grant(10)
    await kv.txn([], [Put("leader", b"me", lease=lease), Put("other", b"x")])
    clock.now = 9.0
    assert await kv.lease_refresh(lease)
    clock.now = 18.0
    assert kv.expire_leases() == 0
    assert await kv.get("leader") is not None
    clock.now = 19.0
    assert kv.expire_leases() == 1
    assert await kv.get("leader") is None
    assert await kv.get("other") is not None
    assert not await kv.lease_refresh(lease)


async def test_put_on_expired_lease_raises_and_applies_nothing() -> None:
    """A txn that puts on a lease etcd no longer has fails as a whole with LeaseExpired."""
    clock = FakeClock()
    kv = MemoryKV(now=clock)
    lease = await kv.lease_grant(5)
    clock.now = 6.0
    with pytest.raises(LeaseExpired):
        await kv.txn([], [Put("a", b"1"), Put("leader", b"me", lease=lease)])
    assert await kv.get("a") is None


async def test_lease_revoke_deletes_keys_and_is_idempotent() -> None:
    """Revoking a lease deletes its keys; revoking it again is harmless."""
    kv = MemoryKV()
    lease = await kv.lease_grant(30)
    await kv.txn([], [Put("leader", b"me", lease=lease)])
    await kv.lease_revoke(lease)
    assert await kv.get("leader") is None
    await kv.lease_revoke(lease)


async def test_unavailable_switch_raises_on_every_call() -> None:
    """While `unavailable` is set every call raises EtcdUnavailable and nothing changes."""
    kv = MemoryKV()
    await kv.txn([], [Put("k", b"1")])
    kv.unavailable = True
    with pytest.raises(EtcdUnavailable):
        await kv.get("k")
    with pytest.raises(EtcdUnavailable):
        await kv.txn([], [Put("k", b"2")])
    with pytest.raises(EtcdUnavailable):
        await kv.range_prefix("")
    with pytest.raises(EtcdUnavailable):
        await kv.lease_grant(5)
    kv.unavailable = False
    item = await kv.get("k")
    assert item is not None
    assert item.value == b"1"


async def test_invalid_txn_requests_are_rejected() -> None:
    """A txn naming a key twice or exceeding etcd's op limit is a caller bug."""
    kv = MemoryKV()
    with pytest.raises(ValueError, match="duplicate"):
        await kv.txn([], [Put("k", b"1"), Delete("k")])
    with pytest.raises(ValueError, match="too many"):
        await kv.txn([], [Put(f"k{i}", b"") for i in range(MAX_TXN_OPS + 1)])
