"""Small models for the exhaustive checker: the operator's tools, every order of their steps.

The cluster explorer (`l0lab.sim.explore`) enumerates writers, publishers and sweepers.
Two promises live beside it: the undo window with `gcd restore` (a versioned bucket, the
journal, the runbook: `l0lab.sim.undo_model`) and registration racing deregistration
(two requests whose etcd calls interleave: `l0lab.sim.registration_model`). Each is a
`Model`: a tiny world built from the real code whose every choice is a named move.
`explore_model` searches it breadth-first by replay and hashes each state's snapshot, as
the cluster explorer does, so the first violation comes with a shortest counterexample.
docs/reliability.md lists the moves; the suite (`l0lab.sim.suite`) runs both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from l0lab.sim.checks import Violation
from l0lab.sim.variants import CORRECT, Variant

__all__ = ["Model", "ModelExploration", "ModelRun", "explore_model", "replay_model"]


@dataclass(slots=True)
class ModelRun:
    """What running one path of a model found: its violations, trace, state and moves."""

    moves: tuple[str, ...]
    violations: list[Violation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    state: bytes = b""
    enabled: list[str] = field(default_factory=list)


class Model(Protocol):
    """A model: its name (`--model`), its depth bound, and a replay of one path."""

    @property
    def name(self) -> str:
        """The model's `--model` name."""
        ...

    @property
    def depth(self) -> int:
        """The longest path searched."""
        ...

    def run(self, variant: Variant, moves: Sequence[str]) -> ModelRun:
        """Run the real code along `moves`, stopping at the first violation."""
        ...


@dataclass(slots=True)
class ModelExploration:
    """The outcome of one model's search (the fields `gcd simulate --exhaustive` prints)."""

    variant: str
    model: str
    states: int = 0
    transitions: int = 0
    depth: int = 0
    levels: list[int] = field(default_factory=list)
    exhausted: bool = False
    counterexample: Any = None
    """An `l0lab.sim.explore.Counterexample` (liveness False), or None."""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when nothing was violated."""
        return self.counterexample is None

    def reproduce(self) -> str:
        """The command that replays the counterexample."""
        if self.counterexample is None:
            return ""
        variant = "" if self.variant == CORRECT.name else f" --variant {self.variant}"
        path = "; ".join(self.counterexample.moves)
        return f"gcd simulate --exhaustive{variant} --model {self.model} --replay '{path}'"

    def to_dict(self) -> dict[str, Any]:
        """The `gcd simulate --exhaustive --model M --json` document."""
        cex = self.counterexample
        return {
            "version": 1,
            "mode": "exhaustive",
            "model": self.model,
            "variant": self.variant,
            "states": self.states,
            "transitions": self.transitions,
            "depth": self.depth,
            "states_per_level": self.levels,
            "exhausted": self.exhausted,
            "liveness_tails": 0,
            "violations": 0 if cex is None else 1,
            "counterexample": None
            if cex is None
            else {**cex.to_dict(), "reproduce": self.reproduce()},
            "duration_s": round(self.duration_s, 3),
        }


def explore_model(
    model: Model,
    variant: Variant = CORRECT,
    *,
    on_level: Callable[[int, int, int], None] | None = None,
) -> ModelExploration:
    """Breadth-first search of every path of `model` up to its depth."""
    from l0lab.sim.explore import Counterexample  # noqa: PLC0415 - explore imports the suite

    started = time.perf_counter()
    result = ModelExploration(variant.name, model.name)

    def found(run: ModelRun) -> ModelExploration:
        result.counterexample = Counterexample(
            run.moves, run.violations[0], tuple(run.trace), False
        )
        result.depth = len(run.moves)
        result.duration_s = time.perf_counter() - started
        return result

    root = model.run(variant, ())
    if root.violations:
        return found(root)
    seen, frontier = {root.state}, [root]
    result.states, result.levels = 1, [1]
    for level in range(model.depth):
        nexts: dict[bytes, ModelRun] = {}
        for parent in frontier:
            for move in parent.enabled:
                child = model.run(variant, (*parent.moves, move))
                result.transitions += 1
                if child.violations:
                    return found(child)
                if child.state not in seen:
                    seen.add(child.state)
                    nexts[child.state] = child
        result.levels.append(len(nexts))
        result.states += len(nexts)
        if on_level is not None:
            on_level(level + 1, len(nexts), result.transitions)
        if not nexts:
            result.exhausted = True
            break
        frontier = list(nexts.values())
        result.depth = level + 1
    result.duration_s = time.perf_counter() - started
    return result


def replay_model(model: Model, variant: Variant, labels: Sequence[str]) -> ModelRun:
    """Run one path given as move labels; ValueError names a label not possible there."""
    for index in range(len(labels)):
        prefix = model.run(variant, labels[:index])
        if prefix.violations:
            return prefix
        if labels[index] not in prefix.enabled:
            raise ValueError(
                f"step {index + 1}, {labels[index]!r}, is not possible there; the "
                f"moves possible are: {', '.join(prefix.enabled)}"
            )
    return model.run(variant, tuple(labels))
