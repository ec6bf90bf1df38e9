"""Exhaustive exploration: every schedule of a small cluster, on the real code.

Why
---
The random simulation (`l0lab.sim.play`) samples schedules; a bug that needs one precise
order of a handful of moves can hide from thousands of seeds. Here every choice the
random simulation draws (which actor moves, which epoch a writer read, when a fence or
commit lands, when a failover, crash or operator raise happens) is enumerated instead,
up to a bounded `Scope` (`l0lab.sim.moves`), breadth-first, so the first violation found
comes with a SHORTEST counterexample.

How
---
Stateless search by replay: the state after a path of moves is never copied (asyncio
tasks cannot be); it is rebuilt by running the real code from the initial state along
the path, on a fresh virtual-time loop, as `gcd simulate --seed` replays a seed. After
each path the canonical snapshot (`l0lab.sim.canon`) is hashed, so each distinct state is
expanded once, at its lowest depth. Every state is checked with the random simulation's
own `Checker` (safety: after every move and at every event); liveness (`--liveness`)
runs the random simulation's quiescent tail (`l0lab.sim.play.quiesce`: faults heal,
writers finish, reconcilers catch up, the epoch ticks, publishers advance and publish,
sweepers sweep) from every state of the last level and every state with no move left,
and checks that the garbage is collected and M is not pinned (bounded response).

Reductions, each switchable off to test it keeps every violation reachable:

- symmetry: writers are interchangeable, and so are partitions and publisher slots
  (renamed together with everything naming them); a state is hashed as the least
  snapshot over all renamings.
- partial-order reduction, by sleep sets: after exploring move a from state s, a move
  b independent of a (`l0lab.sim.moves.footprint`: neither writes what the other reads
  or writes) does not explore a again from s.b, since s.b.a = s.a.b is reached from
  s.a. Sleep sets prune transitions, never states, and keep path lengths, so every
  state is still reached at its lowest depth and counterexamples stay shortest. A
  state reached several times on one level keeps the intersection of the sleep sets
  (in canonical names).

Same scope, same variant: the same states, transitions and counterexample on every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from l0lab.sim import play
from l0lab.sim.canon import Names, canonical
from l0lab.sim.checks import SAFETY, Violation
from l0lab.sim.moves import ExWorld, Move, Scope, enabled, footprint, parse, perform, start
from l0lab.sim.runner import quiet_logs
from l0lab.sim.variants import CORRECT, Variant
from l0lab.sim.vtime import VirtualClock, VirtualTimeLoop
from l0lab.sim.world import START_TIME, SimConfig

__all__ = ["Counterexample", "Exploration", "PathRun", "explore", "run_path"]

REPORT_VERSION = 1
_TAIL_LIMIT = 400
Footprint = tuple[frozenset[str], frozenset[str]]


@dataclass(slots=True)
class PathRun:
    """What running one path of moves found."""

    moves: tuple[Move, ...]
    violations: list[Violation]
    trace: list[str]
    state: bytes = b""
    renamings: list[Names] = field(default_factory=list)
    enabled: list[tuple[Move, Footprint]] = field(default_factory=list)
    crashed: str | None = None


def run_path(
    variant: Variant,
    scope: Scope,
    moves: Sequence[Move],
    *,
    symmetry: bool = True,
    liveness: bool = False,
    branches: Sequence[Move] = (),
) -> PathRun | list[PathRun]:
    """Run the real code from the initial state along `moves` (stopping at the first
    violation); then hash the state and list its moves, or, with `liveness`, play the
    quiescent tail and check liveness. With `branches`, return instead one `PathRun` per
    branch: the state after `moves` is forked (`os.fork`, copy-on-write) once per branch
    and each child performs its branch and reports back, so the path is run once."""
    clock = VirtualClock(START_TIME)
    loop = VirtualTimeLoop(clock)
    config = SimConfig(steps=len(moves), variant=variant, trace_keep=10_000, tail_limit=_TAIL_LIMIT)
    world = ExWorld(0, config, loop, clock)
    run = PathRun(tuple(moves), world.checker.violations, [])
    children: list[PathRun] = []

    async def finish() -> None:
        if liveness:
            for pub in world.publishers:  # stale owners retire in the tail
                for name in pub.publisher.partitions if pub.alive else []:
                    if world.partitions[name].leader is not pub:
                        world.stale.append((0, pub, name))
            world.step = len(run.moves)
            await play.quiesce(world)
            return
        run.state, run.renamings = canonical(world, symmetry=symmetry)
        run.enabled = [(m, footprint(m, world)) for m in enabled(world, scope)]

    async def drive() -> None:
        try:
            await start(world, scope)
            for move in moves:
                await perform(world, scope, move)
                if world.violations:
                    return
            if not branches:
                await finish()
                return
            children.extend([await _fork(move) for move in branches])
        finally:
            await world.cancel_all()

    async def _fork(move: Move) -> PathRun:
        read_end, write_end = os.pipe()
        gc.freeze()  # the child's collector must not touch (and so copy) the parent's heap
        pid = os.fork()
        if pid == 0:  # the child: one more move on its copy of the world, then report
            code = 0
            try:
                # asyncio ties the running loop to the process id: claim it in the child.
                asyncio.events._set_running_loop(loop)
                gc.disable()
                os.close(read_end)
                run.moves = (*run.moves, move)
                try:
                    await perform(world, scope, move)
                    if not world.violations:
                        await finish()
                except Exception as exc:  # noqa: BLE001 - a finding, reported with its path
                    world.checker.crash(f"{type(exc).__name__}: {exc}")
                    world.event(f"CRASH {type(exc).__name__}: {exc}")
                    run.crashed = str(exc)
                run.trace = list(world.trace.tail) if world.violations else []
                run.violations = list(world.violations)
                with os.fdopen(write_end, "wb") as out:
                    pickle.dump(run, out, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001 - never return into the parent's code
                code = 1
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as answer:
            data = answer.read()
        _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 - the child ends at once
        if status != 0 or not data:
            raise RuntimeError(f"the child exploring {move.label!r} failed (status {status})")
        child: PathRun = pickle.loads(data)  # noqa: S301 - our own child's answer
        return child

    try:
        with quiet_logs():
            loop.run_until_complete(drive())
    except Exception as exc:  # noqa: BLE001 - any escape is a finding, reported with its path
        world.checker.crash(f"{type(exc).__name__}: {exc}")
        world.event(f"CRASH {type(exc).__name__}: {exc}")
        run.crashed = str(exc)
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    run.trace = list(world.trace.tail)
    if branches and not world.violations:
        return children
    return run


@dataclass(frozen=True, slots=True)
class Counterexample:
    """A shortest path to a violation, and what it printed."""

    moves: tuple[str, ...]
    violation: Violation
    trace: tuple[str, ...]
    liveness: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "moves": list(self.moves),
            "length": len(self.moves),
            "violation": self.violation.to_dict(),
            "liveness": self.liveness,
            "trace": list(self.trace),
        }


@dataclass(slots=True)
class Exploration:
    """The outcome of one exhaustive search."""

    variant: str
    scope: Scope
    symmetry: bool
    por: bool
    liveness: bool
    states: int = 0
    transitions: int = 0
    replays: int = 0
    depth: int = 0
    levels: list[int] = field(default_factory=list)
    exhausted: bool = False
    """True when no new state was left before the depth bound (the scope is closed)."""
    tails: int = 0
    counterexample: Counterexample | None = None
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
        return f"gcd simulate --exhaustive{variant} {self.scope.flags()} --replay '{path}'"

    def to_dict(self) -> dict[str, Any]:
        """The `gcd simulate --exhaustive --json` document."""
        cex = self.counterexample
        return {
            "version": REPORT_VERSION,
            "mode": "exhaustive",
            "variant": self.variant,
            "scope": {
                "partitions": self.scope.partitions,
                "writers": self.scope.writers,
                "publishers": self.scope.publishers,
                "max_epoch": self.scope.max_epoch,
                "max_faults": self.scope.faults,
                "depth": self.scope.depth,
                "fault_kinds": sorted(self.scope.fault_kinds),
            },
            "reductions": {"symmetry": self.symmetry, "partial_order": self.por},
            "liveness": self.liveness,
            "states": self.states,
            "transitions": self.transitions,
            "replays": self.replays,
            "depth": self.depth,
            "states_per_level": self.levels,
            "exhausted": self.exhausted,
            "liveness_tails": self.tails,
            "violations": 0 if cex is None else 1,
            "counterexample": None
            if cex is None
            else {**cex.to_dict(), "reproduce": self.reproduce()},
            "duration_s": round(self.duration_s, 3),
        }


def _independent(a: Footprint, b: Footprint) -> bool:
    (ra, wa), (rb, wb) = a, b
    if "*" in wa or "*" in wb:
        return False
    return not (wa & (rb | wb) or wb & ra)


def _to_canonical(moves: frozenset[Move], renamings: list[Names]) -> frozenset[Move]:
    """Moves in canonical names: those that are the same under every renaming reaching it."""
    mapped = [frozenset(m.renamed(r) for m in moves) for r in renamings]
    return frozenset.intersection(*mapped) if mapped else frozenset()


def _from_canonical(moves: frozenset[Move], renaming: Names) -> frozenset[Move]:
    inverse = {new: old for old, new in renaming.items()}
    return frozenset(m.renamed(inverse) for m in moves)


@dataclass(slots=True)
class _Node:
    run: PathRun
    sleep: frozenset[Move]
    """In canonical names."""


def explore(
    scope: Scope,
    variant: Variant = CORRECT,
    *,
    symmetry: bool = True,
    por: bool = True,
    liveness: bool = True,
    fork: bool = False,
    on_level: Callable[[int, int, int], None] | None = None,
) -> Exploration:
    """Breadth-first search of every schedule of `scope` (see the module docstring)."""
    started = time.perf_counter()
    result = Exploration(variant.name, scope, symmetry, por, liveness)
    root = run_path(variant, scope, (), symmetry=symmetry)
    assert isinstance(root, PathRun)
    result.replays += 1
    if root.violations:
        result.counterexample = _cex(root, liveness=False)
        result.duration_s = time.perf_counter() - started
        return result
    seen = {root.state}
    frontier = [_Node(root, frozenset())]
    result.states, result.levels = 1, [1]
    leaves: list[_Node] = []
    for level in range(scope.depth):
        nexts: dict[bytes, _Node] = {}
        for node in frontier:
            parent = node.run
            if not parent.enabled:
                leaves.append(node)
            asleep = _from_canonical(node.sleep, parent.renamings[0]) if por else frozenset()
            done: list[tuple[Move, Footprint]] = []
            branches = [(m, f) for m, f in parent.enabled if m not in asleep]
            for move, foot, child in _children(
                variant, scope, parent, branches, symmetry=symmetry, fork=fork
            ):
                result.replays += 1 if not fork else 0
                result.transitions += 1
                if child.violations:
                    result.counterexample = _cex(child, liveness=False)
                    result.depth = level + 1
                    result.duration_s = time.perf_counter() - started
                    return result
                if por:
                    sleep = frozenset(m for m, f in done if _independent(foot, f)) | frozenset(
                        m for m in asleep if _independent(foot, _foot(parent, m))
                    )
                    done.append((move, foot))
                    canon_sleep = _to_canonical(sleep, child.renamings)
                else:
                    canon_sleep = frozenset()
                if child.state in seen:
                    known = nexts.get(child.state)
                    if known is not None:
                        known.sleep &= canon_sleep
                    continue
                seen.add(child.state)
                nexts[child.state] = _Node(child, canon_sleep)
        result.levels.append(len(nexts))
        result.states += len(nexts)
        if on_level is not None:
            on_level(level + 1, len(nexts), result.transitions)
        if not nexts:
            result.exhausted = True
            result.depth = level
            break
        frontier = list(nexts.values())
        result.depth = level + 1
    else:
        leaves.extend(frontier)
    if liveness:
        for node in leaves:
            tail = run_path(variant, scope, node.run.moves, liveness=True)
            assert isinstance(tail, PathRun)
            result.tails += 1
            if tail.violations:
                result.counterexample = _cex(tail, liveness=True)
                break
    result.duration_s = time.perf_counter() - started
    return result


def _children(
    variant: Variant,
    scope: Scope,
    parent: PathRun,
    branches: list[tuple[Move, Footprint]],
    *,
    symmetry: bool,
    fork: bool,
) -> Iterator[tuple[Move, Footprint, PathRun]]:
    """Each branch's run: replayed from the start, or forked from one run of the parent."""
    if not branches:
        return
    if fork:
        runs = run_path(
            variant, scope, parent.moves, symmetry=symmetry, branches=[m for m, _ in branches]
        )
        assert isinstance(runs, list), "a state on the frontier had no violation"
        for (move, foot), child in zip(branches, runs, strict=True):
            yield move, foot, child
        return
    for move, foot in branches:
        one = run_path(variant, scope, (*parent.moves, move), symmetry=symmetry)
        assert isinstance(one, PathRun)
        yield move, foot, one


