"""`gcd chaos` end to end, as CI runs it: 60 s under every fault, and a checker that bites.

Each test runs the command as a subprocess (it starts ~10 processes of its own, all
stopped by PID at the end). A passing run must have lost nothing, left no garbage at or
below the final M, recovered from every fault within the bound and had its journal
verified against etcd's history; each deliberately broken build must fail. The everyday
tier (`make test`) runs the fixed seed; the random seed, the replicated publishers and
the broken builds are in the deep tier (`make test-deep`). The random seed is printed
(and is in the failure message) with the command that replays it.

Named by behaviour, not module: `gcd chaos` end to end, every l0lab.chaos module at once.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]
deep = pytest.mark.deep

FIXED_SEED = 2
DURATION = "60s"
UNTIL_CAUGHT = "240s"
"""A broken build's run: it ends at the first live object lost (or fencing violation),
usually within the first fault or two (~15 s). Whether one fault exposes the bug
depends on timing (a stale owner's publish must land while a live entry is
unreconciled and a sweeper's round must follow), so a loaded machine may need several:
the run goes on until it is caught, for up to this long, instead of failing a 60 s run
that was merely unlucky (CI once saw one with no loss)."""


def chaos(tmp_path: Path, *args: str, duration: str = DURATION) -> tuple[int, dict[str, Any]]:
    """Run `gcd chaos --json ARGS` with its data and logs under the test's `tmp_path` (a
    failed run keeps them: there, not in /tmp for good); (exit code, report)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gcd",
            "chaos",
            "--duration",
            duration,
            "--json",
            "--run-dir",
            str(tmp_path / "run"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"gcd chaos printed no report (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.returncode, report


def assert_passed(code: int, report: dict[str, Any]) -> None:
    """Every rule held, and the run did what it claims."""
    detail = f"replay: {report['replay']}\nproblems: {report['problems']}"
    assert code == 0, detail
    assert report["ok"], detail
    assert report["live_lost"] == 0
    assert report["garbage_left"] == 0
    assert report["faults_injected"] >= 3, report["faults"]
    assert report["objects_deleted"] > 0
    assert report["journal"]["violations"] == 0
    assert report["journal"]["revisions_checked"] > 0
    assert report["longest_recovery_s"] is not None
    assert report["longest_recovery_s"] <= report["recovery_bound_s"]


def test_a_fixed_seed_run_loses_nothing_under_every_fault(tmp_path: Path) -> None:
    """60 s of faults with the CI seed: exit 0, nothing lost, nothing left, all recovered."""
    code, report = chaos(tmp_path, "--seed", str(FIXED_SEED))
    assert_passed(code, report)
    assert report["seed"] == FIXED_SEED
    assert report["stopped_early"] is None


@deep
def test_a_random_seed_run_loses_nothing_under_every_fault(tmp_path: Path) -> None:
    """The same with a fresh seed each time (printed for a replay)."""
    seed = random.SystemRandom().randrange(2**31)
    print(f"gcd chaos random seed: {seed}")  # the replay needs it
    code, report = chaos(tmp_path, "--seed", str(seed))
    assert_passed(code, report)


@deep
def test_the_no_drain_build_is_caught(tmp_path: Path) -> None:
    """Publishers that slide without draining: the late commits are fencing violations."""
    code, report = chaos(
        tmp_path,
        "--seed",
        str(FIXED_SEED),
        "--broken-build",
        "no-drain-slide",
        duration=UNTIL_CAUGHT,
    )
    assert code == 1, report["problems"]
    assert not report["ok"]
    assert report["stopped_early"] is not None
    assert any("fencing violations" in p or "live objects lost" in p for p in report["problems"])


@deep
def test_the_owner_blind_build_is_caught(tmp_path: Path) -> None:
    """Publishers that ignore owner fencing: a stale owner's M(p) gets live objects deleted."""
    code, report = chaos(
        tmp_path,
        "--seed",
        str(FIXED_SEED),
        "--faults",
        "failover",
        "--broken-build",
        "owner-blind-publisher",
        duration=UNTIL_CAUGHT,
    )
    assert code == 1, report["problems"]
    assert report["live_lost"] > 0
    assert report["losses"][0]["how"] == "deleted while referenced"


@deep
def test_replicated_publishers_lose_nothing_when_replicas_die(tmp_path: Path) -> None:
    """Three `serve --replicated` replicas killed, SIGTERMed and frozen while the writers
    follow 307s: nothing lost, every fault recovered, and partitions really moved."""
    code, report = chaos(
        tmp_path, "--seed", str(FIXED_SEED), "--publisher-replicas", "3", "--faults", "publisher"
    )
    assert_passed(code, report)
    assert report["publisher_replicas"] == 3
    assert "failover" not in report["faults_enabled"]
    moved_by = {"publisher-kill", "publisher-term", "publisher-freeze", "ticker-leader-kill"}
    assert moved_by & set(report["faults_by_kind"])
    assert report["ownership_changes"] > 0
    assert "--publisher-replicas 3" in report["replay"]
