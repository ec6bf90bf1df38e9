"""The batch deleter on the in-memory store: poison keys, XML-unsafe keys, and the brake."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import Sequence

import pytest
from structlog.testing import capture_logs

import gcd.sweep.deleter as deleter_module
from gcd.observe.events import BatchAttempt, BatchOutcome
from gcd.observe.metrics import SweeperMetrics
from gcd.observe.report import RoundCounts
from gcd.rules.backoff import Backoff
from gcd.rules.candidate import Candidate
from gcd.rules.versions import split_target
from gcd.storage.objectstore import DeleteResult
from gcd.storage.retry import Retrier
from gcd.sweep.brake import OPEN, Brake, PauseBrake
from gcd.sweep.deleter import MAX_UNPROVEN, BatchDeleter
from l0gc.errors import StorageError
from l0lab.testing.memory import MemoryObjectStore
from l0lab.testing.versioned import VersionedMemoryStore


class RefusingStore(MemoryObjectStore):
    """S3 as it answers a body it cannot parse: one bad key fails the whole request."""

    def __init__(self, bad: set[str], code: str = "MalformedXML") -> None:
        super().__init__()
        self.bad = bad
        self.code = code
        self.requests: list[tuple[str, ...]] = []

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        self.requests.append(tuple(keys))
        if self.bad & set(keys) or "*" in self.bad:
            raise StorageError(
                "The XML you provided was not well-formed", code=self.code, retryable=False
            )
        return await super().delete_batch(keys)


async def no_sleep(_seconds: float) -> None:
    return None


def deleter_for(store: MemoryObjectStore, brake: Brake = OPEN) -> BatchDeleter:
    retrier = Retrier(Backoff(base_s=0.01, cap_s=0.1, max_attempts=4), no_sleep, random.Random(1))
    return BatchDeleter(
        store,
        concurrency=4,
        retrier=retrier,
        metrics=SweeperMetrics(),
        stop=asyncio.Event(),
        brake=brake,
    )


def batch_of(store: MemoryObjectStore, keys: Sequence[str]) -> list[Candidate]:
    for key in keys:
        store.put(key, size=3)
    return [Candidate(key, 3, epoch) for epoch, key in enumerate(keys)]


def counter(deleter: BatchDeleter, name: str) -> float:
    value = deleter.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


GOOD = [f"l0/{i:04d}/good" for i in range(1000)]


@pytest.mark.parametrize("poison", [[17], [0, 999], [3, 4, 500, 777]])
async def test_poison_keys_are_isolated_and_every_good_key_is_deleted(poison: list[int]) -> None:
    """A batch failing as a whole is bisected: good keys go, each bad key is reported once."""
    keys = list(GOOD)
    bad = {keys[i] for i in poison}
    store = RefusingStore(bad)
    deleter = deleter_for(store)
    counts = RoundCounts()
    with capture_logs() as logs:
        await deleter.delete(batch_of(store, keys), counts)
    assert store.keys() == bad
    assert counts.deleted == len(keys) - len(bad)
    assert counts.unsafe_keys == len(bad)
    assert counts.errors == 0
    reported = [e["key"] for e in logs if e["event"] == "sweep.unsafe_key"]
    assert sorted(reported) == sorted(bad)
    assert len(store.requests) <= 1 + 2 * len(bad) * math.ceil(math.log2(len(keys)))
    assert counter(deleter, "l0gc_sweeper_unsafe_keys_total") == len(bad)
    # The next round does not send them again, and does not log them again.
    store.requests.clear()
    counts = RoundCounts()
    with capture_logs() as logs:
        await deleter.delete(batch_of(store, sorted(bad)), counts)
    assert store.requests == []
    assert counts.unsafe_keys == len(bad)
    assert not [e for e in logs if e["event"] == "sweep.unsafe_key"]


async def test_keys_xml_cannot_carry_are_never_sent() -> None:
    """Control characters, CR and lone surrogates are kept, reported, and never in a request."""
    unsafe = ["l0/1/bad\x01name", "l0/1/cr\rname", "l0/1/lone\ud800", "l0/1/nul\x00"]
    carried = ["l0/1/tab\tname", "l0/1/lf\nname", "l0/1/plain"]
    store = RefusingStore(set())
    deleter = deleter_for(store)
    counts = RoundCounts()
    with capture_logs() as logs:
        await deleter.delete(batch_of(store, [*unsafe, *carried]), counts)
    sent = {key for request in store.requests for key in request}
    assert sent == set(carried)
    assert store.keys() == set(unsafe)
    assert counts.unsafe_keys == len(unsafe)
    assert counts.errors == 0
    reasons = {e["key"]: e["reason"] for e in logs if e["event"] == "sweep.unsafe_key"}
    assert set(reasons) == set(unsafe)
    assert "carriage return" in reasons["l0/1/cr\rname"]
    assert "U+0001" in reasons["l0/1/bad\x01name"]


async def test_a_failure_that_is_not_the_keys_is_an_error_not_poison() -> None:
    """Every request failing alike: bisection stops early, the keys count as errors."""
    store = RefusingStore({"*"})
    deleter = deleter_for(store)
    counts = RoundCounts()
    await deleter.delete(batch_of(store, GOOD), counts)
    assert counts.errors == len(GOOD)
    assert counts.unsafe_keys == 0
    assert deleter.poison == {}
    assert len(store.requests) <= math.ceil(math.log2(len(GOOD))) + 2 * MAX_UNPROVEN
    assert store.keys() == set(GOOD)


async def test_failures_unrelated_to_keys_are_not_bisected() -> None:
    """AccessDenied on the whole request is one failed request, counted as errors."""
    store = RefusingStore({GOOD[5]}, code="AccessDenied")
    deleter = deleter_for(store)
    counts = RoundCounts()
    await deleter.delete(batch_of(store, GOOD), counts)
    assert len(store.requests) == 1
    assert counts.errors == len(GOOD)
    assert counts.unsafe_keys == 0


async def test_a_single_key_batch_has_no_proof_and_counts_as_an_error() -> None:
    """A key failing alone with nothing else answered is an error, tried again next round."""
    store = RefusingStore({GOOD[0]})
    deleter = deleter_for(store)
    counts = RoundCounts()
    await deleter.delete(batch_of(store, GOOD[:1]), counts)
    assert counts.errors == 1
    assert counts.unsafe_keys == 0
    assert deleter.poison == {}


class PausingStore(MemoryObjectStore):
    """Writes the pause key once the first request was answered."""

    def __init__(self, pauses: FakePauses) -> None:
        super().__init__()
        self.pauses = pauses
        self.requests = 0

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        result = await super().delete_batch(keys)
        self.requests += 1
        self.pauses.reason = "incident"
        return result


class FakePauses:
    def __init__(self) -> None:
        self.reason: str | None = None

    async def get_paused(self) -> str | None:
        return self.reason


async def test_the_brake_stops_before_the_next_request_including_halves() -> None:
    """A pause seen after the first request: no further request, the rest is skipped_paused."""
    pauses = FakePauses()
    store = PausingStore(pauses)
    deleter = deleter_for(store, PauseBrake(pauses, min_interval_s=0))
    counts = RoundCounts()
    await deleter.delete(batch_of(store, GOOD[:10]), counts)
    assert store.requests == 1
    assert counts.deleted == 10
    counts = RoundCounts()
    await deleter.delete(batch_of(store, GOOD[10:20]), counts)
    assert store.requests == 1
    assert counts.skipped_paused == 10
    assert counts.errors == 0
    assert counter(deleter, "l0gc_sweeper_paused_skipped_objects_total") == 10

    # A bisection is stopped between its halves too.
    pauses.reason = None
    refusing = RefusingStore({GOOD[3]})
    halves = deleter_for(refusing, PauseBrake(pauses, min_interval_s=0))
    original = refusing.delete_batch

    async def pause_after_first(keys: Sequence[str]) -> DeleteResult:
        try:
            return await original(keys)
        finally:
            pauses.reason = "incident"

    refusing.delete_batch = pause_after_first  # type: ignore[method-assign]
    counts = RoundCounts()
    await halves.delete(batch_of(refusing, GOOD[:8]), counts)
    assert len(refusing.requests) == 1
    assert counts.skipped_paused == 8
    assert refusing.keys() == set(GOOD[:8])


class StrayAnswerStore(MemoryObjectStore):
    """A broken store: its answers also name keys no request sent, as deleted and failed."""

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        result = await super().delete_batch(keys)
        from gcd.storage.objectstore import KeyFailure  # noqa: PLC0415

        return DeleteResult(
            (*result.deleted, "l0/never/sent"),
            (KeyFailure("l0/never/failed", "AccessDenied", "no"),),
        )


async def test_an_answer_naming_keys_never_sent_records_and_counts_none_of_them() -> None:
    """Issue 35, item 6: such entries are dropped (and logged) before the journal and the
    accounting see the answer: no deletion the request did not ask for is recorded."""

    store = StrayAnswerStore()
    deleter = deleter_for(store)
    outcomes: list[BatchOutcome] = []

    class Sink:
        def before(self, attempt: object) -> None:
            return None

        def after(self, outcome: BatchOutcome) -> None:
            outcomes.append(outcome)

    deleter.sinks = (Sink(),)  # type: ignore[assignment]
    counts = RoundCounts()
    batch = batch_of(store, GOOD[:3])
    with capture_logs() as logs:
        await deleter.delete(batch, counts)
    assert [set(outcome.deleted) for outcome in outcomes] == [set(GOOD[:3])]
    assert [outcome.failed for outcome in outcomes] == [()]
    assert (counts.deleted, counts.errors) == (3, 0)
    assert counter(deleter, "l0gc_sweeper_deleted_objects_total") == 3
    stray = [log for log in logs if log["event"] == "sweep.unsent_keys_in_answer"]
    assert [(log["keys"], log["first_key"]) for log in stray] == [(2, "l0/never/sent")]


class FailingKeyStore(MemoryObjectStore):
    """A store that answers HTTP 500 for every DeleteObjects naming one poison key."""

    def __init__(self, poison: str) -> None:
        super().__init__()
        self.poison = poison
        self.requests: list[tuple[str, ...]] = []

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        self.requests.append(tuple(keys))
        if self.poison in keys:
            raise StorageError("We encountered an internal error", code="500", retryable=True)
        return await super().delete_batch(keys)


@pytest.mark.parametrize(("size", "poison_at"), [(27, 13), (1000, 0), (1000, 617), (2, 1)])
async def test_a_key_answered_500_is_bisected_out_and_every_other_key_deleted(
    size: int, poison_at: int
) -> None:
    """Issue 36, item 3: 500 was retried, never bisected, so 0 of 27 keys went behind one
    poison key, every round. Now: retries spent, then halves; the poison key is kept,
    named once in the round, counted; the extra requests stay within the bound."""
    from gcd.sweep.deleter import MAX_BISECT_REQUESTS  # noqa: PLC0415

    keys = GOOD[:size]
    store = FailingKeyStore(keys[poison_at])
    deleter = deleter_for(store)
    counts = RoundCounts()
    with capture_logs() as logs:
        await deleter.delete(batch_of(store, keys), counts)
    assert set(store.objects) == {keys[poison_at]}
    assert (counts.deleted, counts.errors, counts.unsafe_keys) == (size - 1, 0, 1)
    assert counts.poison_keys == [keys[poison_at]]
    assert [log["key"] for log in logs if log["event"] == "sweep.poison_key"] == [keys[poison_at]]
    retries = 4  # the whole batch's budget (Backoff max_attempts)
    extra = len(store.requests) - retries
    assert extra <= MAX_BISECT_REQUESTS
    assert extra <= 2 * math.ceil(math.log2(size)) + 1, extra
    # The next round sends it again (a storm, not the key, may have failed its request):
    # bisected out and named again while it fails, deleted once the store takes it.
    other = keys[(poison_at + 1) % size]
    again = RoundCounts()
    store.put(other, size=3)
    await deleter.delete(batch_of(store, [keys[poison_at], other]), again)
    assert again.poison_keys == [keys[poison_at]]
    assert set(store.objects) == {keys[poison_at]}
    assert counter(deleter, "l0gc_sweeper_unsafe_keys_total") == 2
    store.poison = ""  # the storm is over
    healed = RoundCounts()
    await deleter.delete(batch_of(store, [keys[poison_at]]), healed)
    assert (healed.deleted, healed.poison_keys, store.objects) == (1, [], {})


async def test_an_outage_answered_500_is_not_bisected_into_a_thousand_requests() -> None:
    """Every request answers 500 (the store, not a key): a few halves, then the batch
    counts as errors, as before; nothing is taken for poison."""
    store = FailingKeyStore("")
    store.poison = "*"

    async def always(keys: Sequence[str]) -> DeleteResult:
        store.requests.append(tuple(keys))
        raise StorageError("down", code="500", retryable=True)

    store.delete_batch = always  # type: ignore[method-assign]
    deleter = deleter_for(store)
    counts = RoundCounts()
    await deleter.delete(batch_of(store, GOOD), counts)
    assert (counts.deleted, counts.errors, counts.poison_keys) == (0, 1000, [])
    assert len(store.requests) <= 4 + 2 * 10 + MAX_UNPROVEN


async def test_each_target_is_split_once_and_the_journal_sees_keys_and_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deleter splits each target once per request (it was three times per key,
    issue 43), and a batch of plain keys not at all (issue 56); what the sinks see is
    still each key with its version id."""
    calls = 0

    def counting(target: str) -> tuple[str, str | None]:
        nonlocal calls
        calls += 1
        return split_target(target)

    class Sink:
        def __init__(self) -> None:
            self.outcomes: list[BatchOutcome] = []

        def before(self, attempt: BatchAttempt) -> None:
            return None

        def after(self, outcome: BatchOutcome) -> None:
            self.outcomes.append(outcome)

    monkeypatch.setattr(deleter_module, "split_target", counting)
    plain = MemoryObjectStore()
    versioned = VersionedMemoryStore(clock=lambda: 0.0)
    batches = [
        (plain, batch_of(plain, [f"p/{n:03d}" for n in range(300)])),
        (
            versioned,
            [Candidate(f"v/{n:03d}", 1, n, versioned.put(f"v/{n:03d}", b"x")) for n in range(300)],
        ),
    ]
    for store, candidates in batches:
        calls = 0
        sink = Sink()
        deleter = deleter_for(store)  # type: ignore[arg-type]
        deleter.sinks = (sink,)
        counts = RoundCounts()
        await deleter.delete(candidates, counts)
        assert counts.deleted == len(candidates)
        assert calls == (0 if store is plain else len(candidates))
        gone = [
            (k, v)
            for o in sink.outcomes
            for k, v in itertools.zip_longest(o.deleted, o.deleted_version_ids)
        ]
        assert sorted(gone) == sorted((c.key, c.version_id) for c in candidates)


async def test_a_plain_batch_is_screened_and_accounted_as_key_by_key() -> None:
    """A batch of plain keys (`_Batch.plain`) with one key XML cannot carry: that key is
    kept and counted unsafe, the others deleted; bytes, count and the highest epoch are
    what the key-by-key accounting gives."""
    store = MemoryObjectStore()
    keys = [f"p/{n:03d}" for n in range(50)] + ["p/bad\x01key"]
    candidates = batch_of(store, keys)
    deleter = deleter_for(store)  # type: ignore[arg-type]
    counts = RoundCounts()
    highest = await deleter.delete(candidates, counts)
    assert (counts.deleted, counts.unsafe_keys) == (50, 1)
    assert counts.deleted_bytes == sum(c.size for c in candidates[:50])
    assert highest == max(c.epoch for c in candidates[:50])
    assert "p/bad\x01key" in store.objects
    assert not any(k in store.objects for k in keys[:50])
