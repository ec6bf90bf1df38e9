"""Deciding one listed page (`gcd.sweep.pages.PageDecider`), without a lister or a store."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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


# -- runs of plain deletes taken at once decide as the key-by-key path does ----------------

_ROWS = st.lists(
    st.tuples(
        st.integers(0, 12),  # epoch (M is SAFE_SMALL)
        st.sampled_from(["g", "g", "g", "young", "junk"]),
    ),
    max_size=25,
)
"""Keys of a page whose runs may be taken at once; `_ODD` adds (sometimes) the keys that
make a page be decided key by key: the claim, names that may sort before a claim."""
_ODD = st.lists(
    st.tuples(st.integers(0, 12), st.sampled_from(["-dash", ".dot", "claim"])), max_size=2
)
SAFE_SMALL = 6


def _page_from(rows: list[tuple[int, str]], next_token: str | None) -> ListPage:
    objects = []
    for index, (epoch, kind) in enumerate(rows):
        if kind == "claim":
            key, modified = claim_key(ROOT), OLD
        elif kind == "junk":
            key, modified = f"{ROOT}/005/zz{index:03d}", OLD
        else:
            name = {"g": "g", "young": "y", "-dash": "-d", ".dot": ".d"}[kind] + f"{index:03d}"
            key = LAYOUT.format(5, epoch, name)
            modified = NOW - 60 if kind == "young" else OLD
        objects.append(ObjectInfo(key, 10 + index, modified))
    objects.sort(key=lambda obj: obj.key.encode())
    return ListPage(tuple(objects), next_token)


async def _decide(page: ListPage, *, per_key: bool, **config: Any) -> tuple[object, ...]:
    ceiling = config.pop("ceiling", None)
    decider, queue, events, plan = decider_for(**config)
    decider.run.safe_epoch = SAFE_SMALL
    decider.run.ceiling = ceiling
    if per_key:
        decider._plain = lambda *_: None  # type: ignore[method-assign]
    cursor = await decider.examine(f"{ROOT}/005", Cursor(), page)
    run = decider.run
    batches = [[(c.key, c.epoch, c.size) for c in batch] for batch in queued(queue)]
    return (
        cursor,
        batches,
        [(c.key, c.epoch) for c in run.batch],
        run.counts,
        run.capped,
        run.young_ready_at_s,
        events,
        plan.keys,
    )


@settings(database=None, max_examples=150, deadline=None)
@given(
    rows=_ROWS,
    odd=_ODD,
    batch_size=st.integers(1, 7),
    max_deletes=st.none() | st.integers(1, 9),
    dry_run=st.booleans(),
    ceiling=st.none() | st.integers(-1, 8),
    truncated=st.booleans(),
)
def test_runs_taken_at_once_decide_as_key_by_key(
    rows: list[tuple[int, str]],
    odd: list[tuple[int, str]],
    batch_size: int,
    max_deletes: int | None,
    dry_run: bool,
    ceiling: int | None,
    truncated: bool,
) -> None:
    """The page decided with its runs of plain deletes taken at once (`_plain`,
    `_select_run`) batches, counts, caps, plans and moves on exactly as the page decided
    one key at a time: garbage, young keys, keys above M, junk, the claim, names that may
    sort before a claim, the undo window's delayed M, the cap, dry runs, batch sizes."""
    page = _page_from(rows + odd, "token" if truncated else None)
    options = {
        "batch_size": batch_size,
        "max_deletes": max_deletes,
        "dry_run": dry_run,
        "ceiling": ceiling,
    }

    async def both() -> tuple[tuple[object, ...], tuple[object, ...]]:
        fast = await _decide(page, per_key=False, **options)
        slow = await _decide(page, per_key=True, **options)
        return fast, slow

    fast, slow = asyncio.run(both())
    assert fast == slow


async def test_a_run_of_garbage_is_taken_a_batch_at_a_time() -> None:
    """2,500 plain deletes with batch size 1,000: two batches queued, 500 being cut."""
    decider, queue, events, _ = decider_for(batch_size=1000)
    page = page_of(*((LAYOUT.format(5, epoch % 40, f"g{epoch:05d}"), OLD) for epoch in range(2500)))
    await decider.examine(f"{ROOT}/005", Cursor(), page)
    assert [len(batch) for batch in queued(queue)] == [1000, 1000]
    assert len(decider.run.batch) == 500
    assert decider.run.counts.eligible == decider.run.counts.listed == 2500
    assert events == [PageExamined(2500)]
