"""`gcd daemon`: sweeper rounds forever, with /metrics, /healthz and /readyz.

    gcd daemon --bucket B --etcd HOST:PORT --namespace /l0gc/prod [--shard-index I
               --shard-count N] [--interval 10s --idle-interval 60s ...]

Takes every `gcd sweep` option except the output ones, plus the pacing and HTTP
options. SIGTERM (or Ctrl-C) lets requests in flight finish and exits 0.
"""

from __future__ import annotations

import argparse

from gcd.brake import brake_for
from gcd.cli.options import DAEMON_OPTIONS, add_options, resolve
from gcd.cli.output import configure_logging
from gcd.cli.sweep import COMMON_OPTIONS, add_round_arguments, round_setup, watermark_source
from gcd.daemon import Daemon, DaemonConfig, serve
from gcd.metrics import SweeperMetrics
from gcd.s3store import S3ObjectStore
from gcd.sweeper import Sweeper

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd daemon` options."""
    add_round_arguments(parser)
    add_options(parser, DAEMON_OPTIONS, "daemon")


async def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM; 0 on a clean stop."""
    resolve(args, (*COMMON_OPTIONS, *DAEMON_OPTIONS))
    configure_logging(args.log_level)
    setup = round_setup(args)
    config = DaemonConfig(
        interval_s=args.interval,
        idle_interval_s=args.idle_interval,
        max_interval_s=args.max_interval,
        full_pass_interval_s=args.full_pass_interval,
        unready_after_s=args.unready_after,
    )
    async with S3ObjectStore.open(setup.s3) as store, watermark_source(
        setup.etcd, target=setup.target, objects=store, shard=setup.shard
    ) as source:
        sweeper = Sweeper(store, setup.round, metrics=SweeperMetrics(), brake=brake_for(source))
        daemon = Daemon(sweeper, source, config, override=setup.safe_epoch_override)
        return await serve(daemon, args.http_host, args.http_port)
