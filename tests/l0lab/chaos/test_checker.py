"""The chaos checker (pure): how deletions are judged, and every rule of a run's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcd.journal.check import Finding, FindingKind, VerifyReport
from gcd.journal.records import JournalRead, Record
from l0lab.chaos.checker import (
    Deletion,
    FaultRecord,
    RunFacts,
    RunHistory,
    check_run,
    deletions_of,
    unanswered_of,
)
from l0lab.chaos.records import PartitionLog


def log_of(tmp_path: Path, *entries: tuple[int, str, str | None, float | None]) -> PartitionLog:
    """A partition log: (offset, key, resolution, resolved_at) per entry."""
    log = PartitionLog(tmp_path / "p.jsonl")
    for offset, key, how, at in entries:
        log.apply({"op": "append", "offset": offset, "key": key, "epoch": 5, "t": 1.0})
        if how == "abort":
            log.apply({"op": "abort", "offset": offset, "t": at})
        elif how is not None:
            log.apply({"op": "commit", "offset": offset, "how": how, "t": at})
    return log


def ledger(tmp_path: Path) -> RunHistory:
    """Keys a (committed, lifted at 10), b (committed, never lifted), c (aborted),
    d (unresolved), o (uploaded, never in the log: an orphan)."""
    led = RunHistory()
    led.add_writer_events(
        {"op": "upload", "key": k, "partition": "p", "epoch": 5, "t": 1.0} for k in "abcdo"
    )
    led.add_writer_events([{"op": "stored", "key": "o", "t": 1.1}])
    led.add_log(
        "p",
        log_of(
            tmp_path,
            (0, "a", "ok", 2.0),
            (1, "c", "abort", 2.0),
            (2, "b", "kept", 3.0),
            (3, "d", None, None),
        ),
    )
    led.add_lifts([{"op": "lift", "partition": "p", "through": 1, "t": 10.0}])
    return led


def test_a_delete_before_the_lift_is_a_loss_and_after_it_is_safe(tmp_path: Path) -> None:
    """A committed entry protects its object until its lift is recorded, not a moment less."""
    led = ledger(tmp_path)
    assert led.judge("a", 9.9, final=True) == "loss"
    assert led.judge("a", 10.1, final=True) == "safe"
    assert led.judge("b", 99.0, final=True) == "loss"  # kept and never lifted


def test_aborted_orphans_and_unknown_keys(tmp_path: Path) -> None:
    """Aborted entries and orphans are garbage; unresolved ones are pending, then losses."""
    led = ledger(tmp_path)
    assert led.judge("c", 0.0, final=True) == "safe"
    assert led.judge("o", 0.0, final=False) == "pending"
    assert led.judge("o", 0.0, final=True) == "safe"
    assert led.judge("d", 0.0, final=False) == "pending"
    assert led.judge("d", 0.0, final=True) == "loss"
    assert led.judge("never-written", 0.0, final=True) == "unknown"
    assert led.is_garbage("a")
    assert not led.is_garbage("b")
    assert led.unlifted() == ["b"]


def journal(*records: dict[str, object]) -> JournalRead:
    """A journal read from `records` (one sweeper)."""
    read = JournalRead()
    for doc in records:
        read.records.append(Record(dict(doc), json.dumps(doc).encode(), "j:1"))
    return read


def test_deletions_pair_each_outcome_with_when_its_request_began() -> None:
    """The moment a deletion is judged at is its before record's, not its after's."""
    read = journal(
        {"type": "before", "sweeper": "s", "request": 1, "at": 5.0, "keys": ["a", "b"]},
        {"type": "before", "sweeper": "s", "request": 2, "at": 6.0, "keys": ["c"]},
        {"type": "after", "sweeper": "s", "request": 2, "at": 6.5, "deleted": ["c"]},
        {"type": "after", "sweeper": "s", "request": 1, "at": 7.0, "deleted": ["a"]},
    )
    found = {(d.key, d.began_at, d.answered_at) for d in deletions_of(read)}
    assert found == {("a", 5.0, 7.0), ("c", 6.0, 6.5)}


def facts(tmp_path: Path, **changes: object) -> RunFacts:
    """A passing run's facts, with `changes`."""
    led = ledger(tmp_path)
    values: dict[str, object] = {
        "ledger": led,
        "deletions": [],
        "present": {"b", "d"},
        "readback_missing": [],
        "final_m": 5,
        "cluster_epoch": 7,
        "journal": VerifyReport(),
        "faults": [],
        "m_samples": [(1.0, 3), (2.0, 4)],
        "started_at": 0.0,
        "faulty_until": 4.0,
        "recovery_bound_s": 30.0,
        "duration_s": 10.0,
    }
    values.update(changes)
    return RunFacts(**values)  # type: ignore[arg-type]


def test_a_clean_run_passes_and_counts(tmp_path: Path) -> None:
    """No problem: ok, and the counts add up."""
    deleted = [Deletion(k, "s", 11.0, 11.5) for k in ("a", "c", "o")]
    verdict = check_run(facts(tmp_path, deletions=deleted))
    assert verdict.problems == []
    assert verdict.ok
    counts = verdict.counts
    assert (counts["objects_written"], counts["objects_deleted"], counts["live_lost"]) == (5, 3, 0)
    assert counts["orphans"] == 3  # c aborted, d unresolved, o never appended


