"""The operator models of the exhaustive checker (`l0lab.sim.smallmodel`): register racing
deregister and the undo window with `gcd restore`. The real code passes them; each of
issue 51's findings is a path that is harmless on the real code and a violation on the
variant that brings the old code back."""

from __future__ import annotations

import pytest

from gcd.cli.main import main
from l0lab.sim.checks import ViolationKind
from l0lab.sim.registration_model import RegistrationModel
from l0lab.sim.smallmodel import explore_model, replay_model
from l0lab.sim.undo_model import UndoModel
from l0lab.sim.variants import CORRECT, VARIANTS

RACE = (
    "register",
    "deregister",
    "step deregister",
    "step register",
    "step register",
    "step register",
    "step register",
    "step deregister",
    "step register",
    "step register",
    "step deregister",
    "step deregister",
    "step deregister",
    "fence",
)
"""check-then-delete-deregister's shortest counterexample: the deregister checks the fresh
record (no owner), the register's adopt makes the publisher its owner, the deregister's
delete (compared against the record it checked: refused, then read again) goes on
unconditioned, and the publisher grants a fence for a partition with no record."""


def test_the_real_code_passes_every_interleaving_of_register_and_deregister() -> None:
    """The whole state space (it closes before the depth bound), with the counts."""
    result = explore_model(RegistrationModel(), CORRECT)
    assert result.ok, result.counterexample
    assert result.exhausted
    assert (result.states, result.transitions) == (324, 1030)


REFUSED = (
    "register",
    "deregister",
    "step register",
    "step register",
    "step register",
    "step register",
    "step deregister",
    "step register",
    "step register",
    "step deregister",
    "step deregister",
    "step deregister",
    "step deregister",
    "fence",
)
"""The same race on the real code: the deregister reads the fresh record (no owner), the
adopt makes the publisher its owner, the delete compared against the record read is
refused, the record is read and checked again (a live owner now: LiveOwner, HTTP 409)."""


def test_the_race_is_refused_on_the_real_code_and_acknowledged_by_the_old_deregister() -> None:
    real = replay_model(RegistrationModel(), CORRECT, REFUSED)
    assert not real.violations
    assert "deregister sends txn" in real.trace
    assert "deregister answered: LiveOwner" in real.trace
    assert real.trace[-1] == "publisher acknowledged the fence"  # the record is still there
    old = replay_model(RegistrationModel(), VARIANTS["check-then-delete-deregister"], RACE)
    assert [v.kind for v in old.violations] == [ViolationKind.ACKED_AFTER_DEREGISTER]


def test_a_deregister_before_the_adopt_leaves_nothing_hosted() -> None:
    """The record goes before the adopt's compare-and-swap: the adopt finds no record,
    the register request fails, and no fence is granted."""
    path = (
        "register",
        "step register",
        "step register",
        "step register",
        "step register",
        "deregister",
        "step deregister",
        "step deregister",
        "step register",
        "fence",
        "round",
    )
    run = replay_model(RegistrationModel(), CORRECT, path)
    assert not run.violations
    assert "register answered: PartitionNotRegistered" in run.trace
    assert "publisher acknowledged the fence" not in run.trace


def test_the_real_code_passes_the_undo_model_at_depth_5() -> None:
    """Everyday: the shallow part; the suite's depth 7 runs in the deep tier
    (tests/l0lab/sim/test_explore.py)."""
    result = explore_model(UndoModel(depth=5), CORRECT)
    assert result.ok, result.counterexample
    assert result.levels == [1, 5, 17, 53, 152, 420]


def test_a_forged_marker_is_refused_by_restore_and_deleted_by_the_old_one() -> None:
    """Issue 51 finding 2a: the journal names a live key's data version as l0gc's marker."""
    path = ("upload t/0", "tick", "mistake t/0", "forge o0", "restore")
    run = replay_model(UndoModel(), CORRECT, path)
    assert not run.violations
    assert "restore: o0 refused" in run.trace
    old = replay_model(UndoModel(), VARIANTS["marker-blind-restore"], path)
    assert [v.kind for v in old.violations] == [ViolationKind.LOST_BYTES]


def test_a_key_written_again_after_the_hide_is_left_alone() -> None:
    """Issue 51 finding 1's second half: restore must not touch a newer version."""
    path = (
        "upload t/0",
        "tick",
        "mistake t/0",
        "sweep",
        "rewrite o0",
        "restore",
        "repair",
        "sweep",
    )
    run = replay_model(UndoModel(), CORRECT, path)
    assert not run.violations
    assert "restore: o0 superseded" in run.trace


def test_the_runbook_without_pause_is_caught() -> None:
    path = ("upload t/0", "tick", "mistake t/0", "sweep", "restore", "sweep")
    assert not replay_model(UndoModel(), CORRECT, path).violations
    old = replay_model(UndoModel(), VARIANTS["unpaused-restore"], path)
    assert [v.kind for v in old.violations] == [ViolationKind.HIDDEN_AFTER_RESTORE]


def test_a_move_that_is_not_possible_is_named() -> None:
    with pytest.raises(ValueError, match="'restore', is not possible there"):
        replay_model(UndoModel(), CORRECT, ("restore",))


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (
            ["--model", "registration", "--variant", "check-then-delete-deregister"],
            1,
            "acked_after_deregister after 14 moves",
        ),
        (
            ["--model", "undo", "--replay", "upload t/0; tick; mistake t/0; forge o0; restore"],
            0,
            "replayed 5 moves: no violation",
        ),
        (["--model", "undo", "--depth", "3"], 2, "drop them or drop --model"),
        (["--model", "undo", "--replay", "restore"], 2, "'restore', is not possible there"),
    ],
)
def test_the_command_line(
    args: list[str], code: int, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--exhaustive", *args]) == code
    captured = capsys.readouterr()
    assert text in captured.out + captured.err
