"""`gcd.scrub.run.Scrubber` on in-memory fakes (etcd: MemoryKV; the store: a bucket whose
HEAD can fail or hang): one HEAD per referenced key, a store's failure is unknown and
never missing, a key released during the run is no finding."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gcd.rules.layout import KeyLayout
from gcd.scrub.findings import Cause, HeadAnswer
from gcd.scrub.run import Scrubber, ScrubSettings
from l0gc.contract.namespace import Publication
from l0gc.contract.references import References
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.memory import MemoryObjectStore

LAYOUT = KeyLayout.default("level_zero/data")
NS = "/scrub"


@dataclass
class HeadingStore(MemoryObjectStore):
    """The memory bucket with a HEAD; `faults[key]` answers (or hangs) instead, in turn."""

    heads: list[str] = field(default_factory=list)
    faults: dict[str, list[HeadAnswer | None]] = field(default_factory=dict)
    """None in the list: hang (the deadline must end it)."""
    on_head: Callable[[str], Awaitable[None]] | None = None

    async def head(self, key: str) -> HeadAnswer:
        """One HEAD: a scripted fault, or the truth of the bucket."""
        self.heads.append(key)
        if self.on_head is not None:
            await self.on_head(key)
        script = self.faults.get(key)
        if script:
            answer = script.pop(0)
            if answer is None:
                await asyncio.Event().wait()  # never answers: the deadline ends it
            assert answer is not None
            return answer
        if key in self.objects:
            return HeadAnswer(200)
        return HeadAnswer(404, "NoSuchKey")


async def referencing(keys: dict[str, list[str]]) -> WatermarkStore:
    """A namespace at cluster epoch 10 whose partitions reference `keys` (partition ->
    keys, one entry each)."""
    store = WatermarkStore(MemoryKV(), NS)
    await store.init_cluster_epoch(1)
    for name in keys:
        await store.register_partition(name)
    for _ in range(9):
        await store.advance_cluster_epoch()
    for name, named in keys.items():
        await publish(store, name, named)
    return store


async def publish(store: WatermarkStore, name: str, keys: list[str]) -> None:
    """Publish `name` at M(p) 8 referencing `keys` at offset 1."""
    owned = await store.acquire_ownership(name, "pub")
    refs = References(((1, tuple(keys)),)) if keys else References()
    await store.publish_one(Publication(name, "pub", owned.owner_epoch, 8, references=refs))


def key(epoch: int, name: str) -> str:
    """A layout key."""
    return LAYOUT.format(5, epoch, name)


def scrubber(store: WatermarkStore, objects: HeadingStore, **settings: object) -> Scrubber:
    """A scrubber of the test namespace, fast and unpaced."""
    options: dict[str, object] = {"max_requests_per_second": 10_000.0, **settings}
    return Scrubber(
        store,
        objects,
        LAYOUT,
        store_name="mem://b/level_zero/data",
        settings=ScrubSettings(**options),  # type: ignore[arg-type]
        clock=lambda: 10_000.0,
    )


async def test_a_healthy_namespace_costs_one_head_per_referenced_key() -> None:
    """Every referenced key present: nothing reported, one HEAD each (a key two
    partitions reference is HEADed once), one LIST probe and one listing page."""
    shared = key(9, "shared")
    refs = {"a/0": [key(9, "a"), shared], "a/1": [key(9, "b"), shared]}
    store = await referencing(refs)
    objects = HeadingStore()
    for name in {k for keys in refs.values() for k in keys}:
        objects.put(name, last_modified_s=9_000.0)
    report = await scrubber(store, objects).run()
    assert report.healthy
    assert (report.referenced, report.present, report.head_requests) == (3, 3, 3)
    assert sorted(objects.heads) == sorted({k for keys in refs.values() for k in keys})
    assert report.list_requests == 2
    doc = report.to_dict()
    assert (doc["version"], doc["healthy"]) == (1, True)
    assert doc["references"] == {
        "partitions": 2,
        "referencing": 2,
        "keys": 3,
        "present": 3,
        "missing": 0,
        "unknown": 0,
        "released": 0,
    }


async def test_a_5xx_or_a_timeout_is_unknown_never_missing() -> None:
    """A key whose HEAD fails twice (503, then a hang past the deadline) is unknown; one
    that fails once is re-checked and present; none is missing."""
    flaky, failing, hanging = key(9, "flaky"), key(9, "failing"), key(9, "hanging")
    store = await referencing({"a/0": [flaky, failing, hanging]})
    objects = HeadingStore()
    for name in (flaky, failing, hanging):
        objects.put(name)
    objects.faults = {
        flaky: [HeadAnswer(503, "SlowDown")],
        failing: [HeadAnswer(500, "InternalError"), HeadAnswer(None, "Timeout")],
        hanging: [None, None],
    }
    report = await scrubber(store, objects, head_deadline_s=0.05).run()
    assert report.missing == ()
    assert {u.reference.key: u.code for u in report.unknown} == {
        failing: "Timeout",
        hanging: "Timeout",
    }
    assert report.present == 1
    assert report.head_requests == 6  # three, and the three unknown ones once more
    assert not report.healthy


async def test_a_missing_key_without_a_journal_says_so() -> None:
    """A referenced key the store does not hold is missing; with no journal given the
    cause is `journal_not_read`."""
    gone = key(9, "gone")
    store = await referencing({"a/0": [gone]})
    report = await scrubber(store, HeadingStore()).run()
    assert [(m.reference.key, m.cause) for m in report.missing] == [(gone, Cause.JOURNAL_NOT_READ)]


async def test_a_key_released_while_it_was_headed_is_no_finding() -> None:
    """The reconciler released the entry (and a sweeper then rightly deleted the key)
    between the read of the records and the HEAD: the second read drops it."""
    gone = key(9, "released")
    store = await referencing({"a/0": [gone]})
    objects = HeadingStore()

    async def release(_key: str) -> None:
        await publish(store, "a/0", [])

    objects.on_head = release
    report = await scrubber(store, objects).run()
    assert (report.missing, report.released) == ((), 1)
    assert report.healthy
