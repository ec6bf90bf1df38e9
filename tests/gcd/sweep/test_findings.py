"""What a round found, said at its end (`gcd.sweep.findings`): store, locks, undo window."""

from __future__ import annotations

from typing import Any

from gcd.observe.events import DeleteBasis
from gcd.observe.report import RoundCounts
from gcd.observe.telemetry import UndoPendingCounted
from gcd.storage.objectstore import ListPage, StoreFeatures
from gcd.sweep.findings import LOCK_PROBES, locked_report, store_report, undo_report
from gcd.sweep.roundstate import RoundState


class LockedStore:
    """A versioned store whose every version is locked: legal hold for even version ids,
    retention until 1000 + the id for odd ones; counts the questions asked."""

    def __init__(self, versioning: str = "Enabled") -> None:
        self.asked = 0
        self.detected = StoreFeatures(versioning=versioning, object_lock=True)

    async def detect(self) -> StoreFeatures:
        return self.detected

    async def list_page(self, prefix: str, **options: Any) -> ListPage:
        return ListPage((), None)

    async def list_versions_page(self, prefix: str, **options: Any) -> ListPage:
        return ListPage((), None)

    async def delete_batch(self, keys: Any) -> Any:
        raise AssertionError("findings delete nothing")

    async def lock_state(self, key: str, version_id: str) -> tuple[str, float | None]:
        self.asked += 1
        number = int(version_id)
        if number % 2 == 0:
            return "legal hold", None
        return "retention COMPLIANCE", 1000.0 + number


async def test_locked_versions_are_asked_about_at_most_lock_probes_times() -> None:
    """Reasons are counted for the first LOCK_PROBES versions, the others are "not examined";
    the earliest retain-until is the first of the retentions seen."""
    store = LockedStore()
    counts = RoundCounts()
    counts.locked = LOCK_PROBES + 5
    counts.locked_targets = [f"k{index}\x00{index + 1}" for index in range(counts.locked)]
    reasons, earliest = await locked_report(store, counts)  # type: ignore[arg-type]
    assert store.asked == LOCK_PROBES
    assert reasons == {
        "retention COMPLIANCE": LOCK_PROBES // 2,
        "legal hold": LOCK_PROBES // 2,
        "not examined": 5,
    }
    assert earliest == "1970-01-01T00:16:41Z"  # 1000 + 1 s


async def test_a_round_without_locked_versions_asks_nothing() -> None:
    """No locked version: no question, nothing reported."""
    store = LockedStore()
    assert await locked_report(store, RoundCounts()) == (None, None)  # type: ignore[arg-type]
    assert store.asked == 0


def test_the_store_report_says_how_the_round_listed_versions() -> None:
    """Versions: "reclaim" when the round listed them, "markers-only" on a versioned bucket
    it did not, "none" otherwise; an unordered listing is said so."""
    run = RoundState(5, DeleteBasis(5, None, None))
    run.versioned = True
    assert store_report(LockedStore(), run, unordered_listing=False)["versions"] == "reclaim"  # type: ignore[arg-type,index]
    run.versioned = False
    assert store_report(LockedStore(), run, unordered_listing=False)["versions"] == "markers-only"  # type: ignore[arg-type,index]
    plain = store_report(LockedStore("off"), run, unordered_listing=True)  # type: ignore[arg-type]
    assert plain is not None
    assert (plain["versions"], plain["listing"]) == ("none", "unordered")


def test_the_undo_report_names_a_missing_history_and_emits_the_pending_gauges() -> None:
    """Without M's history (delayed M -1) nothing is deleted and the report says why; the
    pending keys, bytes and oldest marker go out as one event."""
    run = RoundState(5, DeleteBasis(5, None, None))
    run.ceiling, run.undo_rule = -1, "delayed-m"
    run.counts.pending_keys, run.counts.pending_bytes = 3, 30
    events: list[object] = []
    report = undo_report(run, 600.0, events.append)
    assert report["delayed_safe_epoch"] is None
    assert "no M history" in str(report["note"])
    assert (report["pending_keys"], report["rule"]) == (3, "delayed-m")
    assert events == [UndoPendingCounted(3, 30, None)]
