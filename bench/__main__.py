"""`python -m bench [--quick] [--only NAME] [--runs N] [--json-out FILE]`: run the benchmarks.

Prints each benchmark's report as Markdown on stdout as soon as it is done (progress
on stderr), then a summary of the goals. `--json-out` also writes every report, with
each individual run, as JSON. Exit status 0 even when goals are missed: benchmarks
measure, they do not gate.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import BENCHMARKS
from bench.common import Report, Scale, machine

_DEFAULT_RUNS = {"list_cost": 1, "spark": 3}
"""Benchmarks whose default run count differs from 5 (deterministic; minutes per run)."""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (minutes instead of tens of minutes)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="runs per side (default 5; list_cost 1, spark 3)"
    )
    parser.add_argument("--json-out", type=Path, default=None, help="write the reports here")
    parser.add_argument("--toy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen benchmarks in order and print their reports."""
    args = _parse(argv)
    scale = Scale.TOY if args.toy else Scale.QUICK if args.quick else Scale.FULL
    names = [name for name in BENCHMARKS if not args.only or name in args.only]
    about = machine()
    sys.stdout.write(
        "## l0gc benchmarks\n\n"
        + ", ".join(f"{k}: {v}" for k, v in about.items())
        + f"\n\ncommand: python -m bench {' '.join(argv or sys.argv[1:])}\n\n"
    )
    reports: list[Report] = []
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        runs = args.runs if args.runs is not None else _DEFAULT_RUNS.get(name, 5)
        sys.stderr.write(f"bench: {name} ({scale.value}, {runs} runs)...\n")
        started = time.perf_counter()
        report: Report = module.run(scale, runs)
        elapsed = time.perf_counter() - started
        report.notes.append(f"This benchmark took {elapsed:.0f} s.")
        reports.append(report)
        sys.stdout.write(report.to_markdown() + "\n")
        sys.stdout.flush()
    sys.stdout.write(
        "### Goals\n\n| benchmark | goal | measured | target | met |\n|---|---|---|---|---|\n"
    )
    for report in reports:
        for goal in report.goals:
            sys.stdout.write(
                f"| {report.name} | {goal.description} | {goal.measured} | "
                f"{goal.target} | {'met' if goal.met else 'MISSED'} |\n"
            )
    if args.json_out is not None:
        document = {"machine": about, "reports": [r.to_dict() for r in reports]}
        args.json_out.parent.mkdir(parents=True, exist_ok=True)  # e.g. bench/out/ (ignored)
        args.json_out.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
