"""The pure core of `gcd scrub`: a HEAD's verdict, the journal join, the stranded rule,
the listing tally and silent partitions, each on hand-made inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcd.rules.explain import JournaledRequest
from gcd.rules.layout import KeyLayout
from gcd.rules.undo import MEntry
from gcd.scrub.findings import (
    Cause,
    HeadAnswer,
    HeadVerdict,
    ListingTally,
    StrandedRule,
    is_stranded,
    missing_key,
    silent_partition,
    stranded_rule,
    verdict,
)
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import Reference
from tests.test_layers import forbidden_imports

LAYOUT = KeyLayout.default("level_zero/data")
REF = Reference("orders/0", 7, LAYOUT.format(7, 3, "seg"))


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (HeadAnswer(200), HeadVerdict.PRESENT),
        (HeadAnswer(404, "404"), HeadVerdict.MISSING),  # S3 HEAD: no body
        (HeadAnswer(404, "NoSuchKey"), HeadVerdict.MISSING),
        (HeadAnswer(404, "BlobNotFound"), HeadVerdict.MISSING),  # Azure
        (HeadAnswer(404, "notFound"), HeadVerdict.MISSING),  # GCS
        (HeadAnswer(None, "NoSuchKey"), HeadVerdict.MISSING),  # a fake without a status
        (HeadAnswer(404, "NoSuchBucket"), HeadVerdict.UNKNOWN),
        (HeadAnswer(404, "ContainerNotFound"), HeadVerdict.UNKNOWN),
        (HeadAnswer(500, "InternalError"), HeadVerdict.UNKNOWN),
        (HeadAnswer(503, "SlowDown"), HeadVerdict.UNKNOWN),
        (HeadAnswer(429, "SlowDown"), HeadVerdict.UNKNOWN),
        (HeadAnswer(403, "403"), HeadVerdict.UNKNOWN),  # no s3:ListBucket: 403, not 404
        (HeadAnswer(None, "Timeout"), HeadVerdict.UNKNOWN),
        (HeadAnswer(None, "ConnectionError"), HeadVerdict.UNKNOWN),
        (HeadAnswer(), HeadVerdict.UNKNOWN),
    ],
)
def test_only_a_not_found_about_the_object_is_missing(
    answer: HeadAnswer, expected: HeadVerdict
) -> None:
    """A 5xx, a throttle, a timeout, a 403 or a 404 naming the bucket is unknown, never
    missing (neon#10304/#11924); a 2xx is present."""
    assert verdict(answer) is expected


def request(outcome: str, at: float, round_id: str = "r1") -> JournaledRequest:
    """A journaled request with `outcome`."""
    return JournaledRequest(
        at=at,
        sweeper="sw-1",
        request=4,
        outcome=outcome,
        safe_epoch=5,
        cluster_epoch=9,
        revision=100,
        epoch=3,
        round=round_id,
        when=f"t{at}",
    )


def test_a_journaled_delete_makes_the_cause_l0gc_with_its_round() -> None:
    """The last deleting request is the answer: its round, time, M and sender."""
    found = missing_key(REF, 3, [request("failed (SlowDown)", 1.0), request("deleted", 2.0, "r2")])
    assert found.cause is Cause.DELETED_BY_L0GC
    doc = found.to_dict()
    assert doc["deletion"]["round"] == "r2"
    assert (doc["deletion"]["safe_epoch"], doc["deletion"]["when"]) == (5, "t2.0")
    assert doc["deletion"]["sender"] == "sweeper sw-1 (request 4)"
    assert (doc["key"], doc["partition"], doc["offset"], doc["journaled_requests"]) == (
        REF.key,
        "orders/0",
        7,
        2,
    )


@pytest.mark.parametrize("outcome", ["hidden (delete marker v1)", "unknown (no after record)"])
def test_a_hidden_or_unanswered_request_counts_as_l0gc(outcome: str) -> None:
    """A request that may have removed the key is l0gc's doing too."""
    assert missing_key(REF, 3, [request(outcome, 1.0)]).cause is Cause.DELETED_BY_L0GC


def test_no_deleting_request_is_absent_from_the_journal_and_no_journal_is_not_read() -> None:
    """No request, or only failed ones: absent; no journal at all: not read."""
    assert missing_key(REF, 3, []).cause is Cause.ABSENT_FROM_JOURNAL
    failed = missing_key(REF, 3, [request("failed (AccessDenied)", 1.0)])
    assert (failed.cause, failed.named) == (Cause.ABSENT_FROM_JOURNAL, 1)
    assert missing_key(REF, 3, None).cause is Cause.JOURNAL_NOT_READ


def test_the_stranded_rule_takes_the_lowest_m_since_the_cutoff() -> None:
    """M then is the entry in force at now - after; a later dip lowers the threshold;
    no history, or one younger than the span, is said, not guessed."""
    history = [MEntry(3, 100.0), MEntry(8, 500.0), MEntry(6, 900.0), MEntry(12, 1000.0)]
    rule = stranded_rule(history, 12, now=1100.0, after_s=500.0)
    assert isinstance(rule, StrandedRule)
    assert (rule.m_then, rule.threshold, rule.cutoff) == (8, 6, 600.0)
    assert isinstance(stranded_rule(history, 4, 1100.0, 500.0), StrandedRule)
    assert stranded_rule(history, 4, 1100.0, 500.0).threshold == 4  # type: ignore[union-attr]
    assert "absent" in str(stranded_rule([], 12, 1100.0, 500.0))
    assert "not checked yet" in str(stranded_rule(history, 12, 1100.0, 2000.0))


def test_a_key_is_stranded_only_if_old_low_and_unreferenced() -> None:
    """Epoch at or below the threshold, written before the cutoff, not referenced."""
    rule = StrandedRule(threshold=6, cutoff=600.0, after_s=500.0, m_then=8)
    assert is_stranded(rule, 6, 600.0, referenced=False)
    assert not is_stranded(rule, 7, 100.0, referenced=False)
    assert not is_stranded(rule, 2, 601.0, referenced=False)  # a late orphan: young garbage
    assert not is_stranded(rule, 2, 100.0, referenced=True)


def test_the_tally_counts_unparsable_and_stranded_keys_and_skips_claims() -> None:
    """The root's claim is no finding; a nested root's keys are not ours; the stranded
    examples are the lowest epochs."""
    rule = StrandedRule(threshold=6, cutoff=600.0, after_s=500.0, m_then=8)
    tally = ListingTally(LAYOUT, rule, frozenset({LAYOUT.format(1, 1, "ref")}), examples=2)
    tally.add("level_zero/data/.l0gc-claim.json", 100, 0.0)
    tally.add("level_zero/data/other/.l0gc-claim.json", 100, 0.0)
    tally.add("level_zero/data/other/x", 5, 0.0)
    tally.add("level_zero/data/notakey", 7, 0.0)
    tally.add(LAYOUT.format(1, 1, "ref"), 1, 0.0)  # referenced: kept on purpose
    for epoch in (5, 2, 4, 9):
        tally.add(LAYOUT.format(3, epoch, "s"), 10, 0.0)
    tally.add(LAYOUT.format(3, 1, "young"), 10, 700.0)
    assert (tally.listed, tally.unparsable, tally.unparsable_bytes) == (10, 1, 7)
    assert tally.nested == ["level_zero/data/other"]
    assert tally.under_nested == 1
    assert (tally.stranded, tally.stranded_bytes) == (3, 30)
    assert [k.epoch for k in tally.oldest_stranded] == [2, 4]


def record(**fields: object) -> PartitionRecord:
    """A record of orders/0 at M(p) 3 owned by pub."""
    base: dict[str, object] = {
        "partition": "orders/0",
        "watermark": 3,
        "created_epoch": 1,
        "owner": "pub",
        "owner_epoch": 1,
        "updated_at": 4000.0,
    }
    return PartitionRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_a_silent_partition_pins_m_and_has_not_moved() -> None:
    """Never published, not written, or waiting on one thing past the threshold; a
    record at the head or recently moved is silent on nothing."""
    now, after = 5000.0, 3600.0
    assert silent_partition(record(), 10, now, after) is None
    assert silent_partition(record(watermark=9), 10, 9000.0, after) is None
    never = silent_partition(record(updated_at=None), 10, now, after)
    assert never is not None
    assert never.reason == "never_published"
    old = silent_partition(record(), 10, 9000.0, after)
    assert old is not None
    assert old.reason == "not_updated"
    waiting = {"on": "reconciler", "committed_offset": 9, "reconciled_offset": 2, "since": 10.0}
    stuck = silent_partition(record(updated_at=4900.0, waiting=waiting), 10, now, after)
    assert stuck is not None
    assert stuck.reason == "waiting"
    assert "committed offset 9, reconciled 2" in stuck.detail


def test_the_findings_module_is_pure() -> None:
    """No I/O, clock or randomness in the decisions."""
    source = Path(__file__).parents[3] / "gcd" / "scrub" / "findings.py"
    assert forbidden_imports(source.read_text()) == []
