"""`gcd simulate --exhaustive`: every schedule of a small cluster (see `l0lab.sim.explore`).

    gcd simulate --exhaustive                                  # the default scope, real code
    gcd simulate --exhaustive --variant no-drain-slide --partitions 1 --max-faults 0
    gcd simulate --exhaustive --replay 'tick; raise p0; write w0 p0 1' --variant inclusive-floor

The search prints the distinct states per depth as it goes, then the totals, and on a
violation its shortest counterexample as the same readable trace the random simulation
prints, with the `--replay` command that runs it again. Exit 1 on a violation.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gcd.cli import lab
from gcd.cli.output import write_json
from watermark import exitcodes

if TYPE_CHECKING:
    from l0lab.sim.moves import Scope

__all__ = ["add_arguments", "run"]

_RANDOM_ONLY = ("seeds", "seed", "keep_going", "stop_at_first")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--exhaustive` options of `gcd simulate`."""
    with lab.required():
        from l0lab.sim.moves import FAULT_KINDS, Scope  # noqa: PLC0415 - the lab, when run

    default = Scope()
    group = parser.add_argument_group("exhaustive search (--exhaustive)")
    group.add_argument(
        "--exhaustive", action="store_true",
        help="explore every schedule of a bounded scope breadth-first instead of random "
             "seeds; a violation comes with its shortest counterexample",
    )  # fmt: skip
    for flag, value, what in (
        ("--partitions", default.partitions, "partitions (1-3)"),
        ("--writers", default.writers, "writers (1-3)"),
        ("--publishers", default.publishers, "publisher processes (1-3)"),
        ("--max-epoch", default.max_epoch, "highest cluster epoch (2-6; it starts at 1)"),
        ("--max-faults", default.faults, "faults on one path (0-4)"),
        ("--depth", default.depth, "moves on one path (1-60)"),
    ):
        group.add_argument(flag, type=int, default=value, metavar="N",
                           help=f"{what} (default {value})")  # fmt: skip
    group.add_argument(
        "--fault-kinds", default=",".join(sorted(FAULT_KINDS)), metavar="K,K",
        help="which faults to inject, comma-separated (default all: %(default)s)",
    )  # fmt: skip
    group.add_argument(
        "--no-symmetry", action="store_true",
        help="do not merge states that differ only by renaming writers, partitions or "
             "publishers (slower; for testing the reduction)",
    )  # fmt: skip
    group.add_argument(
        "--no-por", action="store_true",
        help="no partial-order reduction (sleep sets): explore every order of independent "
             "moves (slower; for testing the reduction)",
    )  # fmt: skip
    group.add_argument(
        "--no-liveness", action="store_true",
        help="skip the quiescent tail (liveness) from the last level's states",
    )  # fmt: skip
    group.add_argument(
        "--fork", action="store_true",
        help="reach each state once and fork it per move instead of replaying the path "
             "(Linux; faster for deep scopes)",
    )  # fmt: skip
    group.add_argument(
        "--replay", default=None, metavar="'MOVE; MOVE'",
        help="run one path of moves (a counterexample's) and print its trace",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Search (or replay one path); exit 1 on a violation."""
    with lab.required():
        from l0lab.sim.explore import explore  # noqa: PLC0415 - the lab, when run
        from l0lab.sim.moves import Scope  # noqa: PLC0415
        from l0lab.sim.variants import VARIANTS  # noqa: PLC0415

    used = [f"--{name.replace('_', '-')}" for name in _RANDOM_ONLY
            if getattr(args, name) not in (None, False)]  # fmt: skip
    if used:
        sys.stderr.write(f"gcd simulate: {', '.join(used)} belong to random seeds and do "
                         "nothing with --exhaustive; drop them\n")  # fmt: skip
        return exitcodes.USAGE
    try:
        kinds = frozenset(k.strip() for k in args.fault_kinds.split(",") if k.strip())
        scope = Scope(partitions=args.partitions, writers=args.writers,
                      publishers=args.publishers, max_epoch=args.max_epoch,
                      faults=args.max_faults, depth=args.depth, fault_kinds=kinds)  # fmt: skip
    except ValueError as exc:
        sys.stderr.write(f"gcd simulate: {exc}\n")
        return exitcodes.USAGE
    variant = VARIANTS[args.variant]
    if args.replay is not None:
        return _replay(scope, args)
    progress = None if args.json else _progress
    result = explore(scope, variant, symmetry=not args.no_symmetry, por=not args.no_por,
                     liveness=not args.no_liveness, fork=args.fork,
                     on_level=progress)  # fmt: skip
    if args.json:
        write_json(result.to_dict())
        return exitcodes.OK if result.ok else exitcodes.PARTIAL_FAILURE
    doc = result.to_dict()
    sys.stdout.write(
        f"explored {doc['states']} states, {doc['transitions']} transitions, depth "
        f"{doc['depth']}{' (every state reached)' if result.exhausted else ''} of "
        f"{variant.name!r} in {doc['duration_s']} s; liveness tails {doc['liveness_tails']}: "
        f"{'no violation' if result.ok else '1 violation'}\n"
    )
    cex = result.counterexample
    if cex is not None:
        sys.stdout.write(
            f"{cex.violation.kind.value} after {len(cex.moves)} moves"
            f"{' and the quiescent tail' if cex.liveness else ''}: {cex.violation.detail}\n"
            f"  reproduce: {result.reproduce()}\n  events:\n"
            + "".join(f"    {line}\n" for line in cex.trace)
        )
    return exitcodes.OK if result.ok else exitcodes.PARTIAL_FAILURE


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
    if args.json:
        write_json({"moves": labels, "violations": [v.to_dict() for v in run_.violations],
                    "trace": run_.trace})  # fmt: skip
    else:
        for violation in run_.violations[:4]:
            sys.stdout.write(f"{violation.kind.value} at move {violation.step}: "
                             f"{violation.detail}\n")  # fmt: skip
        sys.stdout.write("  events:\n" + "".join(f"    {line}\n" for line in run_.trace))
        if not run_.violations:
            sys.stdout.write(f"replayed {len(labels)} moves: no violation\n")
    return exitcodes.OK if not run_.violations else exitcodes.PARTIAL_FAILURE
