"""Issue 25, finding 6: a prefix whose listing keeps failing is narrowed, named and skipped
(`gcd.sweep.listing.RoundLister`).

The store here fails every listing whose range holds one poison name, as Azurite does
for a blob named with \\x01 (tests/gcd/storage/azure/test_client_claims.py runs the real one).
"""

from __future__ import annotations

import random
from typing import Any

from gcd.observe.metrics import SweeperMetrics
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import ListPage, status_fault
from gcd.storage.retry import Retrier
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.testing.memory import MemoryObjectStore

LAYOUT = KeyLayout.default("level_zero/data")
BUDGET = Backoff(base_s=0.0, cap_s=0.0, max_attempts=3)


class PoisonedStore(MemoryObjectStore):
    """Every LIST whose range holds `poison` fails with a 500 (None: every LIST does)."""

    def __init__(self, poison: str | None) -> None:
        super().__init__()
        self.poison = poison

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        after = options.get("continuation_token") or options.get("start_after")
        if self.poison is None or (
            self.poison.startswith(prefix) and (after is None or after < self.poison)
        ):
            self.list_requests += 1
            raise status_fault("500")
        return await super().list_page(prefix, **options)


async def sweep(store: MemoryObjectStore, **options: Any) -> tuple[Any, SweeperMetrics]:
    async def no_sleep(_: float) -> None:
        return None

    metrics = SweeperMetrics()
    config = RoundConfig(layout=LAYOUT, grace_s=0.0, backoff=BUDGET, **options)
    sweeper = Sweeper(
        store,
        config,
        metrics=metrics,
        clock=lambda: 100.0,
        retrier=Retrier(BUDGET, sleep=no_sleep, rng=random.Random(1)),
    )
    return await sweeper.sweep(5, None), metrics


async def test_one_poison_name_costs_its_prefix_directory_only() -> None:
    poison = LAYOUT.format(417, 1, "bad\x01")
    store = PoisonedStore(poison)
    garbage = {LAYOUT.format(p, e, "g") for p in (1, 410, 416, 418, 450, 999) for e in (1, 5)}
    for key in (*garbage, poison, LAYOUT.format(417, 3, "g")):
        store.put(key)
    result, metrics = await sweep(store, list_concurrency=4, page_size=2)
    summary = result.summary
    assert summary.unlistable_prefixes == ("level_zero/data/417",)
    assert (summary.deleted, summary.errors) == (len(garbage), 1)
    assert store.keys() == {poison, LAYOUT.format(417, 3, "g")}
    assert metrics.prefixes_unlistable._value.get() == 1
    assert not result.complete


async def test_an_outage_is_not_narrowed_into_a_thousand_listings() -> None:
    """Every LIST fails: each listing prefix costs its budget and ten probes, then is named."""
    store = PoisonedStore(None)
    store.put(LAYOUT.format(1, 1, "g"))
    result, _ = await sweep(store, list_concurrency=4)
    prefixes = tuple(f"level_zero/data/{d}" for d in range(10))
    assert result.summary.unlistable_prefixes == prefixes
    assert result.summary.errors == 10
    assert store.list_requests == 10 * (BUDGET.max_attempts + 10)


async def test_a_listing_failing_mid_prefix_resumes_where_it_stopped() -> None:
    """Pages before the failure are not listed twice: each key is deleted once."""
    poison = LAYOUT.format(417, 1, "bad\x01")
    store = PoisonedStore(poison)
    garbage = {LAYOUT.format(p, 1, f"g{i}") for p in (400, 405, 417, 480) for i in range(3)}
    for key in (*garbage, poison):
        store.put(key)
    result, _ = await sweep(store, list_concurrency=1, page_size=2)
    keys_417 = {k for k in garbage if k.startswith("level_zero/data/417/")}
    assert result.summary.unlistable_prefixes == ("level_zero/data/417",)
    assert result.summary.deleted == len(garbage) - len(keys_417)
    assert store.keys() == {poison, *keys_417}


class PoisonPageStore(MemoryObjectStore):
    """Every LIST whose answer would hold `poison` fails with a 500 (so pages before it,
    and probes that do not reach it, answer)."""

    def __init__(self, poison: str) -> None:
        super().__init__()
        self.poison = poison
        self.starts: list[tuple[str, str | None]] = []

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        if options.get("continuation_token") is None:
            self.starts.append((prefix, options.get("start_after")))
        page = await super().list_page(prefix, **options)
        if any(obj.key == self.poison for obj in page.objects):
            raise status_fault("500")
        return page


async def test_a_poison_name_in_a_shared_range_is_narrowed_within_that_range() -> None:
    """Keys crowd {root}/0 so listers share its child prefixes (`gcd.rules.listsplit`);
    the range that meets the poison is narrowed within its own prefix: every other key
    is examined once and deleted once, and only the poison's directory is named."""
    poison = LAYOUT.format(80, 0, "bad\x01")
    store = PoisonPageStore(poison)
    keys = {LAYOUT.format(p, e, "g") for p in range(100) for e in (1, 2, 3)}
    for key in (*keys, poison):
        store.put(key)
    result, _ = await sweep(store, list_concurrency=4, page_size=10)
    summary = result.summary
    in_080 = {key for key in keys if key.startswith("level_zero/data/080/")}
    assert summary.unlistable_prefixes == ("level_zero/data/080",)
    assert store.keys() == in_080 | {poison}
    assert (summary.deleted, summary.listed, summary.errors) == (297, 297, 1)
    shared = {
        prefix
        for prefix, _ in store.starts
        if prefix.startswith("level_zero/data/0") and len(prefix) == len("level_zero/data/00")
    }
    assert shared  # {root}/0 was shared out as child prefixes
