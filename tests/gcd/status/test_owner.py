"""`gcd status` on a pinning partition's owner (issue 55): the `waiting` line, and an
owner no running process holds shown as gone, not as an owner."""

from __future__ import annotations

import dataclasses

import pytest

from gcd.cli.status_text import render_text, waiting_text
from gcd.status.owner import gone_owners
from gcd.status.report import PartitionStatus, StatusReport
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from watermark.service.liveness import Liveness

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("waiting", "expected"),
    [
        (
            {"on": "log_end", "since": NOW - 600},
            (
                "waiting since 2027-01-15T07:50:00Z (600 s) "
                "for its log end: its reconciler must send log_end_offset once asked"
            ),
        ),
        (
            {"on": "reconciler", "committed_offset": 9, "reconciled_offset": 4, "since": NOW},
            "for its reconciler: committed through offset 9, reconciled through 4",
        ),
        ({"on": "fences", "fences": 2, "since": NOW}, "for 2 fence(s) in flight"),
        ({"on": "fencing_violation", "since": NOW}, "frozen by a fencing violation"),
        ({"on": "reconciler", "since": NOW}, "for reconciler"),  # fields missing: the reason
        ({"on": "next_release_reason"}, "waiting for next_release_reason"),
    ],
)
def test_waiting_text(waiting: dict[str, object], expected: str) -> None:
    assert expected in waiting_text(waiting, NOW)


def pin(name: str, owner: str | None, *, lag: int, age_s: float) -> PartitionStatus:
    return PartitionStatus(
        partition=name,
        watermark=3,
        lag_epochs=lag,
        owner=owner,
        owner_epoch=1,
        window=(4, 5),
        created_epoch=1,
        updated_at=NOW - age_s,
        age_s=age_s,
        waiting={"on": "log_end", "since": NOW - age_s},
    )


async def test_an_owner_without_liveness_key_and_no_recent_publish_is_gone() -> None:
    store = WatermarkStore(MemoryKV(), "/ns")
    alive = Liveness(store.kv, "/ns", "served", 30)
    await alive.hold(1.0)
    pins = [
        pin("dead", "crashed", lag=5, age_s=300),  # no key, silent for 5 min: gone
        pin("keyed", "served", lag=5, age_s=300),  # a serve holding its liveness key
        pin("recent", "embedded", lag=5, age_s=20),  # published 20 s ago
        pin("steady", "crashed", lag=2, age_s=300),  # the window's steady state: not judged
        pin("none", None, lag=5, age_s=300),
    ]
    assert await gone_owners(store, pins, NOW) == {"dead"}


def test_a_gone_owner_is_not_shown_as_the_owner_and_its_stale_waiting_is_not_printed() -> None:
    live = pin("orders/1", "pub-a", lag=5, age_s=20)
    dead = dataclasses.replace(pin("orders/2", "pub-b", lag=5, age_s=300), owner_gone=True)
    report = StatusReport(
        version=1,
        namespace="/ns",
        revision=1,
        cluster_epoch=8,
        safe_epoch=3,
        lag_epochs=5,
        blocked=False,
        blocked_reason=None,
        blocked_partition=None,
        paused=False,
        paused_reason=None,
        paused_at=None,
        partition_count=2,
        pinning=(live, dead),
    )
    text = render_text(report, NOW)
    assert "owner pub-a #1" in text
    assert "none now (record: pub-b #1, gone)" in text
    assert text.count("for its log end") == 1  # the live owner's; the gone one's is stale


@pytest.mark.parametrize("since", [1e308, -1e308, -5.0, float(2**63)])
def test_a_hand_written_since_no_date_can_show_is_not_a_crash(since: float) -> None:
    """Attacker's pass: a record's `waiting.since` (or `updated_at`, behind "pinned
    longest") of 1e308 is a finite number the record accepts; datetime cannot show it."""
    assert waiting_text({"on": "log_end", "since": since}, NOW).startswith(
        "waiting for its log end"
    )
    live = pin("orders/1", "pub-a", lag=5, age_s=20)
    held = {"partition": "orders/1", "watermark": 3, "owner": "pub-a", "since": since, "for_s": 0.0}
    report = StatusReport(
        version=1,
        namespace="/ns",
        revision=1,
        cluster_epoch=8,
        safe_epoch=3,
        lag_epochs=5,
        blocked=False,
        blocked_reason=None,
        blocked_partition=None,
        paused=False,
        paused_reason=None,
        paused_at=None,
        partition_count=1,
        pinning=(live,),
        pinned_longest=held,
    )
    assert "pinned longest orders/1  M(p) 3 since an unreadable time" in render_text(report, NOW)
