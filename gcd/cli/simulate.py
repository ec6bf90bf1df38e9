"""`gcd simulate`: the deterministic whole-system simulation (see `l0lab.sim`).

Design notes: docs/internals/cli.md, `gcd.cli.simulate`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gcd.cli import exhaustive, lab
from gcd.cli.output import write_json
from l0gc import exitcodes

if TYPE_CHECKING:
    from l0lab.sim.runner import SeedResult

__all__ = ["add_arguments", "run"]

_DEFAULT_SEEDS = 100
_FULL_TRACE = 1_000_000  # a replayed seed prints all its events


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd simulate` options."""
    with lab.required():
        from l0lab.sim.variants import VARIANTS  # noqa: PLC0415 - the lab, when run
        from l0lab.sim.world import DEFAULT_STEPS  # noqa: PLC0415

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    width = max(len(name) for name in VARIANTS)
    parser.epilog = "variants:\n" + "\n".join(
        f"  {name:<{width}}  {variant.summary}" for name, variant in VARIANTS.items()
    )
    parser.add_argument(
        "--seeds",
        type=_count,
        default=None,
        metavar="N",
        help=f"how many seeds to run (default {_DEFAULT_SEEDS}, or 1 with --seed)",
    )
    parser.add_argument(
        "--seed",
        type=_count,
        default=None,
        metavar="S",
        help="first seed (default 0); with --seeds 1 it replays exactly that seed",
    )
    parser.add_argument(
        "--steps",
        type=_count,
        default=DEFAULT_STEPS,
        metavar="M",
        help=f"steps of the faulty phase per seed, before the quiescent tail "
        f"(default {DEFAULT_STEPS}, as in CI)",
    )
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        default="correct",
        help="which code to run: 'correct' is the real code, the others are deliberately "
        "broken to show that the checks catch them (default correct)",
    )
    parser.add_argument(
        "--reconciler-bug",
        action="store_true",
        help="reconcilers sometimes report their log's end lifted while they lifted less, "
        "naming only what they lifted (issue 54): the sweepers' references must keep the "
        "objects M then covers (on with a variant that needs it, e.g. no-cross-check; "
        "with --exhaustive: --fault-kinds overreport)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="do not stop a seed at its first violation (report every one it hits)",
    )
    parser.add_argument(
        "--stop-at-first",
        action="store_true",
        help="stop after the first failing seed",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON report ({"version", "seeds", "steps", "violations", '
        '"duration_s", "seeds_per_s", ...}; with --exhaustive {"states", '
        '"transitions", "depth", "violations", "counterexample", ...}, and with no '
        'scope flag {"mode": "exhaustive-suite", "violations", "stages": [...]}) '
        "instead of text",
    )
    exhaustive.add_arguments(parser)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def run(args: argparse.Namespace) -> int:
    """Run the seeds (or the exhaustive search); exit 1 if any broke an invariant."""
    if args.exhaustive:
        return exhaustive.run(args)
    with lab.required():
        from l0lab.sim.runner import run_seeds  # noqa: PLC0415 - the lab, when run
        from l0lab.sim.variants import VARIANTS  # noqa: PLC0415

    first = 0 if args.seed is None else args.seed
    count = (
        args.seeds if args.seeds is not None else (1 if args.seed is not None else _DEFAULT_SEEDS)
    )
    if count == 0 or args.steps == 0:
        sys.stderr.write("gcd simulate: nothing to do: --seeds and --steps must be >= 1\n")
        return exitcodes.USAGE
    single = count == 1

    def show(result: SeedResult) -> None:
        if not args.json and (not result.ok or single):
            sys.stdout.write(result.describe(full=single) + "\n")

    variant = VARIANTS[args.variant]
    report = run_seeds(
        first,
        count,
        steps=args.steps,
        variant=variant,
        reconciler_bug=args.reconciler_bug or variant.reconciler_bug,
        stop_at_first=args.stop_at_first,
        on_result=show,
        stop_on_violation=not args.keep_going,
        trace_keep=_FULL_TRACE if single else 30,
    )
    if args.json:
        write_json(report.to_dict())
    else:
        summary = report.to_dict()
        sys.stdout.write(
            f"simulated {report.seeds} seeds x {report.steps} steps of {report.variant!r} in "
            f"{summary['duration_s']} s ({summary['seeds_per_s']} seeds/s): "
            f"{len(report.failed)} seeds broke an invariant\n"
        )
    return exitcodes.OK if report.ok else exitcodes.PARTIAL_FAILURE
