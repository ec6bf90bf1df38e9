"""The undo window's pure rules: the delayed M, M's history, and a versioned key's plan."""

from __future__ import annotations

from gcd.rules.undo import (
    KeyPlan,
    MEntry,
    UndoAction,
    VersionEntry,
    delayed_safe_epoch,
    lifecycle_conflicts,
    plan_key,
    prunable,
    should_record,
    store_keeps,
)

HOUR = 3600.0
NOW = 100_000.0


def test_no_history_one_window_old_deletes_nothing() -> None:
    """Without an entry at or before now - window the delayed M is None."""
    assert delayed_safe_epoch([], 9, NOW, HOUR) is None
    assert delayed_safe_epoch([MEntry(5, NOW - HOUR + 1)], 9, NOW, HOUR) is None


def test_the_entry_exactly_one_window_old_is_in_force() -> None:
    """An entry recorded exactly one window ago counts (the boundary)."""
    assert delayed_safe_epoch([MEntry(5, NOW - HOUR)], 9, NOW, HOUR) == 5


def test_the_delayed_m_is_the_lowest_m_during_the_window() -> None:
    """The M in force at the window's start, every later one, and the current: the minimum."""
    history = [MEntry(2, NOW - 3 * HOUR), MEntry(6, NOW - 2 * HOUR), MEntry(8, NOW - HOUR / 2)]
    assert delayed_safe_epoch(history, 9, NOW, HOUR) == 6
    repaired = [*history, MEntry(4, NOW - 60)]  # a repair lowered M inside the window
    assert delayed_safe_epoch(repaired, 9, NOW, HOUR) == 4
    assert delayed_safe_epoch(history, 3, NOW, HOUR) == 3  # the current M is lower still


def test_a_zero_window_uses_the_latest_entry() -> None:
    """A window of 0 is the M in force now (never above the current M)."""
    assert delayed_safe_epoch([MEntry(5, NOW - 1), MEntry(7, NOW)], 7, NOW, 0.0) == 7


def test_history_records_every_fall_and_rises_spaced() -> None:
    """First entry and any fall always; a rise only `spacing` after the last entry."""
    assert should_record([], 5, NOW, 36.0)
    last = [MEntry(5, NOW - 10)]
    assert should_record(last, 4, NOW, 36.0)
    assert not should_record(last, 6, NOW, 36.0)
    assert should_record(last, 6, NOW + 26, 36.0)  # exactly the spacing
    assert not should_record(last, 5, NOW + 1000, 36.0)  # unchanged


def test_pruning_keeps_the_entry_in_force_at_the_longest_window() -> None:
    """Entries older than the one in force at now - longest window go; the longest window
    is the largest of this sweeper's and every entry's."""
    history = [MEntry(1, NOW - 5 * HOUR), MEntry(2, NOW - 3 * HOUR), MEntry(3, NOW - 10)]
    assert prunable(history, NOW, HOUR) == history[:1]
    assert prunable(history, NOW, 3 * HOUR) == history[:1]
    assert prunable(history, NOW, 4 * HOUR) == []
    longer = [MEntry(1, NOW - 5 * HOUR), MEntry(2, NOW - 3 * HOUR, 4 * HOUR)]
    assert prunable(longer, NOW, HOUR) == []


def version(
    vid: str,
    *,
    marker: bool = False,
    latest: bool = False,
    at: float = 0.0,
    size: int = 10,
    young: bool = False,
) -> VersionEntry:
    return VersionEntry(vid, marker, latest, at, size, young)


def test_a_key_with_bytes_on_top_is_hidden_with_its_versions_named() -> None:
    """HIDE names every data version, newest first, and the bytes it holds."""
    plan = plan_key([version("a", at=1), version("b", latest=True, at=2, size=5)], set(), NOW, HOUR)
    assert plan.action is UndoAction.HIDE
    assert plan.hides == ("b", "a")
    assert plan.held_bytes == 15


def test_l0gcs_marker_younger_than_the_window_is_pending() -> None:
    """PENDING until the marker is a whole window old, then RECLAIM (the boundary)."""
    versions = [version("a", at=1), version("m", marker=True, latest=True, at=NOW - HOUR + 1)]
    pending = plan_key(versions, {"m"}, NOW, HOUR)
    assert pending.action is UndoAction.PENDING
    assert pending.marker_at == NOW - HOUR + 1
    assert pending.held_bytes == 10
    due = plan_key(versions, {"m"}, NOW + 1, HOUR)
    assert due.action is UndoAction.RECLAIM
    assert {entry.version_id for entry in due.targets} == {"a", "m"}


def test_reclaim_never_takes_another_writers_marker() -> None:
    """Only l0gc's markers and the data versions are reclaimed; a foreign marker on top
    keeps the whole key."""
    versions = [
        version("a", at=1),
        version("x", marker=True, at=2),
        version("m", marker=True, latest=True, at=3),
    ]
    plan = plan_key(versions, {"m"}, NOW, HOUR)
    assert {entry.version_id for entry in plan.targets} == {"a", "m"}
    foreign = plan_key(versions, {"x"}, NOW, HOUR)
    assert foreign.action is UndoAction.FOREIGN
    assert foreign.targets == ()
    assert foreign.marker_at == 3  # when the other marker was written: it may be l0gc's


def test_a_young_version_or_no_latest_entry_waits() -> None:
    """A version inside the grace period, or a listing without exactly one latest, waits."""
    assert plan_key([version("a", latest=True, young=True)], set(), NOW, HOUR).action is (
        UndoAction.WAIT
    )
    assert plan_key([version("a"), version("b")], set(), NOW, HOUR).action is UndoAction.WAIT
    two = [version("a", latest=True), version("b", latest=True)]
    assert plan_key(two, set(), NOW, HOUR).action is UndoAction.WAIT


