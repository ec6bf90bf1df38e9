"""`gcd chaos`: the whole system as real processes on this machine, under a nemesis, checked.

Design notes: docs/internals/cli.md, `gcd.cli.chaos`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gcd.cli import lab, labrun
from l0gc import exitcodes
from l0gc.options import Option, boolean, duration, integer

if TYPE_CHECKING:
    from l0lab.chaos.config import ChaosConfig

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd chaos` options (flags only)."""
    with lab.required():
        from l0lab.chaos.config import (  # noqa: PLC0415 - the lab, when run
            BROKEN_BUILDS,
            FAULT_GROUPS,
            FaultKind,
        )

    kinds = ", ".join(kind.value for kind in FaultKind)
    groups = ", ".join(FAULT_GROUPS)
    run_flags = (
        Option(
            "--duration",
            duration,
            60.0,
            "how long the nemesis injects faults, e.g. 60s or 30m (default 60s)",
            "DURATION",
        ),
        Option(
            "--seed",
            integer(0),
            None,
            "seed of the fault schedule and the workload (default: random, "
            "printed so the run can be replayed)",
            "N",
        ),
        Option(
            "--faults",
            str,
            "all",
            f"fault kinds to inject, comma-separated: {kinds}; or groups: {groups} (default all)",
            "KIND,...",
        ),
        Option(
            "--publisher-replicas",
            integer(0),
            0,
            "run the publishers as one `watermark serve --replicated` set of N "
            "(2-5) replicas sharing the partitions (default 0: two publishers on "
            "disjoint partitions)",
            "N",
        ),
        Option(
            "--write-rate",
            integer(1),
            16,
            "objects written per second over all partitions (default 16)",
            "N",
        ),
        Option(
            "--keep-going",
            boolean,
            False,
            "inject faults for the whole duration even after a live object "
            "was lost (default: the faulty phase ends at the first loss)",
            switch=True,
        ),
        Option(
            "--broken-build",
            str,
            None,
            "TESTING ONLY: run the publishers with a deliberately broken part, "
            "which the checker must catch",
            values=tuple(sorted(BROKEN_BUILDS)),
        ),
    )
    output_flags = (
        Option(
            "--json", boolean, False, "print the report as one JSON document on stdout", switch=True
        ),
        Option(
            "--run-dir",
            str,
            None,
            "directory for the run's data and logs (default: a fresh temporary "
            "directory, removed after a passing run)",
            "DIR",
        ),
        Option(
            "--keep-run-dir",
            boolean,
            False,
            "keep the run directory even when the run passes",
            switch=True,
        ),
        labrun.log_level_flag("the harness's logs"),
    )
    labrun.add_flags(parser, "run", run_flags)
    labrun.add_flags(parser, "output", output_flags)


async def _main(config: ChaosConfig, tty: bool) -> object:
    """Run; the first SIGINT/SIGTERM ends the faulty phase, a second aborts."""
    with lab.required():
        from l0lab.chaos.runner import ChaosRun  # noqa: PLC0415 - the harness, only when run

    return await labrun.until_stopped(
        lambda stop: ChaosRun(config, stream=sys.stderr, tty=tty).run(stop),
        "chaos",
        "healing, quiescing and checking; signal again to abort",
    )


def run(args: argparse.Namespace) -> int:
    """Parse, run, report."""
    with lab.required():
        from l0lab.chaos.config import ChaosConfig, parse_faults  # noqa: PLC0415 - the lab
        from l0lab.chaos.report import ChaosReport, exit_code, text_report  # noqa: PLC0415

    tty = labrun.configure_logging(args, werkzeug=logging.ERROR)
    seed = labrun.seed(args)
    config = ChaosConfig(
        duration_s=args.duration,
        seed=seed,
        faults=parse_faults(args.faults, replicated=args.publisher_replicas > 0),
        publisher_replicas=args.publisher_replicas,
        broken_build=args.broken_build,
        run_dir=None if args.run_dir is None else Path(args.run_dir),
        keep_run_dir=args.keep_run_dir,
        stop_at_first_loss=not args.keep_going,
        write_rate=float(args.write_rate),
    )
    sys.stderr.write(f"gcd chaos: seed {seed} (replay with --seed {seed})\n")
    try:
        report = asyncio.run(_main(config, tty))
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.stderr.write("gcd chaos: aborted; the processes it started are stopped\n")
        return exitcodes.INTERRUPTED
    assert isinstance(report, ChaosReport)
    return labrun.write_report(args, report, text_report, exit_code)
