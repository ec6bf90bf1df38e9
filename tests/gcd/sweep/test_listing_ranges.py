"""Listers share the key space (split ranges) and size their pages to what they are for
(`gcd.sweep.listing`)."""

from __future__ import annotations

import asyncio
import random

import pytest

from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import DeleteResult, ListPage, StoreFeatures
from gcd.storage.retry import Retrier
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.testing.memory import MemoryObjectStore

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
NOW = 2_000_000_000.0
OLD = NOW - 3600
TURNS = 5  # loop turns a LIST answer takes: concurrent LISTs overlap


class CountingStore:
    """A MemoryObjectStore whose LIST answers come `TURNS` loop turns after the request;
    records each LIST (prefix, start_after, token, max_keys), the keys returned, and
    the most LISTs in flight at once per listing prefix and in all.

    Its virtual clock (`clock`, the sweeper's listing clock) models a store whose LIST
    takes `latency_s`: a LIST that had k LISTs in flight at once moves it on by
    `latency_s` / k (they overlap: a remote store), or by `latency_s` with `serial` (one
    at a time: a store whose CPU is the limit)."""

    def __init__(
        self, inner: MemoryObjectStore, latency_s: float = 0.0, *, serial: bool = False
    ) -> None:
        self.inner = inner
        self.latency_s = latency_s
        self.serial = serial
        self.now = 0.0
        self.sent: list[tuple[str, str | None, str | None, int]] = []
        self.returned = 0
        self.in_flight: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_all = 0

    def clock(self) -> float:
        return self.now

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        self.sent.append((prefix, start_after, continuation_token, max_keys))
        self.in_flight[prefix] = self.in_flight.get(prefix, 0) + 1
        self.peak[prefix] = max(self.peak.get(prefix, 0), self.in_flight[prefix])
        self.peak_all = max(self.peak_all, sum(self.in_flight.values()))
        try:
            overlapping = sum(self.in_flight.values())
            for _ in range(TURNS):  # loop turns, not a wait for time to pass
                await asyncio.sleep(0)
                overlapping = max(overlapping, sum(self.in_flight.values()))
            self.now += self.latency_s / (1 if self.serial else overlapping)
        finally:
            self.in_flight[prefix] -= 1
        page = await self.inner.list_page(
            prefix,
            start_after=start_after,
            continuation_token=continuation_token,
            max_keys=max_keys,
        )
        self.returned += len(page.objects)
        return page

    async def delete_batch(self, keys: list[str]) -> DeleteResult:
        return await self.inner.delete_batch(keys)

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        return await self.inner.get_object(key, max_bytes=max_bytes)


class VersionedCountingStore(CountingStore):
    """A CountingStore that says it is a versioned bucket and lists versions (one each)."""

    async def detect(self) -> StoreFeatures:
        return self.detected

    @property
    def detected(self) -> StoreFeatures:
        return StoreFeatures(versioning="Enabled")

    async def list_versions_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        return await self.list_page(
            prefix,
            start_after=start_after,
            continuation_token=continuation_token,
            max_keys=max_keys,
        )

    async def lock_state(self, key: str, version_id: str) -> tuple[str, float | None]:
        raise AssertionError("nothing is locked here")


def crowded(store: MemoryObjectStore) -> None:
    """Directories 000-099 (all under {root}/0), 3 garbage keys each."""
    for prefix in range(100):
        for epoch in range(1, 4):
            store.put(LAYOUT.format(prefix, epoch, "g"), last_modified_s=OLD)


def sweeper(store: CountingStore, **config: object) -> Sweeper:
    options: dict[str, object] = {"layout": LAYOUT, "grace_s": 600.0}
    options.update(config)
    retrier = Retrier(Backoff(base_s=0.001, cap_s=0.001, max_attempts=2))
    return Sweeper(
        store,
        RoundConfig(**options),
        retrier=retrier,  # type: ignore[arg-type]
        clock=lambda: NOW,
        monotonic=store.clock,
    )


