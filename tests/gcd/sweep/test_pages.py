"""Deciding one listed page (`gcd.sweep.pages.PageDecider`), without a lister or a store."""

from __future__ import annotations

import asyncio
from typing import Any

from gcd.observe.events import DeleteBasis
from gcd.observe.telemetry import PageExamined
from gcd.rules.candidate import Candidate
from gcd.rules.cursor import Cursor
from gcd.rules.layout import KeyLayout
from gcd.storage.objectstore import ListPage, ObjectInfo
from gcd.sweep.nesting import NestedRoots
from gcd.sweep.pages import LOGGED_UNPARSABLE, PageDecider
from gcd.sweep.roundstate import BatchQueue, RoundState
from gcd.sweep.sweeper import RoundConfig
from l0gc.contract.binding import claim_key

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
NOW = 2_000_000_000.0
OLD = NOW - 3600
SAFE = 41


async def nothing_nested(_key: str) -> bool:
    return False


class Plan:
    """A plan writer that keeps the keys it is given."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def write(self, key: str, epoch: int, size: int, last_modified_s: float) -> None:
        self.keys.append(key)


def decider_for(**config: Any) -> tuple[PageDecider, BatchQueue, list[object], Plan]:
    run = RoundState(SAFE, DeleteBasis(SAFE, None, None))
    run.nested = NestedRoots(ROOT, nothing_nested)
    queue: BatchQueue = asyncio.Queue()
    events: list[object] = []
    plan = Plan()
    decider = PageDecider(
        run,
        queue,
        RoundConfig(layout=LAYOUT, grace_s=600.0, **config),
        clock=lambda: NOW,
        plan=plan,
        emit=events.append,
    )  # type: ignore[arg-type]
    return decider, queue, events, plan


def page_of(*objects: tuple[str, float]) -> ListPage:
    return ListPage(tuple(ObjectInfo(key, 10, modified) for key, modified in objects), None)


def queued(queue: BatchQueue) -> list[list[Candidate]]:
    batches = []
    while not queue.empty():
        batch = queue.get_nowait()
        assert batch is not None
        batches.append(batch)
    return batches


async def test_a_page_is_decided_counted_and_ends_at_the_first_live_key() -> None:
    """Garbage is selected and batched, the young kept, the first key above M ends the
    prefix directory: the key after it is not examined; one event says what was counted."""
    decider, queue, events, plan = decider_for(batch_size=2)
    garbage = [LAYOUT.format(5, epoch, "g") for epoch in (1, 2, 3)]
    live = [(LAYOUT.format(5, epoch, "live"), OLD) for epoch in (50, 51)]
    page = page_of(
        *((key, OLD) for key in garbage), (LAYOUT.format(5, 4, "young"), NOW - 60), *live
    )
    cursor = await decider.examine(f"{ROOT}/005", Cursor(), page)
    assert cursor is None  # the rest of {root}/005 is above M
    counts = decider.run.counts
    assert (counts.listed, counts.eligible, counts.skipped_young, counts.skipped_not_eligible) == (
        5,
        3,
        1,
        1,
    )
    assert events == [PageExamined(5, (("not_eligible", 1), ("too_young", 1)))]
    assert [[c.key for c in batch] for batch in queued(queue)] == [garbage[:2]]
    assert [c.key for c in decider.run.batch] == garbage[2:]  # cut, not full yet
    assert plan.keys == garbage
    assert decider.run.young_ready_at_s == NOW - 60 + 600.0


async def test_the_delete_cap_stops_selecting_within_the_page() -> None:
    """With max_deletes 2, the page's third eligible key is neither selected nor examined."""
    decider, _, events, plan = decider_for(max_deletes=2)
    page = page_of(*((LAYOUT.format(5, epoch, "g"), OLD) for epoch in (1, 2, 3)))
    await decider.examine(f"{ROOT}/005", Cursor(), page)
    assert decider.run.capped
    assert decider.run.counts.eligible == 2
    assert plan.keys == [LAYOUT.format(5, epoch, "g") for epoch in (1, 2)]
    assert events == [PageExamined(2)]


async def test_a_dry_run_plans_what_it_would_delete_and_batches_nothing() -> None:
    """A dry run writes every selected key to the plan; no batch is cut."""
    decider, queue, _, plan = decider_for(dry_run=True, batch_size=1)
    keys = [LAYOUT.format(7, epoch, "g") for epoch in (1, 2)]
    await decider.examine(f"{ROOT}/007", Cursor(), page_of(*((key, OLD) for key in keys)))
    assert plan.keys == keys
    assert queue.empty()
    assert decider.run.batch == []


async def test_the_claim_is_never_examined_and_unparsable_keys_are_counted() -> None:
    """The namespace's claim object is skipped; keys outside the layout are counted as
    unparsable (never selected), the first few logged by name."""
    decider, _, events, plan = decider_for()
    junk = [f"{ROOT}/005/zz{index:02d}" for index in range(LOGGED_UNPARSABLE + 2)]
    page = page_of((claim_key(ROOT), OLD), *((key, OLD) for key in junk))
    await decider.examine(f"{ROOT}/", Cursor(), page)
    assert decider.run.counts.unparsable == len(junk)
    assert decider.run.counts.listed == len(junk)
    assert decider.run.unparsable_logged == len(junk)
    assert events == [PageExamined(len(junk), (("unparsable", len(junk)),))]
    assert plan.keys == []


async def test_a_key_under_a_nested_root_is_kept_and_counted_as_nested() -> None:
    """An eligible key under another namespace's root is examined, kept and counted."""
    decider, queue, events, plan = decider_for()
    nested = f"{ROOT}/005/000000000000000001"
    decider.run.nested = NestedRoots(ROOT, nothing_nested)
    decider.run.nested.found[nested] = claim_key(nested)
    key = LAYOUT.format(5, 1, "g")
    await decider.examine(f"{ROOT}/005", Cursor(), page_of((key, OLD)))
    counts = decider.run.counts
    assert (counts.listed, counts.eligible, counts.skipped_nested) == (1, 0, 1)
    assert events == [PageExamined(1, (("nested_root", 1),))]
    assert plan.keys == []
    assert queue.empty()
