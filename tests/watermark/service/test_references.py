"""References on the publisher: held per entry until released, stored with the record,
kept across a failover, refused past the cap (`watermark.core.references`)."""

from __future__ import annotations

import json
import random

import pytest

from l0gc.contract.record import MAX_RECORD_BYTES, PartitionRecord
from l0gc.contract.references import References
from l0gc.errors import ConfigError, InvalidRecord, ReferencesFull
from l0gc.etcd.store import WatermarkStore
from tests.publishing import Publishing, hosting
from watermark.core.references import ReferenceSet
from watermark.service.publisher import Publisher

from .test_publisher import advance_to, stored


async def commit(publisher: Publisher, partition: str, epoch: int, offset: int, *keys: str) -> None:
    """Through the embedded API's `Fence.commit`, naming `keys`."""
    async with publisher.fence(partition, epoch, timeout_s=5) as fence:
        fence.commit(offset, keys)


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


async def crashed_after_a_commit() -> tuple[WatermarkStore, Publisher]:
    """p0's owner published entries 0 and 1 (k/a, k/b), then committed entry 2 (k/c)
    and crashed before publishing it; the store and p0's next owner, not adopted yet."""
    store, old = await hosting("p0")
    await advance_to(store, 7)
    await commit(old, "p0", 5, 0, "k/a")
    await commit(old, "p0", 6, 1, "k/b")
    await old.publish_now()
    await commit(old, "p0", 7, 2, "k/c")  # in the log, in no record
    return store, Publishing(store).publisher("pub-b")


async def test_a_reference_committed_after_the_last_publish_survives_a_crash() -> None:
    """The new owner learns entry 2's key with the log end; a reconciler that then passes
    entry 2 without naming k/c releases k/a, k/b and keeps k/c (issue 54's crash gap)."""
    store, new = await crashed_after_a_commit()
    state = await new.adopt(
        "p0",
        log_end_offset=2,
        log_references=References(((0, ("k/a",)), (1, ("k/b",)), (2, ("k/c",)))),
    )
    assert state["references"] == 3  # 0 and 1 from the record, 2 from the log
    assert state["references_from"] is None  # the log end is known now
    new.reconciled("p0", 2, objects=frozenset({"k/a", "k/b"}))
    await new.publish_now()
    assert await held(store, "p0") == References(((2, ("k/c",)),))


async def test_a_log_end_without_the_keys_of_its_entries_is_refused() -> None:
    """An owner that holds references takes no log end past its applied log without the
    keys: it says from which offset, and nothing changes; the reconciler's handshake
    then brings them."""
    store, new = await crashed_after_a_commit()
    state = await new.adopt("p0")
    assert state["log_end_wanted"] is True
    assert state["references_from"] == 2  # entry 2 was never published
    with pytest.raises(ConfigError, match=r"log_references.* from offset 2 through 2"):
        await new.adopt("p0", log_end_offset=2)
    new.reconciled("p0", 0, objects=frozenset())  # lifted nothing; asks for the log end
    with pytest.raises(ConfigError, match="log_references"):
        new.reconciled("p0", 2, log_end_offset=2)
    assert new.state("p0")["log_end_known"] is False
    assert new.state("p0")["reconciled_offset"] == 0  # the refused report moved nothing
    new.reconciled(
        "p0",
        2,
        log_end_offset=2,
        objects=frozenset({"k/b"}),
        log_references=References(((2, ("k/c",)),)),  # only what it was asked for
    )
    assert new.state("p0")["log_end_known"] is True
    await new.publish_now()
    assert await held(store, "p0") == References(((0, ("k/a",)), (2, ("k/c",))))


async def test_log_references_past_the_log_end_or_the_cap_change_nothing() -> None:
    _, new = await crashed_after_a_commit()
    await new.adopt("p0")
    with pytest.raises(ConfigError, match="offset 3, past the log end 2"):
        new.learn_log_end("p0", 2, References(((2, ("k/c",)), (3, ("k/d",)))))
    too_many = References(((2, tuple(f"k/{n}" for n in range(10_000))),))
    with pytest.raises(ReferencesFull):
        new.learn_log_end("p0", 2, too_many)
    assert new.state("p0")["log_end_known"] is False
    assert new.state("p0")["references"] == 2
    # Entries the state applied are not taken twice: only offset 2 is new.
    new.learn_log_end("p0", 2, References(((0, ("k/x",)), (1, ("k/y",)), (2, ("k/c",)))))
    assert new.state("p0")["references"] == 3


async def test_a_partition_without_references_takes_a_log_end_as_before() -> None:
    store, old = await hosting("p0")
    await advance_to(store, 7)
    async with old.fence("p0", 5, timeout_s=5) as fence:
        old.commit(fence.token, 0)
    await old.publish_now()
    new = Publishing(store).publisher("pub-b")
    state = await new.adopt("p0", log_end_offset=3)
    assert state["log_end_known"] is True
    assert state["references"] is None


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


def test_the_kept_text_is_what_encoding_every_key_writes() -> None:
    """The record a publisher writes, the references spliced in as text, is byte for
    byte the record encoded as one document (hostile keys: quotes, backslashes,
    non-ASCII, a surrogate pair), sealed or not, after every add and release."""
    rng = random.Random(54)
    alphabet = ["a", "/", '"', "\\", "é", "\U0001f600", "0", "-", "<", "'"]
    refs = ReferenceSet(max_keys=10**6)
    assert refs.stored() is None
    refs.add(0, ())  # an entry naming nothing: the writer sends references
    offset = 1
    for _ in range(400):
        if rng.random() < 0.6:
            keys = ["".join(rng.choices(alphabet, k=rng.randint(1, 12))) for _ in range(3)]
            refs.add(offset, refs.check("p0", keys[: rng.randint(0, 3)]))
            offset += 1
        else:
            named = {key for _, held in refs.stored().entries for key in held}  # type: ignore[union-attr]
            lifted = None if rng.random() < 0.3 else set(rng.sample(sorted(named), len(named) // 2))
            refs.release(rng.randint(-1, offset), lifted)
        stored = refs.stored()
        assert stored is not None
        assert refs.stored() is stored  # unchanged: the same value, its text kept
        for sealed in (None, 3):
            record = PartitionRecord("p0", 1, 1, references=stored, sealed_owner_epoch=sealed)
            plain = json.loads(record.encode())
            assert (
                record.encode() == json.dumps(plain, separators=(",", ":"), sort_keys=True).encode()
            )
            assert PartitionRecord.decode(record.encode(), partition="p0").references == stored