def dense(inner: MemoryObjectStore) -> None:
    """Directories 000-099 (all under {root}/0), 30 garbage keys each."""
    for prefix in range(100):
        for epoch in range(1, 31):
            inner.put(LAYOUT.format(prefix, epoch, "g"), last_modified_s=OLD)


async def test_prefixes_000_to_099_keep_four_listers_busy_on_a_remote_store() -> None:
    """All keys under {root}/0 on a store where a LIST waits on latency: the deleters
    wait on one lister, so more start and share its child prefixes instead of one
    streaming."""
    inner = MemoryObjectStore()
    dense(inner)
    store = CountingStore(inner, latency_s=0.05)
    # pages of at most 100 keys (3 directories): the bucket is many pages long
    result = await sweeper(store, list_concurrency=4, page_size=100).sweep(100, None)
    assert inner.objects == {}
    assert result.summary.deleted == 3000
    assert result.complete
    assert store.peak_all >= 3  # parallel streams, though every key is under {root}/0
    narrower = {p for p, *_ in store.sent if p.startswith(f"{ROOT}/0") and p != f"{ROOT}/0"}
    assert narrower  # {root}/0 was shared out as child prefixes ({root}/05, {root}/073...)
    assert result.summary.listed == 3000  # each key examined by one range
    # no page runs past its range: a range is a prefix, and the store stops at its end
    assert store.returned == 3000


async def test_a_store_that_answers_one_list_at_a_time_gets_at_most_two_listers() -> None:
    """The same bucket on a store that serves one LIST at a time (its CPU is the limit):
    a second lister examines no more pages per second, so no third starts, and every
    key still goes."""
    inner = MemoryObjectStore()
    dense(inner)
    store = CountingStore(inner, latency_s=0.005, serial=True)
    result = await sweeper(store, list_concurrency=4, page_size=100).sweep(100, None)
    assert inner.objects == {}
    assert result.summary.deleted == 3000
    assert result.complete
    assert store.peak_all <= 2
    assert len(store.sent) < 3000 / 100 * 2  # no page listed twice over


async def test_a_remote_store_gets_more_listers_where_the_listing_skips() -> None:
    """Ten listing prefixes of live keys and little garbage on a remote store: the
    deleters wait on the listing (nothing to delete is listing-bound by definition), so
    the one lister grows to the limit, taking prefixes not started."""
    inner = MemoryObjectStore()
    for prefix in range(0, 1000, 25):
        inner.put(LAYOUT.format(prefix, 1, "g"), last_modified_s=OLD)
        for index in range(50):
            inner.put(LAYOUT.format(prefix, 100 + index, "live"), last_modified_s=OLD)
    store = CountingStore(inner, latency_s=0.05)
    result = await sweeper(store, list_concurrency=4).sweep(20, None)
    assert result.summary.deleted == 40
    assert len(inner.objects) == 40 * 50
    assert store.peak_all >= 3


async def test_one_lister_never_splits() -> None:
    """With one lister there is nobody to hand work to: the root is listed whole."""
    inner = MemoryObjectStore()
    for prefix in range(0, 100, 7):
        inner.put(LAYOUT.format(prefix, 1, "g"), last_modified_s=OLD)
    store = CountingStore(inner)
    await sweeper(store, list_concurrency=1).sweep(10, None)
    assert {p for p, *_ in store.sent} == {f"{ROOT}/"}
    assert all(s is None for _, s, _, _ in store.sent)
    assert inner.objects == {}


