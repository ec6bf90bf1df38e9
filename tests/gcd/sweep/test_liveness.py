"""Issue 36: GC never stalls. A broken store (the fault proxy's endless, dripping and
poison-key modes, in front of the real moto server) costs one named error, never the
round: the round ends within its deadline and every other prefix's garbage is deleted.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gcd.observe.report import RoundResult
from gcd.observe.telemetry import ObjectsDeleted
from gcd.rules.backoff import Backoff
from gcd.rules.layout import KeyLayout
from gcd.storage.retry import Retrier
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0lab.testing.faultproxy import FaultConfig, FaultProxy
from l0lab.testing.local_servers import LocalS3

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
OLD = datetime.now(UTC) - timedelta(hours=2)
BROKEN = f"{ROOT}/4"


def seed(server: LocalS3, bucket: str) -> tuple[set[str], set[str]]:
    """Garbage in prefixes 1xx, 4xx (the broken one) and 7xx; (other garbage, 4xx's)."""
    other = {LAYOUT.format(p, e, f"g{i}") for p in (101, 702) for e in (1, 2) for i in range(3)}
    broken = {LAYOUT.format(417, e, "g") for e in (1, 2)}
    server.seed(bucket, sorted(other | broken), last_modified=OLD)
    return other, broken


async def sweep(
    endpoint: str, deletes: list[tuple[int, bool]] | None = None, **options: Any
) -> RoundResult:
    """One round through `endpoint`; `deletes` gets, for each answer that deleted objects,
    (how many, whether the round's listing had already been stopped by its deadline)."""
    backoff = Backoff(base_s=0.01, cap_s=0.05, max_attempts=2)
    config = RoundConfig(
        layout=LAYOUT, grace_s=60.0, list_concurrency=10, backoff=backoff, **options
    )
    settings = S3Settings(options.pop("bucket", "") or _BUCKET[0], endpoint, "us-east-1")
    sweepers: list[Sweeper] = []

    def watch(event: object) -> None:
        if deletes is not None and isinstance(event, ObjectsDeleted):
            run = sweepers[0].current
            deletes.append((event.objects, run is None or run.deadline_hit))

    async with S3ObjectStore.open(settings) as store:
        sweeper = Sweeper(store, config, retrier=Retrier(backoff, rng=random.Random(0)), hook=watch)
        sweepers.append(sweeper)
        return await sweeper.sweep(5, 9)


_BUCKET = [""]


@pytest.fixture(autouse=True)
def _name_bucket(bucket: str) -> None:
    _BUCKET[0] = bucket


async def test_an_endless_listing_is_named_and_the_rest_of_the_round_goes_on(
    s3_server: LocalS3, bucket: str
) -> None:
    """One prefix answered IsTruncated with the same token forever: before, the round
    never ended. Now the repeated token stops that listing (one error, named); the other
    prefixes' garbage is deleted and the round ends."""
    other, broken = seed(s3_server, bucket)
    config = FaultConfig(endless_prefixes=(BROKEN,))
    async with FaultProxy(s3_server.endpoint_url, config) as proxy:
        result = await asyncio.wait_for(sweep(proxy.endpoint_url), timeout=60)
    summary = result.summary
    assert summary.unlistable_prefixes == (BROKEN,)
    assert (summary.errors, summary.deleted) == (1, len(other))
    assert s3_server.keys(bucket) == broken
    assert proxy.faults["endless"] <= 3  # the first page, the same token again, one sent ahead
    assert not result.complete


ROUND_DEADLINE_S = 8.0
REQUEST_DEADLINE_S = 2.0


async def test_a_dripping_listing_ends_at_the_deadlines_and_other_garbage_goes_first(
    s3_server: LocalS3, bucket: str
) -> None:
    """One prefix's answer dripped one byte every 0.5 s (a read timeout restarts with each
    byte): before, the round hung. Now each request is cut at its total deadline, the
    listing at the round's; the garbage listed in the other prefixes is deleted while the
    broken prefix still hangs (batches go out as their prefix ends), not once the
    listing is over.

    The round deadline is a promised time (docs/operations.md, "GC stalled"): the round
    cannot end before it, and ends soon after it. Beyond that, what the deadlines did is
    counted, not timed: each dripped LIST lasts its whole request deadline and they go
    one after another (a retry, then one-key probes of the children), so one stopped at
    the round deadline sent at most ROUND / REQUEST + 1 of them; a listing that went on
    past it would send 12 (2 attempts, 10 probes)."""
    other, broken = seed(s3_server, bucket)
    config = FaultConfig(drip_prefixes=(BROKEN,), drip_interval_s=0.5)
    deletes: list[tuple[int, bool]] = []
    async with FaultProxy(s3_server.endpoint_url, config) as proxy:
        started = time.monotonic()
        result = await asyncio.wait_for(
            sweep(
                proxy.endpoint_url,
                deletes,
                request_deadline_s=REQUEST_DEADLINE_S,
                round_deadline_s=ROUND_DEADLINE_S,
            ),
            timeout=60,  # a hang guard: a round without a deadline drips for minutes
        )
        elapsed = time.monotonic() - started
    summary = result.summary
    print(
        f"round ended after {elapsed:.1f} s, {summary.duration_s} s in the summary; "
        f"deletes {deletes}; faults {dict(proxy.faults)}"
    )
    assert summary.deadline_exceeded
    assert summary.errors >= 1
    assert summary.deleted == len(other)
    assert s3_server.keys(bucket) == broken
    # Every batch of the other prefixes went out before the deadline stopped the listing
    # (held until the listing ended, they would all go after it). Unloaded they go ~0.3 s
    # into the round: the 8 s deadline leaves a loaded machine 25 times that.
    assert sum(count for count, _ in deletes) == len(other), deletes
    assert not any(late for _, late in deletes), deletes
    # Cut at each request's deadline and retried; stopped at the round's.
    assert 2 <= proxy.faults["dripped"] <= ROUND_DEADLINE_S / REQUEST_DEADLINE_S + 1, proxy.faults
    # The promised time: never before the deadline (asyncio timers do not fire early, and
    # the round's starts after `started`); after it, only the batches already cut are
    # deleted (each request within its own deadline). Unloaded, the round (its own
    # duration, without opening the client) ends ~0.5 s after the deadline; the 10 s
    # are for a loaded 2-core machine.
    assert elapsed >= ROUND_DEADLINE_S, elapsed
    assert summary.duration_s < ROUND_DEADLINE_S + REQUEST_DEADLINE_S + 10.0, summary


async def test_a_key_answered_500_is_kept_and_named_and_every_other_key_deleted(
    s3_server: LocalS3, bucket: str
) -> None:
    """A store answering HTTP 500 to every DeleteObjects naming one key: before, 0 of 27
    eligible keys were deleted, every round. Now the batch is bisected once its retries
    are spent: 26 deleted, the poison key kept and named."""
    keys = [LAYOUT.format(101, 1, f"k{i:02d}") for i in range(27)]
    s3_server.seed(bucket, keys, last_modified=OLD)
    poison = keys[13]
    async with FaultProxy(
        s3_server.endpoint_url, FaultConfig(fail_delete_keys=frozenset({poison}))
    ) as proxy:
        result = await sweep(proxy.endpoint_url)
    summary = result.summary
    assert s3_server.keys(bucket) == {poison}
    assert (summary.deleted, summary.errors, summary.unsafe_keys) == (26, 0, 1)
    assert summary.poison_keys == (poison,)
    assert proxy.requests["delete"] <= 2 + 2 * 5 + 1, proxy.requests
