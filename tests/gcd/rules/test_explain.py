"""The verdict `gcd explain` gives one key: the sweeper's rule, in words and facts."""

from __future__ import annotations

from gcd.rules.explain import (
    WAITING_SHOWN,
    GcFacts,
    JournaledRequest,
    KeyVerdict,
    PartitionFact,
    Reason,
    StoreFacts,
    VersionFact,
    estimate_ready,
    explain,
    start_before,
)
from gcd.rules.layout import KeyLayout
from l0gc.contract.references import Reference

LAYOUT = KeyLayout.default("l0/data")
NOW = 1_800_000_000.0
OLD = NOW - 3600


def key(epoch: int, name: str = "x") -> str:
    """A layout key."""
    return LAYOUT.format(7, epoch, name)


def facts(m: int | None = 10, cluster: int | None = 20, **kw: object) -> GcFacts:
    """M 10, cluster epoch 20, partitions a (10), b (12), c (19) unless given."""
    parts = kw.pop(
        "partitions",
        (
            PartitionFact("a", 10, "pa", NOW - 5),
            PartitionFact("b", 12, "pb", NOW - 50),
            PartitionFact("c", 19, "pc", NOW),
        ),
    )
    return GcFacts(NOW, 600.0, m, cluster, partitions=parts, **kw)  # type: ignore[arg-type]


def held(last_modified: float = OLD, **kw: object) -> StoreFacts:
    """The store holds one version."""
    return StoreFacts((VersionFact(last_modified, 1, **kw),))  # type: ignore[arg-type]


def test_keys_that_are_not_l0_keys_are_never_deleted_and_say_which_case() -> None:
    """Outside the root, journal object, claim, unparsable, template mismatch."""
    pattern = r"(?P<prefix>[0-9]{3})/[a-z](?P<epoch>[0-9]+)/(?P<name>[^/]+)"
    custom = KeyLayout.custom(
        pattern=pattern, root="l0/data", template="{prefix:03d}/e{epoch}/{name}"
    )
    journal = facts(journal_prefix="audit/j")
    cases = {
        ("other/k", LAYOUT, facts()): Reason.OUTSIDE_ROOT,
        ("audit/j/journal-s-000001.jsonl", LAYOUT, journal): Reason.JOURNAL_OBJECT,
        ("l0/data/.l0gc-claim.json", LAYOUT, facts()): Reason.CLAIM,
        ("l0/data/007/.l0gc-claim.json", LAYOUT, facts()): Reason.CLAIM,
        ("l0/data/007/12x/k", LAYOUT, facts()): Reason.UNPARSABLE,
        ("l0/data/007/x12/k", custom, facts()): Reason.TEMPLATE_MISMATCH,
    }
    for (name, layout, gc), reason in cases.items():
        answer = explain(name, layout, gc, held())
        assert (answer.verdict, answer.reason) == (KeyVerdict.NEVER, reason), name
    assert explain("l0/data/007/e2/k", custom, facts(), held()).verdict is KeyVerdict.DELETABLE


def test_a_key_under_a_nested_root_is_never_deleted() -> None:
    """Another namespace's claim above the key: never, naming that root."""
    store = StoreFacts(held().versions, nested_root="l0/data/007")
    answer = explain(key(3), LAYOUT, facts(), store)
    assert (answer.verdict, answer.facts["nested_root"]) == (KeyVerdict.NEVER, "l0/data/007")


def test_kept_names_exactly_the_partitions_below_the_epoch() -> None:
    """Epoch 12: a (10) waits, b (12) has passed it (M(p) = e), c is ahead."""
    answer = explain(key(12), LAYOUT, facts(), held())
    assert (answer.verdict, answer.reason) == (KeyVerdict.KEPT, Reason.WAITING)
    assert [p["partition"] for p in answer.facts["waiting_on"]] == ["a"]
    assert answer.facts["epoch_open"] is False
    answer = explain(key(13), LAYOUT, facts(), held())
    assert [p["partition"] for p in answer.facts["waiting_on"]] == ["a", "b"]
    assert "waiting on a, b" in answer.summary


def test_an_epoch_at_or_above_the_cluster_epoch_is_not_closed() -> None:
    """A key of the cluster epoch waits for its epoch to close too."""
    answer = explain(key(20), LAYOUT, facts(), held())
    assert answer.facts["epoch_open"] is True
    assert explain(key(19), LAYOUT, facts(), held()).facts["epoch_open"] is False