def test_a_store_keeps_the_window_only_with_a_known_retention_at_least_as_long() -> None:
    """A soft delete of exactly the window keeps it; shorter, none (0) or unreadable
    (None) does not: the delayed M is used instead."""
    assert store_keeps(3600.0, 3600.0)
    assert store_keeps(604800.0, 3600.0)
    assert not store_keeps(3599.0, 3600.0)
    assert not store_keeps(0.0, 0.0)
    assert not store_keeps(None, 3600.0)


def test_a_rise_is_spaced_from_the_newest_entry_and_a_fall_from_it_recorded() -> None:
    """The newest entry (not the oldest) decides: M 6 after entries 5 then 7 is a fall
    (recorded at once), however recent the rise."""
    history = [MEntry(5, NOW - 2 * HOUR), MEntry(7, NOW - 60)]
    assert should_record(history, 6, NOW, spacing_s=10 * HOUR)
    assert not should_record(history, 8, NOW, spacing_s=10 * HOUR)


def test_entries_without_a_window_leave_the_callers_window_in_charge() -> None:
    """An entry written without its window (0) does not lengthen what is kept: with a
    0 window every entry but the one in force now is prunable."""
    history = [MEntry(3, NOW - 0.5), MEntry(4, NOW - 0.2)]
    assert prunable(history, NOW, 0.0) == [history[0]]


def test_defaults_hold_no_bytes_and_are_not_young() -> None:
    """A version listed without a size holds 0 bytes and is not in the grace period (it
    is hidden); a plan that keeps nothing pending holds 0 bytes."""
    plan = plan_key([VersionEntry("v1", False, True, NOW - HOUR)], set(), NOW, HOUR)
    assert (plan.action, plan.held_bytes, plan.hides) == (UndoAction.HIDE, 0, ("v1",))
    assert KeyPlan(UndoAction.WAIT).held_bytes == 0


def test_a_short_retention_that_still_covers_a_shorter_window_keeps_it() -> None:
    """Any positive retention at least the window keeps it, even one second."""
    assert store_keeps(1.0, 0.5)
    assert store_keeps(1.0, 1.0)


DAY = 86400.0


def _rule(days: object, **fields: object) -> dict[str, object]:
    return {
        "ID": "r",
        "Status": "Enabled",
        "NoncurrentVersionExpiration": {"NoncurrentDays": days},
        **fields,
    }


def test_a_lifecycle_rule_that_frees_hidden_versions_inside_the_window_is_named() -> None:
    """Issue 51: noncurrent versions expiring sooner than the window (on a prefix that
    overlaps the root, or with a tag filter) would free hidden objects before a restore."""
    root = "level_zero/data/"
    (line,) = lifecycle_conflicts(
        [_rule(7, ID="tmp", Filter={"Prefix": "level_zero/"})], root, 30 * DAY
    )
    assert line == (
        "lifecycle rule 'tmp' (prefix 'level_zero/') expires noncurrent versions after 7 days"
    )
    for overlapping in (
        {"Prefix": "level_zero/data/007/"},
        {"Prefix": ""},
        {},
        {"And": {"Prefix": "level_zero/d", "Tags": [{"Key": "k"}]}},
        {"Tag": {"Key": "k", "Value": "v"}},
    ):
        assert lifecycle_conflicts([_rule(7, Filter=overlapping)], root, 30 * DAY), overlapping
    assert lifecycle_conflicts([_rule(7, Prefix="level_zero")], root, 30 * DAY)  # no Filter
    assert lifecycle_conflicts([_rule(7)], root, 30 * DAY) == [
        "lifecycle rule 'r' (prefix '') expires noncurrent versions after 7 days"
    ]
    assert lifecycle_conflicts([{**_rule(0), "ID": None}], root, 1.0)


def test_lifecycle_rules_that_keep_the_window_or_miss_the_root_are_not_named() -> None:
    root = "level_zero/data/"
    keeps = [
        _rule(30),
        _rule(31),
        _rule(7, Status="Disabled"),
        _rule("7"),
        _rule(None),
        {"ID": "x", "Status": "Enabled", "Expiration": {"Days": 1}},
        "not a rule",
        _rule(1, Filter={"Prefix": "logs/"}),
        _rule(1, Prefix="other/"),
        {"ID": "y", "Status": "Enabled", "NoncurrentVersionExpiration": 3},
    ]
    assert lifecycle_conflicts(keeps, root, 30 * DAY) == []
    assert lifecycle_conflicts([_rule(30)], root, 30 * DAY + 1)  # a second short
    below = _rule(1, Filter={"And": {"Prefix": "level_zero/data/9x"}})  # part of the root
    (line,) = lifecycle_conflicts([below], root, 30 * DAY)
    assert line == (
        "lifecycle rule 'r' (prefix 'level_zero/data/9x') expires noncurrent versions after 1 days"
    )


def test_the_rule_a_round_follows_on_each_store() -> None:
    """Suspended versioning never hides (a "null" marker replaces the "null" version);
    listed versions hide then reclaim; versioned without them, markers only; else the
    store's own soft delete when it keeps the window, or the M of one window ago."""
    from gcd.rules.undo import undo_rule  # noqa: PLC0415

    def rule(versioning: str | None, listed: bool, covers: bool) -> str:
        return undo_rule(versioning=versioning, versions_listed=listed, soft_delete_covers=covers)

    assert rule("Suspended", True, True) == "delayed-m"
    assert rule("Enabled", True, False) == "hide-then-reclaim"
    assert rule("Enabled", False, True) == "markers-only"
    assert rule(None, False, True) == "store-soft-delete"
    assert rule("off", False, False) == "delayed-m"
