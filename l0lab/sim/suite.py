"""The default of `gcd simulate --exhaustive`: a few bounded scopes, searched in turn.

Why
---
No one scope holds every documented bug within minutes. The general scope (`Scope()`:
two partitions, two writers, two publishers, one fault of any kind, depth 4, liveness
tails) covers the most ground per state but is too shallow for bugs that need seven to
ten precise moves; one scope deep enough for all of them has hundreds of thousands of
states. Each broken variant (`l0lab.sim.variants`) needs only a few actors, so the suite
adds, after the general scope, the focused scopes in which their shortest
counterexamples lie: one partition, only the actors and the fault kind the bug needs,
and the depth it needs. With no scope flag, `gcd simulate --exhaustive [--variant V]`
runs `SUITE` and stops at the first violation, so every documented variant is found with
no flag but `--variant` (docs/reliability.md lists the stages and bench/RESULTS.md their
cost: each variant within ~4.5 minutes of CPU; the real code passes them all in ~6.5).

Two stages are not cluster scopes but the operator models (`l0lab.sim.smallmodel`):
``registration`` (register racing deregister, one etcd call at a time) and ``undo`` (the
undo window, `gcd restore` and its runbook). They come first: together under half a
minute of CPU.

Liveness tails run from the general scope's states only: the focused scopes are there
for safety bugs, and their deep last levels would multiply the tails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from l0lab.sim.explore import Exploration, explore
from l0lab.sim.moves import Scope
from l0lab.sim.registration_model import RegistrationModel
from l0lab.sim.smallmodel import Model, ModelExploration, explore_model
from l0lab.sim.undo_model import UndoModel
from l0lab.sim.variants import Variant

__all__ = ["MODELS", "SUITE", "Stage", "explore_stage", "explore_suite", "stage_of"]

MODELS: dict[str, Model] = {"registration": RegistrationModel(), "undo": UndoModel()}
"""The operator models, by their `gcd simulate --exhaustive --model` name."""


@dataclass(frozen=True, slots=True)
class Stage:
    """One scope of the suite, and the broken variants whose shortest counterexample it
    holds (with its length, asserted by tests/l0lab/sim/test_explore.py)."""

    name: str
    scope: Scope | None
    """None: the operator model named `model`."""
    finds: tuple[tuple[str, int], ...]
    liveness: bool = False
    model: str | None = None

    def flags(self) -> str:
        """The command-line flags that search this stage alone."""
        return f"--model {self.model}" if self.scope is None else self.scope.flags()


def _one(writers: int, publishers: int, depth: int, *kinds: str) -> Scope:
    """One partition; `kinds` are the fault kinds (none: no fault at all)."""
    if not kinds:
        return Scope(partitions=1, writers=writers, publishers=publishers, faults=0, depth=depth)
    return Scope(
        partitions=1,
        writers=writers,
        publishers=publishers,
        fault_kinds=frozenset(kinds),
        depth=depth,
    )


_TWO_WRITERS = (
    ("single-epoch-window", 5),
    ("no-drain-slide", 6),
    ("eager-floor", 6),
    ("floor-two-early", 10),
)
SUITE: tuple[Stage, ...] = (
    Stage("registration", None, (("check-then-delete-deregister", 14),), model="registration"),
    Stage("undo", None, (("marker-blind-restore", 5), ("unpaused-restore", 6)), model="undo"),
    Stage("corrupt", _one(1, 1, 6, "corrupt"), (("lenient-sweeper", 4),)),
    Stage("expire", _one(1, 1, 7, "expire"), (("late-commit", 7),)),
    Stage("raise", _one(2, 2, 6, "raise"), (("inclusive-floor", 3),)),
    Stage("failover", _one(1, 2, 6, "failover"), (("owner-blind-publisher", 6),)),
    Stage("crash", _one(1, 1, 8, "crash"), (("forgetful-adopt", 8),)),
    Stage("three-writers", _one(3, 1, 8), (("applied-max-window", 8),)),
    Stage("two-writers", _one(2, 1, 10), _TWO_WRITERS),
    Stage("overreport", _one(1, 1, 8, "overreport"), (("no-cross-check", 8),)),
    Stage("general", Scope(), (), liveness=True),
)
"""Cheapest first, so a bug is reported soonest: each variant is found after the stages
before its own have passed (at most ~4.5 minutes of CPU, bench/RESULTS.md section 34).
Except ``overreport`` (issue 54: the reconciler bug, under which the real sweeper keeps a
referenced key and `no-cross-check` deletes it; ~1 minute of CPU): it comes after the
stages that were there before it, so each earlier variant is still found where it was.
The general scope, which holds no documented variant's shortest counterexample but
covers the most ground per state and checks liveness, comes last."""


def stage_of(variant: str) -> tuple[Stage, int]:
    """The stage holding `variant`'s shortest counterexample, and its length."""
    for stage in SUITE:
        for name, length in stage.finds:
            if name == variant:
                return stage, length
    raise KeyError(f"no stage of the suite holds variant {variant!r}")


def explore_suite(
    variant: Variant,
    *,
    symmetry: bool = True,
    por: bool = True,
    liveness: bool = True,
    fork: bool = False,
    on_stage: Callable[[Stage], None] | None = None,
    on_level: Callable[[int, int, int], None] | None = None,
    stages: tuple[Stage, ...] = SUITE,
) -> list[tuple[Stage, Exploration | ModelExploration]]:
    """Search each stage in turn; stop after the first that finds a violation."""
    done: list[tuple[Stage, Exploration | ModelExploration]] = []
    for stage in stages:
        if on_stage is not None:
            on_stage(stage)
        result = explore_stage(
            stage,
            variant,
            symmetry=symmetry,
            por=por,
            liveness=liveness and stage.liveness,
            fork=fork,
            on_level=on_level,
        )
        done.append((stage, result))
        if not result.ok:
            break
    return done


def explore_stage(
    stage: Stage,
    variant: Variant,
    *,
    on_level: Callable[[int, int, int], None] | None = None,
    **options: bool,
) -> Exploration | ModelExploration:
    """Search one stage: its cluster scope (`options` go to `explore`) or its model."""
    if stage.scope is None:
        assert stage.model is not None
        return explore_model(MODELS[stage.model], variant, on_level=on_level)
    return explore(stage.scope, variant, on_level=on_level, **options)