def test_many_partitions_are_capped_with_a_count() -> None:
    """More partitions than shown: the first WAITING_SHOWN lowest, the rest counted."""
    parts = tuple(PartitionFact(f"p{i:02d}", 10) for i in range(WAITING_SHOWN + 3))
    answer = explain(key(11), LAYOUT, facts(partitions=parts), held())
    assert len(answer.facts["waiting_on"]) == WAITING_SHOWN
    assert answer.facts["waiting_on_more"] == 3
    assert "and 3 more" in answer.summary


def test_grace_period_keeps_a_young_key_and_says_when_it_ends() -> None:
    """Inside the grace period (at its very end too) it is kept; a moment later deletable."""
    young = NOW - 600.0
    answer = explain(key(3), LAYOUT, facts(), held(young))
    assert (answer.verdict, answer.reason) == (KeyVerdict.KEPT, Reason.GRACE)
    assert (answer.facts["last_modified"], answer.facts["grace_ends"]) == (young, NOW)
    assert explain(key(3), LAYOUT, facts(), held(young - 0.5)).verdict is KeyVerdict.DELETABLE


def test_paused_or_blocked_gc_keeps_an_eligible_key() -> None:
    """A refused round: kept with the reason; paused and blocked are told apart."""
    paused = facts(refused="paused: incident", paused=True)
    answer = explain(key(3), LAYOUT, paused, held())
    assert (answer.verdict, answer.reason) == (KeyVerdict.KEPT, Reason.PAUSED)
    assert "incident" in answer.summary
    blocked = explain(key(3), LAYOUT, facts(m=None, refused="safe epoch undefined"), held())
    assert blocked.reason is Reason.BLOCKED


def test_object_lock_keeps_a_version_until_its_retain_until() -> None:
    """A locked version keeps the key; an expired retention does not."""
    locked = held(lock="retention COMPLIANCE", retain_until=NOW + 60, version_id="v1")
    answer = explain(key(3), LAYOUT, facts(), locked)
    assert (answer.verdict, answer.reason) == (KeyVerdict.KEPT, Reason.LOCKED)
    assert answer.facts["retain_until"] == NOW + 60
    expired = held(lock="retention COMPLIANCE", retain_until=NOW, version_id="v1")
    assert explain(key(3), LAYOUT, facts(), expired).verdict is KeyVerdict.DELETABLE


def test_a_key_gone_from_the_store_is_deleted_only_when_the_journal_says_so() -> None:
    """Deleted: the last request that deleted it; absent: none did (attempts counted)."""
    failed = JournaledRequest(NOW - 9, "s-1", 4, "failed (AccessDenied)", 5, 8, 40, 3)
    done = JournaledRequest(NOW - 5, "s-2", 7, "deleted", 6, 9, 41, 3, version_ids=("v1",))
    answer = explain(key(3), LAYOUT, facts(), StoreFacts(), [failed, done])
    assert (answer.verdict, answer.facts["deleted"]["sweeper"]) == (KeyVerdict.DELETED, "s-2")
    assert answer.facts["deleted"]["version_ids"] == ["v1"]
    assert answer.facts["restorable"] is False  # no version left: l0gc cannot bring it back
    absent = explain(key(3), LAYOUT, facts(), StoreFacts(), [failed])
    assert absent.verdict is KeyVerdict.ABSENT
    assert "1 attempt(s) recorded" in absent.summary


def test_a_key_hidden_by_an_undo_window_is_deleted_and_restorable() -> None:
    """Its newest version is the delete marker a journaled request wrote (an undo window):
    `deleted`, restorable with `gcd restore --key`; a marker no record read names
    (another writer's, or a journal not read in full) is not taken for l0gc's: the key
    is deleted all the same (the store serves nothing under it), not restorable."""
    versions = (
        VersionFact(OLD, 5, version_id="v1"),
        VersionFact(NOW - 60, 0, version_id="m1", delete_marker=True),
    )
    hid = JournaledRequest(NOW - 60, "s-1", 3, "deleted", 6, 9, 41, 3, marker="m1")
    answer = explain(key(3), LAYOUT, facts(), StoreFacts(versions), [hid])
    assert (answer.verdict, answer.facts["restorable"]) == (KeyVerdict.DELETED, True)
    assert answer.facts["restore"] == f"gcd restore --key {key(3)}"
    assert "m1" in answer.summary
    foreign = explain(
        key(3),
        LAYOUT,
        facts(),
        StoreFacts(versions),
        [JournaledRequest(NOW - 60, "s-1", 3, "deleted", 6, 9, 41, 3, marker="other")],
    )
    assert (foreign.verdict, foreign.reason) == (KeyVerdict.DELETED, Reason.HIDDEN)
    assert foreign.facts["restorable"] is None
    assert "m1" in foreign.summary
    # issue 55: with no journal read at all the store still says it is gone, never kept
    unread = explain(key(3), LAYOUT, facts(), StoreFacts(versions))
    assert (unread.verdict, unread.reason) == (KeyVerdict.DELETED, Reason.HIDDEN)