def test_every_rule_of_a_run_bites(tmp_path: Path) -> None:
    """Losses, garbage left, keys gone unjournaled, journal findings, M backwards,
    fencing violations, a slow recovery and a silent sweeper are each a problem."""
    led = ledger(tmp_path)
    led.add_writer_events([{"op": "fencing_violation", "partition": "p", "epoch": 4, "t": 2.0}])
    report = VerifyReport()
    report.findings.append(Finding(FindingKind.VIOLATION, "j:9", "claims M = 9, etcd gives 5"))
    slow = FaultRecord("etcd-kill", "etcd m1", 1.0, healed_at=2.0, recovered_at=40.0)
    never = FaultRecord("sweeper-kill", "sweeper-0", 1.0, healed_at=2.0, note="no round")
    cut = FaultRecord("failover", "p", 1.0, healed_at=2.0, cut_short=True)
    verdict = check_run(
        facts(
            tmp_path,
            ledger=led,
            deletions=[Deletion("b", "s", 3.0, 3.2)],
            present={"a", "d"},
            readback_missing=["d"],
            journal=report,
            m_samples=[(1.0, 5), (2.0, 4)],
            faults=[slow, never, cut],
            duration_s=40.0,
        )
    )
    text = "\n".join(verdict.problems)
    assert "2 live objects lost" in text
    assert "garbage objects at or below the final M 5 left, e.g. a" in text
    assert "gone without a journal record of their deletion, e.g. c" in text
    assert "gcd journal verify: 1 violation findings" in text
    assert "the global M went backwards in etcd: 5 then 4" in text
    assert "1 fencing violations" in text
    assert "recovery after etcd-kill on etcd m1 took 38.0 s, above the bound of 30 s" in text
    assert "no recovery within 30 s after sweeper-kill on sweeper-0 (no round)" in text
    assert "failover" not in text  # its wait was cut short by the first loss
    assert [loss["how"] for loss in verdict.losses] == [
        "deleted while referenced",
        "missing at read-back",
    ]
    silent = check_run(facts(tmp_path, duration_s=40.0, present={"a", "b", "c", "d", "o"}))
    assert any("nothing was deleted in a 40 s run" in p for p in silent.problems)


def test_the_longest_write_gap_spans_the_faulty_phase(tmp_path: Path) -> None:
    """Gaps between commits, and from the phase's edges, are measured per partition."""
    led = RunHistory()
    led.add_log("p", log_of(tmp_path, (0, "a", "ok", 2.0), (1, "b", "ok", 7.0)))
    assert led.longest_write_gap(0.0, 8.0) == (pytest.approx(5.0), "p")


def test_a_request_cut_short_by_a_kill_still_journals_its_keys(tmp_path: Path) -> None:
    """A sweeper killed with its request in flight leaves a before record and no after:
    its keys that are gone are journaled (judged at the request's start), not "gone
    without a journal record" (a chaos run with a sweeper-kill failed so)."""
    read = journal(
        {"type": "before", "sweeper": "s", "request": 1, "at": 11.0, "keys": ["c", "o", "b"]},
    )
    cut = unanswered_of(read)
    assert {(d.key, d.began_at) for d in cut} == {("c", 11.0), ("o", 11.0), ("b", 11.0)}
    verdict = check_run(
        facts(tmp_path, deletions=[Deletion("a", "s", 11.0, 11.5)], unanswered=cut)
    )  # b is still there: not sent, or refused
    assert verdict.problems == []
    assert check_run(facts(tmp_path, deletions=[Deletion("a", "s", 11.0, 11.5)])).problems == [
        "2 objects are gone without a journal record of their deletion, e.g. c"
    ]
    early = [Deletion("a", "s", 9.0, 9.0)]  # before a's lift at 10: a loss if it is gone
    verdict = check_run(
        facts(
            tmp_path,
            present={"b", "d"},
            unanswered=early,
            deletions=[Deletion(k, "s", 11.0, 11.5) for k in "co"],
        )
    )
    assert [loss["key"] for loss in verdict.losses] == ["a"]


def test_a_put_cut_short_by_a_writer_kill_is_not_counted_gone(tmp_path: Path) -> None:
    """A writer killed between its upload record and the PUT's answer leaves an upload
    that may never have reached the store: absent at the end, it is not "gone" (a chaos
    run with a writer kill failed so), while a stored orphan that vanished still is."""
    led = ledger(tmp_path)
    led.add_writer_events([{"op": "upload", "key": "k", "partition": "p", "epoch": 5, "t": 4.0}])
    deleted = [Deletion(k, "s", 11.0, 11.5) for k in ("a", "c")]
    verdict = check_run(facts(tmp_path, ledger=led, deletions=deleted))
    assert verdict.problems == [
        "1 objects are gone without a journal record of their deletion, e.g. o"
    ]
    assert verdict.counts["puts_cut_short"] == 1
    led.add_writer_events([{"op": "stored", "key": "k", "t": 4.1}])
    verdict = check_run(facts(tmp_path, ledger=led, deletions=deleted))
    assert "2 objects are gone without a journal record of their deletion, e.g. k" in (
        verdict.problems
    )
    assert verdict.counts["puts_cut_short"] == 0
