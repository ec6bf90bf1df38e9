"""`gcd simulate --exhaustive`: every schedule of a small cluster (see `l0lab.sim.explore`).

Design notes: docs/internals/cli.md, `gcd.cli.exhaustive`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gcd.cli import lab
from gcd.cli.output import write_json
from l0gc import exitcodes

if TYPE_CHECKING:
    from l0lab.sim.checks import Violation
    from l0lab.sim.explore import Exploration
    from l0lab.sim.moves import Scope
    from l0lab.sim.smallmodel import ModelExploration
    from l0lab.sim.suite import Stage
    from l0lab.sim.variants import Variant

__all__ = ["add_arguments", "run"]

_RANDOM_ONLY = ("seeds", "seed", "keep_going", "stop_at_first", "reconciler_bug")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--exhaustive` options of `gcd simulate`."""
    with lab.required():
        from l0lab.sim.moves import BUG_KINDS, FAULT_KINDS, Scope  # noqa: PLC0415 - the lab

    default = Scope()
    group = parser.add_argument_group("exhaustive search (--exhaustive)")
    group.add_argument(
        "--exhaustive",
        action="store_true",
        help="explore every schedule of a bounded scope breadth-first instead of random "
        "seeds; a violation comes with its shortest counterexample. With none of the "
        "scope flags below, the suite: the scope of every documented bug in turn, "
        "then the general one (docs/reliability.md); any scope flag searches that one "
        "scope",
    )
    for flag, value, what in (
        ("--partitions", default.partitions, "partitions (1-3)"),
        ("--writers", default.writers, "writers (1-3)"),
        ("--publishers", default.publishers, "publisher processes (1-3)"),
        ("--max-epoch", default.max_epoch, "highest cluster epoch (2-6; it starts at 1)"),
        ("--max-faults", default.faults, "faults on one path (0-4)"),
        ("--depth", default.depth, "moves on one path (1-60)"),
    ):
        group.add_argument(
            flag, type=int, default=None, metavar="N", help=f"{what} (default {value})"
        )
    group.add_argument(
        "--fault-kinds",
        default=None,
        metavar="K,K",
        help="which faults to inject, comma-separated (default all: "
        f"{','.join(sorted(FAULT_KINDS))}; only when named: "
        f"{','.join(sorted(BUG_KINDS))}, a reconciler reporting its log's end lifted "
        "while it lifted less)",
    )
    group.add_argument(
        "--no-symmetry",
        action="store_true",
        help="do not merge states that differ only by renaming writers, partitions or "
        "publishers (slower; for testing the reduction)",
    )
    group.add_argument(
        "--no-por",
        action="store_true",
        help="no partial-order reduction (sleep sets): explore every order of independent "
        "moves (slower; for testing the reduction)",
    )
    group.add_argument(
        "--no-liveness",
        action="store_true",
        help="skip the quiescent tail (liveness) from the last level's states",
    )
    group.add_argument(
        "--fork",
        action="store_true",
        help="reach each state once and fork it per move instead of replaying the path "
        "(Linux; faster for deep scopes)",
    )
    group.add_argument(
        "--model",
        default=None,
        choices=("registration", "undo"),
        help="search one operator model alone instead of the cluster: registration "
        "(register racing deregister) or undo (the undo window and gcd restore); "
        "the suite runs both first",
    )
    group.add_argument(
        "--replay",
        default=None,
        metavar="'MOVE; MOVE'",
        help="run one path of moves (a counterexample's) and print its trace",
    )


def run(args: argparse.Namespace) -> int:
    """Search (or replay one path); exit 1 on a violation."""
    with lab.required():
        from l0lab.sim.explore import explore  # noqa: PLC0415 - the lab, when run
        from l0lab.sim.moves import Scope  # noqa: PLC0415
        from l0lab.sim.variants import VARIANTS  # noqa: PLC0415

    used = [
        f"--{name.replace('_', '-')}"
        for name in _RANDOM_ONLY
        if getattr(args, name) not in (None, False)
    ]
    if used:
        sys.stderr.write(
            f"gcd simulate: {', '.join(used)} belong to random seeds and do "
            "nothing with --exhaustive; drop them\n"
        )
        return exitcodes.USAGE
    try:
        scope = _scope(args, Scope)
    except ValueError as exc:
        sys.stderr.write(f"gcd simulate: {exc}\n")
        return exitcodes.USAGE
    variant = VARIANTS[args.variant]
    if args.model is not None:
        if scope is not None:
            sys.stderr.write(
                "gcd simulate: the scope flags shape the cluster search; drop "
                "them or drop --model\n"
            )
            return exitcodes.USAGE
        return _model(args, variant)
    if args.replay is not None:
        return _replay(scope or Scope(), args)
    progress = None if args.json else _progress
    options = {
        "symmetry": not args.no_symmetry,
        "por": not args.no_por,
        "liveness": not args.no_liveness,
        "fork": args.fork,
        "on_level": progress,
    }
    if scope is None:
        return _suite(args, variant, options)
    result = explore(scope, variant, **options)
    if args.json:
        write_json(result.to_dict())
        return exitcodes.OK if result.ok else exitcodes.PARTIAL_FAILURE
    _report(result)
    return exitcodes.OK if result.ok else exitcodes.PARTIAL_FAILURE


_SCOPE_FLAGS = (
    "partitions",
    "writers",
    "publishers",
    "max_epoch",
    "max_faults",
    "depth",
    "fault_kinds",
)


