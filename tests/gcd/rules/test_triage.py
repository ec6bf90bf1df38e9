"""DeleteObjects answer triage: deleted only when the answer says so."""

from __future__ import annotations

from dataclasses import dataclass

from gcd.rules.triage import (
    RETRYABLE_CODES,
    SPLIT_CODES,
    THROTTLE_CODES,
    RequestFailure,
    request_failure,
    retryable_code,
    triage,
)


@dataclass(frozen=True)
class Fail:
    key: str
    code: str


def test_each_key_lands_in_exactly_one_bucket() -> None:
    """Deleted, retryable, unmentioned and final keys are sorted apart, in order."""
    sent = ["a", "b", "c", "d", "e"]
    answer = triage(sent, ["a"], [Fail("c", "SlowDown"), Fail("b", "AccessDenied")])
    assert answer.deleted == ("a",)
    assert answer.retry == ("c", "d", "e")  # retryable failures first, then unmentioned
    assert [f.key for f in answer.retry_failures] == ["c"]
    assert [f.key for f in answer.failed] == ["b"]


def test_unknown_code_is_never_deleted_nor_retried() -> None:
    """A code nobody knows (or an empty one) is a final failure, never a deletion."""
    for code in ("SomethingNew", "", "Unknown"):
        answer = triage(["k"], [], [Fail("k", code)])
        assert answer.deleted == ()
        assert answer.retry == ()
        assert [f.key for f in answer.failed] == ["k"]


def test_contradictory_answer_is_not_a_deletion() -> None:
    """A key listed both as deleted and as failed is not counted deleted."""
    answer = triage(["k"], ["k"], [Fail("k", "InternalError")])
    assert answer.deleted == ()
    assert answer.retry == ("k",)


def test_keys_not_sent_are_ignored() -> None:
    """An answer naming keys that were not in the request changes nothing for them."""
    answer = triage(["k"], ["k", "other"], [Fail("stranger", "AccessDenied")])
    assert answer.deleted == ("k",)
    assert answer.failed == ()


def test_code_sets() -> None:
    """Throttling codes are retryable; split codes are not (they are bisected)."""
    assert THROTTLE_CODES <= RETRYABLE_CODES
    assert not SPLIT_CODES & RETRYABLE_CODES
    assert retryable_code("SlowDown")
    assert retryable_code("503")
    assert not retryable_code("AccessDenied")


def test_whole_request_failure() -> None:
    """Retryable: retry; a split code: halve, or suspect a lone key; else fail."""
    assert request_failure("SlowDown", True, 10) is RequestFailure.RETRY
    assert request_failure("MalformedXML", False, 10) is RequestFailure.SPLIT
    assert request_failure("MalformedXML", False, 1) is RequestFailure.SUSPECT
    assert request_failure("AccessDenied", False, 10) is RequestFailure.FAIL


def test_the_usual_answer_is_sorted_like_any_other() -> None:
    """Every key deleted, in the order sent (the fast path), gives what the general rule
    gives for the same keys in another order."""
    sent = [f"k{i}" for i in range(5)]
    usual = triage(sent, list(sent), [])
    shuffled = triage(sent, list(reversed(sent)), [])
    assert usual.deleted == tuple(sent)
    assert set(shuffled.deleted) == set(usual.deleted)
    assert (usual.retry, usual.failed, shuffled.retry, shuffled.failed) == ((), (), (), ())