def test_a_marker_written_in_its_objects_second_is_still_the_newest() -> None:
    """A second-resolution store (moto) gives the object and l0gc's marker the same
    last_modified: the store's IsLatest, not the clock, says the marker is on top."""
    versions = (
        VersionFact(NOW - 60, 5, version_id="v1"),
        VersionFact(NOW - 60, 0, version_id="m1", delete_marker=True, is_latest=True),
    )
    hid = JournaledRequest(NOW - 60, "s-1", 3, "deleted", 6, 9, 41, 3, marker="m1")
    answer = explain(key(3), LAYOUT, facts(), StoreFacts(versions), [hid])
    assert (answer.verdict, answer.facts["restorable"]) == (KeyVerdict.DELETED, True)


def test_the_estimate_waits_for_the_slowest_partition_and_is_marked() -> None:
    """Two partitions with rates: the later arrival; one that has not moved: no estimate."""
    parts = (PartitionFact("a", 10, rate=1.0), PartitionFact("b", 12, rate=0.1))
    estimate = estimate_ready(14, facts(partitions=parts), parts)
    assert (estimate.at, estimate.slowest) == (NOW + 20.0, "b")
    assert estimate.to_dict()["estimate"] is True
    stalled = (PartitionFact("a", 10, rate=0.0),)
    assert estimate_ready(14, facts(partitions=stalled), stalled).at is None


def test_no_estimate_past_a_partition_that_stopped_rising() -> None:
    """Issue 55: a partition that rose at 0.1 epoch/s but has not risen for 5 minutes (its
    writer stopped) gets no estimate from its old rate; one that rose 20 s ago does."""
    moving = (PartitionFact("b", 12, rate=0.1, moved_at=NOW - 20),)
    assert estimate_ready(14, facts(partitions=moving), moving).at == NOW + 20.0
    stopped = (PartitionFact("b", 12, rate=0.1, moved_at=NOW - 300),)
    estimate = estimate_ready(14, facts(partitions=stopped), stopped)
    assert (estimate.at, estimate.slowest) == (None, "b")
    assert "b has not risen for 300 s though it rose before" in estimate.basis


def test_start_before_lists_the_key_first() -> None:
    """start_before(k) < k and nothing a key could be sorts between them and k's kin."""
    for name in ("l0/data/007/1/a", "b", "x\x00", "\x00"):
        below = start_before(name)
        assert below < name
        assert below.encode("utf-8", "surrogatepass") < name.encode("utf-8", "surrogatepass")
    assert start_before("ab") == "aa\U0010ffff"
    assert start_before("a\x00") == "a"


def test_a_referenced_key_at_or_below_m_is_a_conflict_that_names_the_culprit() -> None:
    """The writer says live, M says garbage: kept, with the partition and the entry."""
    refs = {key(9): Reference("orders/4", 1234, key(9)), key(15): Reference("b", 7, key(15))}
    conflict = explain(key(9), LAYOUT, facts(references=refs), held())
    assert (conflict.verdict, conflict.reason) == (KeyVerdict.KEPT, Reason.REFERENCE_CONFLICT)
    assert "'orders/4'" in conflict.summary
    assert "offset 1234" in conflict.summary
    assert conflict.facts["referenced_by"] == {"partition": "orders/4", "offset": 1234}
    # above M a reference is no conflict: M keeps the key anyway
    above = explain(key(15), LAYOUT, facts(references=refs), held())
    assert above.reason is Reason.WAITING
    assert above.facts["referenced_by"] == {"partition": "b", "offset": 7}
    # gone while referenced: a live object is missing, whoever deleted it
    gone = explain(key(9), LAYOUT, facts(references=refs), StoreFacts())
    assert gone.verdict is KeyVerdict.ABSENT
    assert "a live object is missing" in gone.summary
    done = JournaledRequest(NOW - 5, "s-2", 7, "deleted", 6, 9, 41, 3)
    deleted = explain(key(9), LAYOUT, facts(references=refs), StoreFacts(), [done])
    assert deleted.verdict is KeyVerdict.DELETED
    assert "a live object was deleted" in deleted.summary