def _scope(args: argparse.Namespace, scope_class: type[Scope]) -> Scope | None:
    """The one scope the flags give, None for none (the suite); ValueError names a bad one."""
    if all(getattr(args, name) is None for name in _SCOPE_FLAGS):
        return None
    default = scope_class()
    kinds = (
        default.fault_kinds
        if args.fault_kinds is None
        else frozenset(k.strip() for k in args.fault_kinds.split(",") if k.strip())
    )

    def given(name: str, value: int) -> int:
        return value if getattr(args, name) is None else int(getattr(args, name))

    return scope_class(
        partitions=given("partitions", default.partitions),
        writers=given("writers", default.writers),
        publishers=given("publishers", default.publishers),
        max_epoch=given("max_epoch", default.max_epoch),
        faults=given("max_faults", default.faults),
        depth=given("depth", default.depth),
        fault_kinds=kinds,
    )


def _suite(args: argparse.Namespace, variant: Variant, options: dict[str, Any]) -> int:
    """Every stage of `l0lab.sim.suite.SUITE` in turn, up to the first violation."""
    with lab.required():
        from l0lab.sim.suite import explore_suite  # noqa: PLC0415 - the lab, when run

    def announce(stage: Stage) -> None:
        if not args.json:
            sys.stderr.write(f"stage {stage.name}: {stage.flags()}\n")

    done = explore_suite(variant, on_stage=announce, **options)
    ok = all(result.ok for _, result in done)
    if args.json:
        write_json(
            {
                "version": 1,
                "mode": "exhaustive-suite",
                "variant": variant.name,
                "violations": 0 if ok else 1,
                "states": sum(result.states for _, result in done),
                "transitions": sum(result.transitions for _, result in done),
                "duration_s": round(sum(r.duration_s for _, r in done), 3),
                "stages": [{"stage": stage.name, **result.to_dict()} for stage, result in done],
            }
        )
    else:
        for stage, result in done:
            sys.stdout.write(f"stage {stage.name}: ")
            _report(result)
    return exitcodes.OK if ok else exitcodes.PARTIAL_FAILURE


def _model(args: argparse.Namespace, variant: Variant) -> int:
    """`--model M`: search that operator model alone, or replay one of its paths."""
    with lab.required():
        from l0lab.sim.smallmodel import explore_model, replay_model  # noqa: PLC0415
        from l0lab.sim.suite import MODELS  # noqa: PLC0415

    model = MODELS[args.model]
    if args.replay is not None:
        labels = [label.strip() for label in args.replay.split(";") if label.strip()]
        try:
            run_ = replay_model(model, variant, labels)
        except ValueError as exc:
            sys.stderr.write(f"gcd simulate: --replay: {exc}\n")
            return exitcodes.USAGE
        return _replayed(args, labels, run_.violations, run_.trace)
    result = explore_model(model, variant, on_level=None if args.json else _progress)
    if args.json:
        write_json(result.to_dict())
    else:
        _report(result)
    return exitcodes.OK if result.ok else exitcodes.PARTIAL_FAILURE


def _report(result: Exploration | ModelExploration) -> None:
    doc = result.to_dict()
    sys.stdout.write(
        f"explored {doc['states']} states, {doc['transitions']} transitions, depth "
        f"{doc['depth']}{' (every state reached)' if result.exhausted else ''} of "
        f"{result.variant!r} in {doc['duration_s']} s; liveness tails "
        f"{doc['liveness_tails']}: {'no violation' if result.ok else '1 violation'}\n"
    )
    cex = result.counterexample
    if cex is not None:
        sys.stdout.write(
            f"{cex.violation.kind.value} after {len(cex.moves)} moves"
            f"{' and the quiescent tail' if cex.liveness else ''}: {cex.violation.detail}\n"
            f"  reproduce: {result.reproduce()}\n  events:\n"
            + "".join(f"    {line}\n" for line in cex.trace)
        )


def _progress(level: int, states: int, transitions: int) -> None:
    sys.stderr.write(f"depth {level}: {states} new states ({transitions} transitions)\n")


def _replay(scope: Scope, args: argparse.Namespace) -> int:
    with lab.required():
        from l0lab.sim.explore import replay  # noqa: PLC0415 - the lab, when run
        from l0lab.sim.variants import VARIANTS  # noqa: PLC0415

    labels = [label.strip() for label in args.replay.split(";") if label.strip()]
    try:
        run_ = replay(scope, VARIANTS[args.variant], labels, liveness=not args.no_liveness)
    except ValueError as exc:
        sys.stderr.write(f"gcd simulate: --replay: {exc}\n")
        return exitcodes.USAGE
    return _replayed(args, labels, run_.violations, run_.trace)


def _replayed(
    args: argparse.Namespace, labels: list[str], violations: list[Violation], trace: list[str]
) -> int:
    """Print a replayed path's violations and trace; exit 1 on a violation."""
    if args.json:
        write_json(
            {"moves": labels, "violations": [v.to_dict() for v in violations], "trace": trace}
        )
    else:
        for violation in violations[:4]:
            sys.stdout.write(
                f"{violation.kind.value} at move {violation.step}: {violation.detail}\n"
            )
        sys.stdout.write("  events:\n" + "".join(f"    {line}\n" for line in trace))
        if not violations:
            sys.stdout.write(f"replayed {len(labels)} moves: no violation\n")
    return exitcodes.OK if not violations else exitcodes.PARTIAL_FAILURE
