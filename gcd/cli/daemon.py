"""`gcd daemon`: sweeper rounds forever, with /metrics, /healthz, /readyz and /v1/explain.

    gcd daemon --bucket B --etcd HOST:PORT --namespace /l0gc/prod [--shard-index I
               --shard-count N] [--interval 10s --idle-interval 60s ...]

Takes every `gcd sweep` option except the output ones, plus the pacing and HTTP options.
Rounds follow M: between rounds the daemon looks at etcd every 2 s (its gauges and
/readyz follow), and starts a round once M advanced, at most one per `--interval`
(`gcd.sweep.daemon.wake_reason`). At start, the same preflight as `gcd sweep`
(`gcd.storage.open.preflight_store`): a bucket it cannot list (no credentials, endpoint
unreachable, no such bucket, access denied, wrong region) exits 2 in seconds with one
line saying what to fix. Once running, losing S3 is an error of a round like any other:
logged, retried with backoff.

Stopping: SIGTERM, how Kubernetes stops a pod, lets requests in flight finish and exits
0. Ctrl-C (SIGINT) stops the same clean way but exits 130 with one line on stderr, as
every gcd command does when interrupted; a second Ctrl-C stops at once.

The daemon is assembled and run by `gcd.sweep.runtime.SweepRuntime` (one etcd client for
the whole process); this module parses the flags and handles the signals.
"""

from __future__ import annotations

import argparse
import sys

import structlog

from gcd.cli.options import DAEMON_OPTIONS, resolve
from gcd.cli.sweep import COMMON_OPTIONS, add_round_arguments, round_setup
from gcd.sweep.daemon import DaemonConfig
from gcd.sweep.runtime import SweepRuntime
from watermark import exitcodes
from watermark.api.auth import TokenFile
from watermark.logs import configure_logging
from watermark.options import add_options
from watermark.service.signals import StopOnSignals, interrupt_on_second_ctrl_c

__all__ = ["add_arguments", "run"]

log = structlog.get_logger("gcd.cli.daemon")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd daemon` options."""
    add_round_arguments(parser)
    add_options(parser, DAEMON_OPTIONS, "daemon")


async def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM (exit 0) or Ctrl-C (exit 130), both clean stops."""
    resolve(args, (*COMMON_OPTIONS, *DAEMON_OPTIONS))
    configure_logging(args.log_level)
    setup = round_setup(args)
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
