"""`gcd sweep`: one sweeper round, then exit.

    gcd sweep --bucket B [--etcd HOST:PORT --namespace /l0gc/prod | --safe-epoch N]
              [--dry-run --plan-out plan.jsonl] [--json] ...

Reads M from etcd (or takes `--safe-epoch`, still checked against the cluster epoch
when etcd is configured), lists the shard's prefixes and deletes what `decide` allows.
Shows a progress line on a TTY, structured logs otherwise; `--json` prints the round
summary on stdout. Exit: 0 ok, 1 some deletes failed, 2 usage/config error, 3 blocked
(undefined M, regression, M above the cluster epoch, paused unless --paused-ok, etcd
unreachable), 130
stopped by SIGTERM/Ctrl-C (requests in flight finish; the rest waits for the next run).

`add_round_arguments` and `round_setup` are shared with `gcd daemon`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gcd.binding import BoundSource, ClaimStore
from gcd.brake import brake_for
from gcd.cli import exitcodes
from gcd.cli.options import (
    LAYOUT_OPTIONS,
    ROUND_OPTIONS,
    S3_OPTIONS,
    SWEEP_OPTIONS,
    Option,
    add_config_option,
    add_options,
    layout_from_args,
    resolve,
)
from gcd.cli.output import ProgressLine, configure_logging, write_json
from gcd.errors import ConfigError
from gcd.report import PlanWriter, RoundSummary
from gcd.s3store import S3ObjectStore, S3Settings
from gcd.shards import announced, announcement, new_sweeper_id
from gcd.sweeper import RoundConfig, SafetyGate, Sweeper, WatermarkSource, run_round
from watermark.binding import StorageTarget
from watermark.etcd_config import EtcdSettings, add_etcd_arguments, open_kv
from watermark.store import WatermarkStore

__all__ = ["RoundSetup", "add_arguments", "add_round_arguments", "exit_code", "round_setup",
           "run", "watermark_source"]  # fmt: skip

COMMON_OPTIONS: tuple[Option, ...] = (*S3_OPTIONS, *LAYOUT_OPTIONS, *ROUND_OPTIONS)


def add_round_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every sweeping command takes: S3, layout, round, etcd, --config."""
    add_config_option(parser)
    add_options(parser, S3_OPTIONS, "object store (AWS credentials: the standard chain)")
    add_options(parser, LAYOUT_OPTIONS, "key layout")
    add_options(parser, ROUND_OPTIONS, "round")
    add_etcd_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd sweep` options."""
    add_round_arguments(parser)
    add_options(parser, SWEEP_OPTIONS, "dry run and output")


@dataclass(frozen=True, slots=True)
class RoundSetup:
    """Validated settings of a sweeping command."""

    round: RoundConfig
    s3: S3Settings
    etcd: EtcdSettings | None
    safe_epoch_override: int | None

    @property
    def target(self) -> StorageTarget:
        """The storage this command sweeps, as a namespace binding names it."""
        return StorageTarget(self.s3.bucket, self.round.layout.root, self.s3.endpoint_url)

    @property
    def shard(self) -> tuple[int, int] | None:
        """(index, count) to announce; None for a dry run, which deletes nothing."""
        if self.round.dry_run:
            return None
        return self.round.shard_index, self.round.shard_count


def round_setup(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RoundSetup:
    """Build and check the settings from resolved options; ConfigError says what is wrong."""
    env = os.environ if environ is None else environ
    if args.bucket is None:
        raise ConfigError("no bucket given: pass --bucket NAME or set L0GC_BUCKET")
    layout = layout_from_args(args)
    config = RoundConfig(
        layout=layout,
        grace_s=args.grace,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        list_concurrency=args.list_concurrency,
        max_deletes_per_second=args.max_deletes_per_second,
        max_deletes=args.max_deletes,
        shard_index=args.shard_index,
        shard_count=args.shard_count,
        dry_run=bool(getattr(args, "dry_run", False)),
        skip_ahead=not args.full_listing,
    )
    s3 = S3Settings(
        bucket=args.bucket,
        endpoint_url=args.endpoint_url,
        region=args.region,
        max_pool_connections=args.concurrency + args.list_concurrency + 4,
    )
    etcd_given = args.etcd is not None or bool(env.get("L0GC_ETCD"))
    # Without --safe-epoch, M comes from etcd: no endpoint at all is a usage error (exit 2),
    # not a silent wait on 127.0.0.1:2379.
    needs_etcd = etcd_given or args.safe_epoch is None
    etcd = EtcdSettings.from_args(args, env, required=True) if needs_etcd else None
    return RoundSetup(config, s3, etcd, args.safe_epoch)


@contextlib.asynccontextmanager
async def watermark_source(
    etcd: EtcdSettings | None,
    *,
    target: StorageTarget | None = None,
    objects: ClaimStore | None = None,
    shard: tuple[int, int] | None = None,
) -> AsyncIterator[WatermarkSource | None]:
    """M from etcd (connected lazily: an outage blocks rounds), or None without etcd.

    With `target` and `objects`, M is refused unless the namespace is bound to `target`
    (`gcd.binding`); with `shard` (index, count) this process also announces its shard
    while the block runs and refuses to delete when sweepers disagree (`gcd.shards`).
    """
    if etcd is None:
        yield None
        return
    kv = await open_kv(etcd, connect=False)
    try:
        store = WatermarkStore(kv, etcd.namespace)
        if target is None or objects is None:
            yield store
        elif shard is None:
            yield BoundSource(store, target, objects)
        else:
            me = announcement(new_sweeper_id(), *shard)
            async with announced(store, kv, me):
                yield BoundSource(store, target, objects, shard=me)
    finally:
        await kv.close()


def exit_code(summary: RoundSummary, *, paused_ok: bool = False) -> int:
    """0 ok, 1 some deletes failed, 3 blocked or paused (0 when paused with `paused_ok`)."""
    if paused_ok and summary.outcome == "paused":
        return exitcodes.OK
    if summary.blocked_reason is not None:
        return exitcodes.BLOCKED
    return exitcodes.PARTIAL_FAILURE if summary.errors else exitcodes.OK


async def run(args: argparse.Namespace) -> int:
    """One round; see the module docstring."""
    resolve(args, (*COMMON_OPTIONS, *SWEEP_OPTIONS))
    configure_logging(args.log_level)
    setup = round_setup(args)
    plan = PlanWriter(Path(args.plan_out)) if args.plan_out else None
    try:
        async with S3ObjectStore.open(setup.s3) as store, watermark_source(
            setup.etcd, target=setup.target, objects=store, shard=setup.shard
        ) as source:
            sweeper = Sweeper(store, setup.round, plan=plan, brake=brake_for(source))
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, sweeper.stop.set)
            try:
                async with ProgressLine(lambda: sweeper.counts):
                    result = await run_round(
                        sweeper, SafetyGate(), source, override=setup.safe_epoch_override
                    )
            finally:
                loop.remove_signal_handler(signal.SIGTERM)
    finally:
        if plan is not None:
            plan.close()
    if args.json:
        write_json(result.summary.to_dict())
    if sweeper.stop.is_set():
        return exitcodes.INTERRUPTED  # SIGTERM: requests in flight finished, the rest is left
    return exit_code(result.summary, paused_ok=args.paused_ok)
