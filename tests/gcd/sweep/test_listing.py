"""Listing a round's prefixes (`gcd.sweep.listing`): each lister looks one page ahead.

The LIST for the next page is sent before a page is decided, guessed from its last key;
a wrong guess, a stop or the delete cap cancels it unread (but counted). Range sharing
is in test_listing_ranges.py, narrowing unlistable prefixes in test_listing_unlistable.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import DeleteResult, ListPage
from gcd.storage.retry import Retrier
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0gc.errors import StorageError
from l0lab.testing.memory import MemoryObjectStore

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
NOW = 2_000_000_000.0
OLD = NOW - 3600
SAFE = 41


def fast_retrier() -> Retrier:
    async def no_sleep(_seconds: float) -> None:
        return None

    return Retrier(Backoff(base_s=0.01, cap_s=0.1, max_attempts=8), no_sleep, random.Random(3))


Request = tuple[str | None, str | None]  # (start_after, continuation_token) of one LIST


class LaggingStore:
    """A MemoryObjectStore whose LIST answers come one event-loop turn after the request.

    Records every LIST sent, how many are in flight, and the ones cancelled before their
    answer; `fail_token` makes the LIST at that continuation token fail at once with
    AccessDenied. No timing is involved: the lag is a single yield to the loop.
    """

    def __init__(self, inner: MemoryObjectStore) -> None:
        self.inner = inner
        self.sent: list[Request] = []
        self.cancelled: list[Request] = []
        self.in_flight = 0
        self.fail_token: str | None = None

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        request = (start_after, continuation_token)
        self.sent.append(request)
        if continuation_token is not None and continuation_token == self.fail_token:
            raise StorageError("injected AccessDenied", code="AccessDenied", retryable=False)
        self.in_flight += 1
        try:
            await asyncio.sleep(0)  # one loop turn, not a wait for time to pass
        except asyncio.CancelledError:
            self.cancelled.append(request)
            raise
        finally:
            self.in_flight -= 1
        return await self.inner.list_page(
            prefix,
            start_after=start_after,
            continuation_token=continuation_token,
            max_keys=max_keys,
        )

    async def delete_batch(self, keys: list[str]) -> DeleteResult:
        return await self.inner.delete_batch(keys)


class InFlightPlan:
    """A plan writer that notes, for each selected key, how many LISTs were in flight."""

    def __init__(self, store: LaggingStore, on_write: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_write = on_write
        self.in_flight: dict[str, int] = {}

    def write(self, key: str, epoch: int, size: int, last_modified_s: float) -> None:
        assert key not in self.in_flight, f"{key} selected twice"
        self.in_flight[key] = self.store.in_flight
        self.on_write()


def lagging_sweeper(store: LaggingStore, **config: object) -> Sweeper:
    options: dict[str, object] = {"layout": LAYOUT, "grace_s": 600.0, "list_concurrency": 1}
    options.update(config)
    plan = options.pop("plan", None)
    return Sweeper(
        store,
        RoundConfig(**options),
        retrier=fast_retrier(),  # type: ignore[arg-type]
        clock=lambda: NOW,
        plan=plan,
    )  # type: ignore[arg-type]


def garbage_in_prefix_5(count: int) -> MemoryObjectStore:
    store = MemoryObjectStore()
    for epoch in range(1, count + 1):
        store.put(LAYOUT.format(5, epoch, "g"), last_modified_s=OLD)
    return store


async def test_next_page_is_in_flight_while_a_page_is_examined() -> None:
    """Page k+1 is requested before page k's objects are decided; no extra LIST is sent."""
    store = LaggingStore(garbage_in_prefix_5(10))
    plan = InFlightPlan(store)
    sweeper = lagging_sweeper(store, page_size=3, plan=plan)
    result = await sweeper.sweep(SAFE, None)
    keys = sorted(plan.in_flight)
    assert len(keys) == 10
    # pages [1-3] [4-6] [7-9] [10]: the next page is in flight while each is examined
    assert [plan.in_flight[key] for key in keys] == [1] * 9 + [0]
    tokens = [keys[2], keys[5], keys[8]]
    assert store.sent == [(None, None)] + [(None, token) for token in tokens]
    assert store.cancelled == []
    summary = result.summary
    assert (summary.list_requests, summary.listed, summary.deleted) == (4, 10, 10)
    assert store.inner.objects == {}


