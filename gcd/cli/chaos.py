"""`gcd chaos`: the whole system as real processes on this machine, under a nemesis, checked.

Design notes: docs/internals/cli.md, `gcd.cli.chaos`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from gcd.cli import lab
from gcd.cli.output import write_json
from l0gc import exitcodes
from l0gc.logs import LEVEL_NAMES, configure_logging
from l0gc.options import duration, integer
from l0gc.process.signals import StopOnSignals

if TYPE_CHECKING:
    from l0lab.chaos.config import ChaosConfig

__all__ = ["add_arguments", "run"]

_log = structlog.get_logger("gcd.chaos")


def _typed(parse: Callable[[object], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None

    return convert


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
    run = parser.add_argument_group("run")
    run.add_argument(
        "--duration",
        type=_typed(duration),
        default=60.0,
        metavar="DURATION",
        help="how long the nemesis injects faults, e.g. 60s or 30m (default 60s)",
    )
    run.add_argument(
        "--seed",
        type=_typed(integer(0)),
        default=None,
        metavar="N",
        help="seed of the fault schedule and the workload (default: random, "
        "printed so the run can be replayed)",
    )
    run.add_argument(
        "--faults",
        default="all",
        metavar="KIND,...",
        help=f"fault kinds to inject, comma-separated: {kinds}; or groups: {groups} (default all)",
    )
    run.add_argument(
        "--publisher-replicas",
        type=_typed(integer(0)),
        default=0,
        metavar="N",
        help="run the publishers as one `watermark serve --replicated` set of N "
        "(2-5) replicas sharing the partitions (default 0: two publishers on "
        "disjoint partitions)",
    )
    run.add_argument(
        "--write-rate",
        type=_typed(integer(1)),
        default=16,
        metavar="N",
        help="objects written per second over all partitions (default 16)",
    )
    run.add_argument(
        "--keep-going",
        action="store_true",
        help="inject faults for the whole duration even after a live object "
        "was lost (default: the faulty phase ends at the first loss)",
    )
    run.add_argument(
        "--broken-build",
        choices=sorted(BROKEN_BUILDS),
        default=None,
        help="TESTING ONLY: run the publishers with a deliberately broken part, "
        "which the checker must catch",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json", action="store_true", help="print the report as one JSON document on stdout"
    )
    out.add_argument(
        "--run-dir",
        metavar="DIR",
        default=None,
        help="directory for the run's data and logs (default: a fresh temporary "
        "directory, removed after a passing run)",
    )
    out.add_argument(
        "--keep-run-dir",
        action="store_true",
        help="keep the run directory even when the run passes",
    )
    out.add_argument(
        "--log-level",
        choices=LEVEL_NAMES,
        default=None,
        help="level of the harness's logs on stderr (default warning, or error "
        "on a terminal, where the live view shows the state)",
    )


async def _main(config: ChaosConfig, tty: bool) -> object:
    """Run; the first SIGINT/SIGTERM ends the faulty phase, a second aborts."""
    with lab.required():
        from l0lab.chaos.runner import ChaosRun  # noqa: PLC0415 - the harness, only when run

    stop = asyncio.Event()
    task = asyncio.current_task()
    assert task is not None

    def stopping(signum: signal.Signals) -> None:
        _log.warning(
            "chaos.stopping",
            signal=signum.name,
            detail="healing, quiescing and checking; signal again to abort",
        )

    def abort(_signum: signal.Signals) -> bool:
        task.cancel()
        return True

    with StopOnSignals(stop, on_signal=stopping, again=abort).installed():
        return await ChaosRun(config, stream=sys.stderr, tty=tty).run(stop)


def run(args: argparse.Namespace) -> int:
    """Parse, run, report."""
    with lab.required():
        from l0lab.chaos.config import ChaosConfig, parse_faults  # noqa: PLC0415 - the lab
        from l0lab.chaos.report import ChaosReport, exit_code, text_report  # noqa: PLC0415

    tty = sys.stderr.isatty()
    configure_logging(args.log_level or ("error" if tty else "warning"))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
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
    if args.json:
        write_json(report.to_dict())
    else:
        sys.stdout.write(text_report(report))
    return exit_code(report)
