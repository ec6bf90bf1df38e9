"""References on the publisher: held per entry until released, stored with the record,
kept across a failover, refused past the cap (`watermark.core.references`)."""

from __future__ import annotations

import pytest

from l0gc.contract.record import MAX_RECORD_BYTES, PartitionRecord
from l0gc.contract.references import References
from l0gc.errors import InvalidRecord, ReferencesFull
from l0gc.etcd.store import WatermarkStore
from tests.publishing import Publishing, hosting
from watermark.core.references import ReferenceSet
from watermark.service.publisher import Publisher

from .test_publisher import advance_to, stored


async def commit(publisher: Publisher, partition: str, epoch: int, offset: int, *keys: str) -> None:
    async with publisher.fence(partition, epoch, timeout_s=5) as fence:
        publisher.commit(fence.token, offset, keys)


async def held(store: WatermarkStore, partition: str) -> References | None:
    return (await stored(store, partition)).references


async def test_references_are_held_until_released_and_published_with_the_record() -> None:
    store, publisher = await hosting("p0")
    await advance_to(store, 7)
    await commit(publisher, "p0", 5, 0, "k/a", "k/b")
    await commit(publisher, "p0", 6, 1, "k/c")
    await commit(publisher, "p0", 7, 2)  # an entry naming nothing
    assert publisher.state("p0")["references"] == 3
    await publisher.publish_now()
    assert await held(store, "p0") == References(((0, ("k/a", "k/b")), (1, ("k/c",))))
    publisher.reconciled("p0", 0)  # no names: everything through offset 0 is released
    assert publisher.state("p0")["references"] == 1
    await publisher.publish_now()
    assert await held(store, "p0") == References(((1, ("k/c",)),))


async def test_a_report_naming_what_it_lifted_keeps_what_it_passed_without_lifting() -> None:
    """The second opinion: offset 1 is passed, its key is not named, so it stays held
    while M(p) rises past it (the sweepers' cross-check then refuses it)."""
    store, publisher = await hosting("p0")
    await advance_to(store, 7)
    await commit(publisher, "p0", 5, 0, "k/a")
    await commit(publisher, "p0", 6, 1, "k/b")
    await commit(publisher, "p0", 7, 2, "k/c")
    publisher.reconciled("p0", 2, objects=frozenset({"k/a", "k/c"}))
    assert publisher.state("p0")["watermark"] == 5  # as if every entry were lifted
    await publisher.publish_now()
    assert await held(store, "p0") == References(((1, ("k/b",)),))
    publisher.reconciled("p0", 2, objects=frozenset({"k/b"}))  # lifted at last: released
    await publisher.publish_now()
    assert await held(store, "p0") == References(())  # empty, and still says "sends them"


async def test_references_survive_a_failover() -> None:
    store, old = await hosting("p0")
    await advance_to(store, 7)
    await commit(old, "p0", 5, 0, "k/a")
    await commit(old, "p0", 6, 1, "k/b")
    await old.publish_now()
    new = Publishing(store).publisher("pub-b")
    state = await new.adopt("p0", log_end_offset=1)
    assert state["references"] == 2
    new.reconciled("p0", 1, objects=frozenset({"k/b"}))
    await new.publish_now()
    assert await held(store, "p0") == References(((0, ("k/a",)),))


async def test_past_the_cap_a_commit_is_refused_and_changes_nothing() -> None:
    store, publisher = await hosting("p0", max_references=3)
    await advance_to(store, 7)
    await commit(publisher, "p0", 5, 0, "k/a", "k/b")
    async with publisher.fence("p0", 5, timeout_s=5) as fence:
        with pytest.raises(ReferencesFull, match="--max-references") as refused:
            publisher.commit(fence.token, 1, ("k/c", "k/d"))
        assert refused.value.held == 2
        assert publisher.is_held(fence.token)  # the fence stays: commit it again later
        assert publisher.state("p0")["last_applied_offset"] == 0
        publisher.reconciled("p0", 0)
        publisher.commit(fence.token, 1, ("k/c", "k/d"))
    assert publisher.state("p0")["references"] == 2


async def test_a_key_that_is_not_an_object_key_is_refused() -> None:
    refs = ReferenceSet()
    for bad in ("", "a\nb", "x" * 1025, 7):
        with pytest.raises(InvalidRecord, match="not an object key"):
            refs.check("p0", [bad])
    assert refs.keys == 0
    assert refs.stored() is None  # never sent: the record carries no field at all


def test_a_stored_field_that_is_not_references_is_refused() -> None:
    for bad in (
        {},
        {"offsets": [1], "keys": []},
        {"offsets": [2, 1], "keys": ["a", "b"]},
        {"offsets": [0], "keys": [""]},
        {"offsets": [True], "keys": ["a"]},
        {"offsets": [0], "keys": ["a\tb"]},
    ):
        with pytest.raises(InvalidRecord):
            References.decode(bad)
    assert References.decode({"offsets": [0, 0, 3], "keys": ["a", "b", "c"]}) == References(
        ((0, ("a", "b")), (3, ("c",)))
    )


def test_the_byte_cap_counts_keys_as_the_record_stores_them() -> None:
    """Non-ASCII keys are escaped in the record: at the cap it still fits in 1 MiB."""
    refs = ReferenceSet(max_keys=10**6)
    key = "\U0001f600" * 250  # 1,000 UTF-8 bytes, 6,000+ in the record
    offset = 0

    def one_more() -> None:
        refs.add(offset, refs.check("p0", [f"{key}{offset}"]))

    while refs.keys < 10**4:
        try:
            one_more()
        except ReferencesFull:
            break
        offset += 1
    assert 100 < refs.keys < 200  # the cap, not the key count, stopped it
    record = PartitionRecord("p0", 1, 1, references=refs.stored()).encode()
    assert len(record) < MAX_RECORD_BYTES
    assert PartitionRecord.decode(record, partition="p0").references == refs.stored()