def _foot(parent: PathRun, move: Move) -> Footprint:
    for known, foot in parent.enabled:
        if known == move:
            return foot
    return frozenset(), frozenset({"*"})


def _cex(run: PathRun, *, liveness: bool) -> Counterexample:
    first = run.violations[0]
    return Counterexample(tuple(m.label for m in run.moves), first, tuple(run.trace), liveness)


def replay(
    scope: Scope, variant: Variant, labels: Sequence[str], *, liveness: bool = False
) -> PathRun:
    """Run one path given as move labels (the `--replay` of a counterexample); ValueError
    names a label that is not a move or not possible at its step."""
    moves = [parse(label) for label in labels]
    for index in range(len(moves)):
        prefix = run_path(variant, scope, moves[:index], symmetry=False)
        assert isinstance(prefix, PathRun)
        if prefix.violations:
            return prefix
        if moves[index] not in {m for m, _ in prefix.enabled}:
            raise ValueError(
                f"step {index + 1}, {moves[index].label!r}, is not possible there; the moves "
                f"possible are: {', '.join(m.label for m, _ in prefix.enabled)}"
            )
    final = run_path(variant, scope, moves, symmetry=False, liveness=liveness)
    assert isinstance(final, PathRun)
    return final


def is_safety(violation: Violation) -> bool:
    """True for the kinds that mean data could be lost."""
    return violation.kind in SAFETY