async def test_skip_ahead_guessed_from_the_last_key_costs_no_extra_list() -> None:
    """A page ending in a live key is followed by its skip point, sent ahead; nothing wasted."""
    inner = MemoryObjectStore()
    for prefix in (1, 2, 3):
        for epoch in (1, 2, 100, 101, 102, 103):
            inner.put(LAYOUT.format(prefix, epoch, "k"), last_modified_s=OLD)
    store = LaggingStore(inner)
    plan = InFlightPlan(store)
    result = await lagging_sweeper(store, page_size=3, plan=plan).sweep(10, None)
    assert store.sent == [
        (None, None),
        (f"{ROOT}/0010", None),
        (f"{ROOT}/0020", None),
        (f"{ROOT}/0030", None),
    ]
    assert store.cancelled == []
    assert set(plan.in_flight.values()) == {1}  # the skip point was already asked for
    summary = result.summary
    assert (summary.list_requests, summary.listed, summary.deleted) == (4, 9, 6)
    assert summary.skipped_not_eligible == 3


def junk_after_a_live_key() -> MemoryObjectStore:
    """Prefix 005 ends in keys the layout does not produce, after a live key.

    With pages of 3 the first page is [005/1/g, 005/50/live, 005/zzz]: its last key does
    not parse, so the guess is "go on at the token", but the live key means "skip to
    {root}/0050". The token page would be [005/zzzz, 006/1/g, 006/2/g].
    """
    store = MemoryObjectStore()
    store.put(LAYOUT.format(5, 1, "g"), last_modified_s=OLD)
    store.put(LAYOUT.format(5, 50, "live"), last_modified_s=OLD)
    store.put(f"{ROOT}/005/zzz", last_modified_s=OLD)
    store.put(f"{ROOT}/005/zzzz", last_modified_s=OLD)
    store.put(LAYOUT.format(6, 1, "g"), last_modified_s=OLD)
    store.put(LAYOUT.format(6, 2, "g"), last_modified_s=OLD)
    return store


async def test_a_skip_discards_the_page_sent_ahead_without_examining_it() -> None:
    """A wrong guess: the LIST sent ahead is cancelled and counted, its page never examined."""
    store = LaggingStore(junk_after_a_live_key())
    plan = InFlightPlan(store)
    result = await lagging_sweeper(store, page_size=3, plan=plan).sweep(10, None)
    guessed = (None, f"{ROOT}/005/zzz")
    assert store.sent == [(None, None), guessed, (f"{ROOT}/0050", None)]
    assert store.cancelled == [guessed]
    assert store.inner.keys() == {
        LAYOUT.format(5, 50, "live"),
        f"{ROOT}/005/zzz",
        f"{ROOT}/005/zzzz",
    }
    summary = result.summary
    # examined: 005/1, 005/50, then 006/1, 006/2; the junk of 005 is behind the skip point
    assert (summary.listed, summary.eligible, summary.deleted) == (4, 3, 3)
    assert (summary.unparsable, summary.skipped_not_eligible) == (0, 1)
    assert summary.list_requests == 3  # the discarded one included
    assert summary.errors == 0
    assert result.complete


async def test_a_failed_list_sent_ahead_is_no_error_when_discarded() -> None:
    """The LIST sent on a wrong guess fails; it is dropped, and the round has no error."""
    store = LaggingStore(junk_after_a_live_key())
    store.fail_token = f"{ROOT}/005/zzz"
    result = await lagging_sweeper(store, page_size=3).sweep(10, None)
    assert result.summary.errors == 0
    assert result.summary.deleted == 3
    assert result.complete


async def test_a_failed_list_sent_ahead_is_an_error_when_its_page_is_needed() -> None:
    """A failing LIST for the next page ends the prefix with an error, after the pages before."""
    store = LaggingStore(garbage_in_prefix_5(10))
    store.fail_token = LAYOUT.format(5, 3, "g")  # the token after the first page
    result = await lagging_sweeper(store, page_size=3).sweep(SAFE, None)
    assert result.summary.errors == 1
    assert (result.summary.listed, result.summary.deleted) == (3, 3)
    assert result.summary.list_requests == 2
    assert not result.complete


@pytest.mark.parametrize("ending", ["stop", "cap"])
async def test_stop_or_cap_cancels_the_page_sent_ahead(ending: str) -> None:
    """When listing ends mid-page, the LIST sent ahead is cancelled, counted, not examined."""
    store = LaggingStore(garbage_in_prefix_5(10))
    holder: list[Sweeper] = []

    def stop_now() -> None:
        holder[0].stop.set()

    plan = InFlightPlan(store, stop_now if ending == "stop" else lambda: None)
    sweeper = lagging_sweeper(
        store, page_size=3, plan=plan, max_deletes=2 if ending == "cap" else None
    )
    holder.append(sweeper)
    result = await sweeper.sweep(SAFE, None)
    assert store.sent == [(None, None), (None, LAYOUT.format(5, 3, "g"))]
    assert store.cancelled == [(None, LAYOUT.format(5, 3, "g"))]
    assert result.summary.list_requests == 2
    assert result.summary.listed == (3 if ending == "stop" else 2)
    assert store.in_flight == 0
    assert not result.complete
