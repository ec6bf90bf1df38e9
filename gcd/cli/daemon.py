"""`gcd daemon`: sweeper rounds forever, with /metrics, /healthz, /readyz and /v1/explain.

Design notes: docs/internals/cli.md, `gcd.cli.daemon`.
"""

from __future__ import annotations

import argparse
import sys

import structlog

from gcd.cli.main import freeze_opened, load_frozen
from gcd.cli.options import DAEMON_OPTIONS, resolve
from gcd.cli.sweep import COMMON_OPTIONS, add_round_arguments, round_setup, runtime_modules
from l0gc import exitcodes
from l0gc.logs import configure_logging
from l0gc.options import add_options
from l0gc.process.signals import StopOnSignals, interrupt_on_second_ctrl_c

__all__ = ["RUN_IMPORTS", "add_arguments", "run"]

log = structlog.get_logger("gcd.cli.daemon")

RUN_IMPORTS = ("gcd.service.daemon", "gcd.service.runtime", "gcd.sweep.sweeper", "l0gc.auth")
"""What `run` imports and `--help` does not (the daemon, its HTTP server, the sweep
runtime): `gcd.cli.main` imports them at start-up once the arguments are read."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd daemon` options."""
    add_round_arguments(parser)
    add_options(parser, DAEMON_OPTIONS, "daemon")


async def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM (exit 0) or Ctrl-C (exit 130), both clean stops."""
    from gcd.service.daemon import DaemonConfig  # noqa: PLC0415 - RUN_IMPORTS
    from gcd.service.runtime import SweepRuntime  # noqa: PLC0415
    from l0gc.auth import TokenFile  # noqa: PLC0415

    resolve(args, (*COMMON_OPTIONS, *DAEMON_OPTIONS))
    configure_logging(args.log_level)
    setup = round_setup(args)
    # Its HTTP server's routes too (`SweepRuntime.serve`).
    load_frozen(*runtime_modules(setup), "gcd.explainer.http", "gcd.rules.mplot")
    config = DaemonConfig(
        interval_s=args.interval,
        idle_interval_s=args.idle_interval,
        max_interval_s=args.max_interval,
        full_pass_interval_s=args.full_pass_interval,
        unready_after_s=args.unready_after,
        stale_after_s=args.stale_after,
        # Without the watch every look is a full read of the namespace: look once per
        # --interval then, not every 2 s.
        follow_poll_s=2.0 if args.verify_m_every else max(2.0, args.interval),
    )
    tokens = None if args.auth_token_file is None else TokenFile(args.auth_token_file)
    # A check at most once per --verify-m-every rounds' --interval (the looks count as
    # reads): even a keys-only check costs etcd a scan of the namespace.
    async with SweepRuntime.open(
        setup,
        follow_every=args.verify_m_every,
        check_interval_s=args.verify_m_every * args.interval,
        preflight=True,
    ) as runtime:
        freeze_opened()
        daemon = runtime.daemon(config)
        signals = StopOnSignals(
            runtime.sweeper.stop,
            again=interrupt_on_second_ctrl_c,
            on_signal=lambda n: log.info("daemon.stopping", signal=n.name),
        )
        with signals.installed():
            await runtime.serve(daemon, args.http_host, args.http_port, tokens=tokens)
    if signals.first == "SIGINT":
        sys.stderr.write(
            "gcd daemon: interrupted (Ctrl-C): stopped cleanly after the requests "
            "in flight (SIGTERM is the normal stop, exit 0)\n"
        )
        return exitcodes.INTERRUPTED
    return exitcodes.OK