async def test_probes_return_few_live_keys_at_100_live_per_garbage_key() -> None:
    """Directories of 20 garbage + 2,000 live keys: the server returns <= 5x the garbage."""
    inner = MemoryObjectStore()
    live = set()
    for prefix in range(0, 1000, 50):
        for epoch in range(1, 21):
            inner.put(LAYOUT.format(prefix, epoch, "g"), last_modified_s=OLD)
        for index in range(2000):
            key = LAYOUT.format(prefix, 100 + index, "live")
            inner.put(key, last_modified_s=OLD)
            live.add(key)
    store = CountingStore(inner)
    result = await sweeper(store, list_concurrency=4).sweep(20, None)
    assert inner.keys() == live
    assert result.summary.deleted == 400
    assert store.returned <= 5 * 400
    assert max(size for *_, size in store.sent) == 32  # never a full page of live keys


async def test_pages_grow_where_every_key_is_eligible() -> None:
    """A prefix of 3,000 garbage keys: 32, 128, 512, then full pages."""
    inner = MemoryObjectStore()
    for epoch in range(1, 3001):
        inner.put(LAYOUT.format(417, epoch, "g"), last_modified_s=OLD)
    store = CountingStore(inner)
    await sweeper(store, list_concurrency=1).sweep(5000, None)
    assert [size for *_, size in store.sent] == [32, 128, 512, 1000, 1000, 1000]
    assert inner.objects == {}


@pytest.mark.parametrize("seed", range(6))
async def test_split_ranges_and_probes_delete_exactly_the_eligible_keys(seed: int) -> None:
    """Random buckets (junk, young, live, garbage): exactly the deletable keys go."""
    rng = random.Random(seed)
    inner = MemoryObjectStore()
    expected = set()
    safe = 50
    for drawn in rng.sample(range(1000), rng.randint(1, 60)):
        prefix = drawn if rng.random() < 0.5 else drawn % 100  # often crowd {root}/0
        for epoch in rng.sample(range(1, 120), rng.randint(1, 40)):
            young = rng.random() < 0.05
            key = LAYOUT.format(prefix, epoch, f"n{rng.randint(0, 9)}")
            inner.put(key, last_modified_s=NOW if young else OLD)
            if epoch <= safe and not young:
                expected.add(key)
        if rng.random() < 0.2:
            inner.put(f"{ROOT}/{prefix:03d}/junk", last_modified_s=OLD)
    before = inner.keys()
    store = CountingStore(inner)
    concurrency = rng.choice([2, 4, 8])
    page = rng.choice([5, 40, 1000])
    result = await sweeper(store, list_concurrency=concurrency, page_size=page).sweep(safe, None)
    assert before - inner.keys() == expected
    assert result.summary.deleted == len(expected)
    assert result.summary.errors == 0


async def test_unordered_listings_are_never_split_and_ask_for_full_pages() -> None:
    """An unordered listing: no range is shared (no StartAfter at all), every page asks
    for the configured page size, and every key is listed exactly once."""
    inner = MemoryObjectStore()
    crowded(inner)
    store = CountingStore(inner)
    config = {"list_concurrency": 4, "page_size": 100, "unordered_listing": True}
    result = await sweeper(store, **config).sweep(100, None)
    assert inner.objects == {}
    assert all(start is None for _, start, _, _ in store.sent)
    assert {size for *_, size in store.sent} == {100}
    assert all(prefix.endswith("/") for prefix, *_ in store.sent)
    assert result.summary.listed == 300
    assert store.returned == 300


async def test_versioned_listings_are_never_split_and_ask_for_full_pages() -> None:
    """ListObjectVersions pages by KeyMarker: full pages, no probes, no shared ranges
    (a dry run: the sizes and starts of the LISTs are what is checked)."""
    inner = MemoryObjectStore()
    crowded(inner)
    store = VersionedCountingStore(inner)
    config = {"list_concurrency": 4, "page_size": 100, "dry_run": True}
    result = await sweeper(store, **config).sweep(100, None)
    assert {size for *_, size in store.sent if size != 1} == {100}  # 1: nested-claim probes
    assert not [start for _, start, token, size in store.sent if start and size != 1]
    assert result.summary.listed == 300
    assert result.summary.eligible == 300
