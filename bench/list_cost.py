"""LIST requests per round: the skip-ahead sweeper vs a full-listing sweeper, and in dollars.

Deterministic (request counts, not timings), so one run per scenario is enough. Both
sides are the real `gcd.sweep.sweeper.Sweeper` in this process over the same
`bench.synthetic.SyntheticStore` bucket; the full-listing side is the same sweeper with
`RoundConfig(skip_ahead=False)` (`gcd sweep --full-listing`), which turns skipping off
and nothing else. The sweeper is shard 0 of 10 (prefixes 000-099, one replica of ten),
and every one of its 100 prefixes holds `live` objects above M and `garbage` objects at
or below it, at live:garbage ratios of 100:1, 10:1 and 1:1.

The goal bound is garbage/1000 + prefixes holding garbage + 1: one page per 1000
garbage keys, plus the page of each prefix where the sweeper meets the first live key
and jumps to the next prefix.
"""

from __future__ import annotations

import asyncio
import logging
import math

import structlog

from bench.common import Goal, Report, Scale, Table
from bench.synthetic import BucketShape, SyntheticStore
from gcd.rules.layout import KeyLayout
from gcd.sweep.sweeper import RoundConfig, Sweeper

NAME = "list_cost"
TITLE = "3. LIST requests per round: skip-ahead vs full listing, and what they cost"
_SHARDS = 10
_SIZES = {  # scale: (prefixes of shard 0, live objects per prefix)
    Scale.TOY: (100, 500),
    Scale.QUICK: (100, 10_000),
    Scale.FULL: (100, 20_000),
}
_RATIOS = (100, 10, 1)

# The deployment the dollar figures are for (stated in the report).
DEPLOY_LIVE = 50_000_000
DEPLOY_PREFIXES = 1000
SWEEP_INTERVAL_S = 10
LIST_PRICE_PER_1000 = 0.005
ROUNDS_PER_MONTH = 30 * 24 * 3600 // SWEEP_INTERVAL_S


async def _count(shape: BucketShape, *, skip: bool) -> tuple[int, int, int]:
    """(LIST requests, objects examined, objects deleted) of one round."""
    store = SyntheticStore(shape)
    config = RoundConfig(
        layout=KeyLayout.default(), shard_index=0, shard_count=_SHARDS, skip_ahead=skip
    )
    result = await Sweeper(store, config).sweep(shape.safe_epoch, None)
    summary = result.summary
    assert summary.deleted == shape.total_garbage == store.deleted, summary
    assert summary.list_requests == store.list_requests
    return store.list_requests, summary.listed, summary.deleted


def deployment_lists(
    live: int, garbage: int, prefixes: int, *, skip: bool, streams: int = 10
) -> int:
    """LIST requests of one round over a bucket, by the model the measured runs validate.

    Skip-ahead: each prefix pages through its garbage and the page holding its first
    live key. Full listing: every object, 1000 per page, in `streams` listing streams
    (the sweeper splits its prefixes into 10 with the default 4 listers).
    """
    if skip:
        return prefixes * math.ceil((garbage / prefixes + 1) / 1000)
    return streams * math.ceil((live + garbage) / streams / 1000)


def run(scale: Scale = Scale.FULL, runs: int = 1) -> Report:
    """Count LIST requests for each ratio (see the module docstring); `runs` is ignored."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    prefixes, live = _SIZES[scale]
    report = Report(NAME, TITLE, scale, 1)
    rows = []
    for ratio in _RATIOS:
        shape = BucketShape(tuple(range(prefixes)), live // ratio, live)
        skip_lists, skip_listed, deleted = asyncio.run(_count(shape, skip=True))
        full_lists, full_listed, _ = asyncio.run(_count(shape, skip=False))
        bound = deleted / 1000 + prefixes + 1
        model_skip = deployment_lists(shape.live * prefixes, deleted, prefixes, skip=True)
        model_full = deployment_lists(shape.live * prefixes, deleted, prefixes, skip=False)
        rows.append(
            (
                f"{ratio}:1",
                shape.total,
                deleted,
                skip_lists,
                full_lists,
                full_lists / skip_lists,
                bound,
                skip_listed,
                full_listed,
                f"{model_skip:,} / {model_full:,}",
            )
        )
        report.goals.append(
            Goal(
                f"{ratio}:1 skip-ahead LIST <= garbage/1000 + prefixes + 1",
                f"{skip_lists:,}",
                f"<= {bound:,.0f}",
                skip_lists <= bound,
            )
        )
        if ratio == 100:
            report.goals.append(
                Goal(
                    "100:1 full listing / skip-ahead LIST requests",
                    f"{full_lists / skip_lists:.1f}x",
                    ">= 10x",
                    full_lists / skip_lists >= 10,
                )
            )
        report.raw[f"{ratio}:1"] = {
            "skip": skip_lists,
            "full": full_lists,
            "objects": shape.total,
            "garbage": deleted,
        }
    report.tables.append(
        Table(
            f"One round of shard 0 of {_SHARDS} ({prefixes} prefixes, {live:,} live objects each)",
            (
                "live:garbage",
                "objects",
                "garbage deleted",
                "LIST skip-ahead",
                "LIST full listing",
                "full / skip",
                "goal bound",
                "objects examined, skip",
                "objects examined, full",
                "model skip / full",
            ),
            tuple(rows),
        )
    )
    money = []
    for ratio in _RATIOS:
        garbage = DEPLOY_LIVE // ratio
        skip = deployment_lists(DEPLOY_LIVE, garbage, DEPLOY_PREFIXES, skip=True)
        full = deployment_lists(DEPLOY_LIVE, garbage, DEPLOY_PREFIXES, skip=False)
        dollars = [n * ROUNDS_PER_MONTH / 1000 * LIST_PRICE_PER_1000 for n in (skip, full)]
        money.append(
            (f"{ratio}:1", garbage, skip, full, dollars[0], dollars[1], dollars[1] / dollars[0])
        )
    report.tables.append(
        Table(
            f"Projected LIST bill: {DEPLOY_LIVE:,} live objects over {DEPLOY_PREFIXES} prefixes, "
            f"a sweep every {SWEEP_INTERVAL_S} s ({ROUNDS_PER_MONTH:,} rounds per 30-day month), "
            f"LIST at ${LIST_PRICE_PER_1000} per 1,000",
            (
                "live:garbage at sweep time",
                "garbage objects",
                "LIST/round skip-ahead",
                "LIST/round full listing",
                "$/month skip-ahead",
                "$/month full listing",
                "full / skip",
            ),
            tuple(money),
        )
    )
    report.notes += [
        (
            "Measured counts are the sweeper's own `list_requests` and the store's request "
            "counter (they agree; asserted). 'model' is `deployment_lists` applied to the same "
            "bucket: the dollar table uses that model at deployment scale."
        ),
        (
            "Skip-ahead's cost follows the garbage and the number of prefixes, not the live "
            "objects: at 100:1 the skip-ahead round is one LIST per prefix. The gain over a "
            "full listing grows with the live objects per prefix (live/1000 pages per prefix)."
        ),
        (
            "Sharding does not change the totals: ten replicas of 100 prefixes each make ten "
            "times the requests of the table above, the same as one sweeper of 1000 prefixes."
        ),
        (
            "The dollar model counts LIST requests only (DeleteObjects requests are the same "
            "for both sweepers)."
        ),
    ]
    return report
