"""The `watermark` command: the publisher service and the admin commands.

    watermark serve [--partitions p1,p2 [--register]] [--http-port 8080] [--tick-interval S]
    watermark epoch get|advance [--expected N]
    watermark partition register|deregister NAME... | list | show NAME

Every command takes the etcd options of `watermark.etcd_config` (--etcd, --namespace,
TLS, auth; env L0GC_ETCD, L0GC_NAMESPACE, ...) and `--json`, whose output is one JSON
object carrying ``"version"``. `serve` options fall back to L0GC_* variables (named in
their help). Logs go to stderr (JSON unless stderr is a terminal); stdout carries only
the command's output.

Exit codes, decided in one place (`_exit_code`): 0 success, 1 failure (etcd
unreachable, partition not registered, CAS conflict, ...), 2 usage or configuration
error, 130 interrupted.

`serve` shutdown on SIGTERM/SIGINT: readiness turns 503, fence waiters are aborted
(new fences refused), held fences get a bounded time to commit (the HTTP API still
takes their commits), the HTTP server stops, the final publish is written, the ticker
resigns, exit 0 (130 after SIGINT). SIGHUP re-reads the --auth-token-file.

`serve`'s HTTP API (`ServeHttp`): 127.0.0.1 by default; on any other address it needs
--auth-token-file and/or --tls-client-ca-file, or --insecure-no-auth, else exit 2 (see
`watermark.auth`, `watermark.http_server`). Those files are checked before etcd is
contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from watermark.auth import Exposure, TokenFile, TokenSet, check_exposure
from watermark.contract import expand_partitions
from watermark.display import printable
from watermark.errors import ConfigError, L0gcError, PartitionNotRegistered
from watermark.etcd_config import EtcdSettings, add_etcd_arguments, open_kv
from watermark.gcstate import PartitionGcState
from watermark.guard import DEFAULT_HOLD_TTL_S, FencingGuard
from watermark.http_api import create_app
from watermark.http_server import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    ApiServer,
    HttpLimits,
    server_ssl_context,
)
from watermark.kv import KV
from watermark.metrics import WatermarkMetrics
from watermark.publisher import DEFAULT_FENCE_TIMEOUT_S, Publisher
from watermark.record import PartitionRecord
from watermark.store import WatermarkStore
from watermark.ticker import EpochTicker

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "MeteredTicker",
           "ServeParts", "main"]  # fmt: skip

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
OUTPUT_VERSION = 1

_log = structlog.get_logger("watermark.cli")
Command = Callable[[argparse.Namespace, WatermarkStore, KV], Awaitable[dict[str, Any]]]


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _env_flag(name: str) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off/empty; anything else is an error."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name} must be 1/true/yes/on or 0/false/no/off, got {value!r}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object")
    common.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (env L0GC_LOG_LEVEL; default warning, serve: info)",
    )
    add_etcd_arguments(common)
    parser = argparse.ArgumentParser(
        prog="watermark", description="l0gc watermark publisher service and admin commands."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve", parents=[common], help="run the publisher service (HTTP API, epoch ticker)"
    )
    serve.add_argument(
        "--http-host", default=_env("L0GC_HTTP_HOST", "127.0.0.1"),
        help="address to listen on (env L0GC_HTTP_HOST; default 127.0.0.1); any other than "
        "loopback needs --auth-token-file or --tls-client-ca-file, or --insecure-no-auth",
    )
    serve.add_argument(
        "--http-port", type=int, default=_env("L0GC_HTTP_PORT", "8080"),
        help="port to listen on, 0 = any free port (env L0GC_HTTP_PORT; default 8080)",
    )
    serve.add_argument(
        "--auth-token-file", default=_env("L0GC_AUTH_TOKEN_FILE", "") or None, metavar="PATH",
        help="bearer tokens callers must present, one per line as ROLE:TOKEN (role writer, "
        "reconciler or admin) or a bare TOKEN (admin); re-read on SIGHUP "
        "(env L0GC_AUTH_TOKEN_FILE)",
    )
    serve.add_argument(
        "--tls-cert-file", default=_env("L0GC_TLS_CERT_FILE", "") or None, metavar="PATH",
        help="serve HTTPS with this PEM certificate chain (env L0GC_TLS_CERT_FILE)",
    )
    serve.add_argument(
        "--tls-key-file", default=_env("L0GC_TLS_KEY_FILE", "") or None, metavar="PATH",
        help="the PEM private key of --tls-cert-file (env L0GC_TLS_KEY_FILE)",
    )
    serve.add_argument(
        "--tls-client-ca-file", default=_env("L0GC_TLS_CLIENT_CA_FILE", "") or None,
        metavar="PATH", help="require client certificates signed by this PEM CA (mutual TLS); "
        "without --auth-token-file every verified client is admin (env L0GC_TLS_CLIENT_CA_FILE)",
    )
    serve.add_argument(
        "--insecure-no-auth", action="store_true", default=None,
        help="allow a non-loopback --http-host without any authentication: anyone who "
        "reaches the port can get live objects deleted (env L0GC_INSECURE_NO_AUTH=1)",
    )
    serve.add_argument(
        "--max-connections", type=_at_least_one,
        default=_env("L0GC_MAX_CONNECTIONS", str(DEFAULT_MAX_CONNECTIONS)), metavar="N",
        help="connections beyond N open at once are answered 503 and closed "
        f"(env L0GC_MAX_CONNECTIONS; default {DEFAULT_MAX_CONNECTIONS})",
    )
    serve.add_argument(
        "--http-read-timeout", type=_positive,
        default=_env("L0GC_HTTP_READ_TIMEOUT", f"{DEFAULT_READ_TIMEOUT_S:g}"), metavar="S",
        help="seconds a client may take to send a request's head, and again its body; also "
        "the idle keep-alive time (env L0GC_HTTP_READ_TIMEOUT; default "
        f"{DEFAULT_READ_TIMEOUT_S:g})",
    )
    serve.add_argument(
        "--owner-id", default=_env("L0GC_OWNER_ID", f"{socket.gethostname()}-{os.getpid()}"),
        help="this process's owner id in partition records (env L0GC_OWNER_ID; "
        "default hostname-pid)",
    )
    serve.add_argument(
        "--partitions", default=_env("L0GC_PARTITIONS", ""), metavar="P1,P2",
        help="comma-separated partitions to adopt at start; a last segment LO-HI is a "
        "range: orders/0-63 = orders/0 ... orders/63 (env L0GC_PARTITIONS)",
    )
    serve.add_argument(
        "--register", action="store_true",
        help="register the --partitions that are not registered yet before adopting them",
    )
    serve.add_argument(
        "--publish-interval", type=_positive, default=_env("L0GC_PUBLISH_INTERVAL", "1.0"),
        metavar="S", help="seconds between publishes (env L0GC_PUBLISH_INTERVAL; default 1)",
    )
    serve.add_argument(
        "--tick-interval", type=_non_negative, default=_env("L0GC_TICK_INTERVAL", "0"),
        metavar="S", help="advance the cluster epoch every S seconds while elected leader; "
        "0 = no ticker (env L0GC_TICK_INTERVAL; default 0)",
    )
    serve.add_argument(
        "--ticker-lease-ttl", type=int, default=_env("L0GC_TICKER_LEASE_TTL", "10"),
        metavar="S", help="etcd lease TTL of ticker leadership (env L0GC_TICKER_LEASE_TTL)",
    )
    serve.add_argument(
        "--fence-timeout", type=_positive,
        default=_env("L0GC_FENCE_TIMEOUT", str(DEFAULT_FENCE_TIMEOUT_S)), metavar="S",
        help="default fence deadline when a request gives none (env L0GC_FENCE_TIMEOUT)",
    )
    serve.add_argument(
        "--hold-ttl", type=_positive, default=_env("L0GC_HOLD_TTL", str(DEFAULT_HOLD_TTL_S)),
        metavar="S", help="how long a granted fence may stay uncommitted before a waiting "
        "window slide may reclaim it (env L0GC_HOLD_TTL)",
    )
    serve.add_argument(
        "--drain-timeout", type=_non_negative, default=_env("L0GC_DRAIN_TIMEOUT", "5"),
        metavar="S", help="on shutdown, how long held fences may still commit (default 5)",
    )
    serve.add_argument(
        "--no-idle-advance", action="store_true",
        help="do not give idle, reconciled partitions housekeeping epoch advances",
    )

    epoch = commands.add_parser("epoch", help="read or advance the cluster epoch")
    epoch_commands = epoch.add_subparsers(dest="action", required=True, metavar="ACTION")
    epoch_commands.add_parser("get", parents=[common], help="print the cluster epoch")
    advance = epoch_commands.add_parser(
        "advance", parents=[common], help="advance the cluster epoch by exactly 1 (CAS)"
    )
    advance.add_argument(
        "--expected", type=int, metavar="N", help="fail unless the epoch is N before advancing"
    )

    commands.add_parser(
        "namespace",
        help="bind the namespace to its bucket and root, or show the binding "
        "(`watermark namespace bind --help`)",
        add_help=False,
    )
    partition = commands.add_parser("partition", help="manage partition records")
    part_commands = partition.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (
        ("register", "register partitions (M(p) = cluster epoch - 1); existing ones unchanged"),
        ("deregister", "delete partitions' records (do this only once their data is gone)"),
    ):
        sub = part_commands.add_parser(action, parents=[common], help=text)
        sub.add_argument("names", nargs="+", metavar="NAME", help="partition name(s)")
    part_commands.add_parser("list", parents=[common], help="list every partition record")
    show = part_commands.add_parser("show", parents=[common], help="print one partition record")
    show.add_argument("name", metavar="NAME", help="partition name")
    return parser


class MeteredTicker(EpochTicker):
    """The epoch ticker hosted by `serve`, counting its advances and leadership in metrics."""

    def __init__(self, *args: Any, metrics: WatermarkMetrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._metrics = metrics

    async def tick_once(self, *, advance: bool = True) -> bool:
        """`EpochTicker.tick_once`, then update the epoch and leadership metrics."""
        advanced = await super().tick_once(advance=advance)
        if advanced:
            self._metrics.epoch_advances.inc()
        self._metrics.ticker_leader.set(1 if self.is_leader else 0)
        return advanced


@dataclass(frozen=True, slots=True)
class ServeParts:
    """The classes `serve` builds its publisher from: the real ones, unless a test harness
    (`gcd chaos --broken-build`) passes deliberately broken ones to `main`."""

    store_class: type[WatermarkStore] = WatermarkStore
    state_class: type[PartitionGcState] = PartitionGcState
    guard_class: type[FencingGuard] = FencingGuard


def _record(record: PartitionRecord) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(record.encode())
    return doc


async def _epoch_get(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    return {"epoch": await store.get_cluster_epoch()}


async def _epoch_advance(
    args: argparse.Namespace, store: WatermarkStore, kv: KV
) -> dict[str, Any]:
    epoch = await store.advance_cluster_epoch(args.expected)
    return {"epoch": epoch, "previous": epoch - 1}


async def _register(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    return {"partitions": [_record(await store.register_partition(n)) for n in args.names]}


async def _deregister(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    deleted = [name for name in args.names if await store.deregister_partition(name)]
    return {"deregistered": deleted, "absent": [n for n in args.names if n not in deleted]}


async def _list(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    records = await store.list_partitions()
    return {
        "partitions": [
            {"partition": name, "error": str(found)}
            if isinstance(found, L0gcError)
            else _record(found)
            for name, found in sorted(records.items())
        ]
    }


async def _show(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    record = await store.get_partition(args.name)
    if record is None:
        raise PartitionNotRegistered(args.name)
    return _record(record)


class ServeHttp:
    """How `serve` exposes its HTTP API: tokens, TLS, limits, and who can reach it.

    Built from the flags before anything else (`from_args` raises ConfigError, exit 2);
    `reload_tokens` is the SIGHUP handler.
    """

    def __init__(
        self,
        token_file: TokenFile | None,
        ssl_context: ssl.SSLContext | None,
        limits: HttpLimits,
        exposure: Exposure,
    ) -> None:
        self.token_file = token_file
        self.ssl_context = ssl_context
        self.limits = limits
        self.exposure = exposure

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeHttp:
        """Read and check the token file and TLS files; refuse an unauthenticated exposure."""
        insecure = bool(args.insecure_no_auth) or _env_flag("L0GC_INSECURE_NO_AUTH")
        ssl_context = server_ssl_context(
            args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file
        )
        token_file = None if args.auth_token_file is None else TokenFile(args.auth_token_file)
        authenticated = token_file is not None or args.tls_client_ca_file is not None
        exposure = check_exposure(args.http_host, authenticated=authenticated, insecure=insecure)
        limits = HttpLimits(
            max_connections=args.max_connections, read_timeout_s=args.http_read_timeout
        )
        return cls(token_file, ssl_context, limits, exposure)

    def tokens(self) -> TokenSet | None:
        """The tokens callers must present now (None: none asked)."""
        return None if self.token_file is None else self.token_file.tokens

    def reload_tokens(self) -> None:
        """SIGHUP: re-read the token file; if it is bad, keep the tokens and log why."""
        if self.token_file is None:
            _log.info("watermark.auth_reload_skipped", reason="no --auth-token-file")
            return
        try:
            tokens = self.token_file.reload()
        except ConfigError as exc:
            _log.error("watermark.auth_reload_failed", error=str(exc), kept=repr(self.tokens()))
            return
        _log.info("watermark.auth_reloaded", tokens=repr(tokens))

    def log_exposure(self, host: str, port: int) -> None:
        """Say at start who can call the API; loudly if anyone can."""
        if self.exposure is Exposure.INSECURE:
            _log.warning(
                "watermark.http_insecure_no_auth",
                host=host,
                port=port,
                message="--insecure-no-auth: anyone who reaches this port can raise watermarks "
                "and get live objects deleted; give --auth-token-file or --tls-client-ca-file",
            )
            return
        context = self.ssl_context
        client_ca = context is not None and context.verify_mode == ssl.CERT_REQUIRED
        _log.info(
            "watermark.http_access",
            exposure=self.exposure.value,
            tokens=repr(self.tokens()),
            client_certificates=client_ca,
        )


async def _serve(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    http: ServeHttp = args.http
    stopping = asyncio.Event()
    stopped_by: list[int] = []
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        stopped_by.append(signum)
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    loop.add_signal_handler(signal.SIGHUP, http.reload_tokens)
    partitions = expand_partitions(args.partitions)  # "orders/0-63" is 64 partitions
    metrics = WatermarkMetrics()
    publisher = Publisher(
        store,
        args.owner_id,
        publish_interval_s=args.publish_interval,
        idle_advance=not args.no_idle_advance,
        metrics=metrics,
        hold_ttl_s=args.hold_ttl,
        fence_timeout_s=args.fence_timeout,
        drain_timeout_s=args.drain_timeout,
        state_class=args.parts.state_class,
        guard_class=args.parts.guard_class,
    )
    for name in partitions:
        if args.register:
            await store.register_partition(name)
        await publisher.adopt(name)
    app = create_app(
        publisher,
        ready=lambda: publisher.published_once and not stopping.is_set(),
        tokens=http.tokens,
        limits=http.limits,
    )
    server = ApiServer(app, ssl_context=http.ssl_context, metrics=metrics)
    port = await server.start(args.http_host, args.http_port)
    http.log_exposure(args.http_host, port)
    publisher_stop, ticker_stop = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(publisher.run(publisher_stop), name="publisher")]
    if args.tick_interval > 0:
        ticker = MeteredTicker(
            store, kv, args.tick_interval, args.owner_id, args.ticker_lease_ttl, metrics=metrics
        )
        tasks.append(asyncio.create_task(ticker.run(ticker_stop), name="ticker"))
    _log.info("watermark.serve_started", owner=args.owner_id, port=port, partitions=partitions)
    stop_wait = asyncio.create_task(stopping.wait())
    done, _ = await asyncio.wait([stop_wait, *tasks], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stop_wait
    stopping.set()
    _log.info("watermark.serve_stopping", owner=args.owner_id)
    publisher.abort_waiters()
    await publisher.drain()
    await server.stop()
    publisher_stop.set()
    ticker_stop.set()
    # The publisher's run ends with the final publish; the ticker's with resigning.
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for task, outcome in zip(tasks, outcomes, strict=True):
        if isinstance(outcome, BaseException) or task in done:
            _log.error("watermark.task_failed", task=task.get_name(), error=repr(outcome))
            raise L0gcError(f"the {task.get_name()} task failed ({outcome!r}); see the logs")
    if signal.SIGINT in stopped_by[:1]:
        raise KeyboardInterrupt  # Ctrl-C: the same clean stop, then exit 130
    return {"stopped": True, "owner": args.owner_id, "partitions": publisher.partitions}


_COMMANDS: dict[tuple[str, str | None], Command] = {
    ("serve", None): _serve,
    ("epoch", "get"): _epoch_get,
    ("epoch", "advance"): _epoch_advance,
    ("partition", "register"): _register,
    ("partition", "deregister"): _deregister,
    ("partition", "list"): _list,
    ("partition", "show"): _show,
}


async def _run(args: argparse.Namespace, settings: EtcdSettings) -> dict[str, Any]:
    command = _COMMANDS[(args.command, getattr(args, "action", None))]
    if args.command == "serve":
        args.http = ServeHttp.from_args(args)  # a bad token file or TLS file: before etcd
    kv = await open_kv(settings)
    try:
        return await command(args, args.parts.store_class(kv, settings.namespace), kv)
    finally:
        await kv.close()


def _write_text(args: argparse.Namespace, result: dict[str, Any]) -> None:
    # Names, owners and errors come from etcd: escape what a terminal would obey.
    if args.command == "epoch":
        sys.stdout.write(f"{result['epoch']}\n")
    elif args.command == "partition" and args.action == "deregister":
        for name in result["deregistered"]:
            sys.stdout.write(f"deregistered {printable(name)}\n")
        for name in result["absent"]:
            sys.stdout.write(f"not registered {printable(name)}\n")
    elif args.command == "partition":
        docs = result.get("partitions", [result])
        for doc in docs:
            name = printable(doc["partition"])
            if "error" in doc:
                sys.stdout.write(f"{name}  MALFORMED: {printable(doc['error'])}\n")
                continue
            low, high = doc["window"]
            window = "[]" if low is None else f"[{low}, {high}]"
            sys.stdout.write(
                f"{name}  M(p)={doc['watermark']}  window={window}  "
                f"created_epoch={doc['created_epoch']}  owner={printable(str(doc['owner']))}"
                f"  owner_epoch={doc['owner_epoch']}\n"
            )


def _exit_code(exc: BaseException) -> int:
    """The one place that maps an error to an exit code."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, ConfigError) and not isinstance(exc, PartitionNotRegistered):
        return EXIT_USAGE
    return EXIT_FAILURE


def _configure_logging(level: str) -> None:
    renderer: Any = structlog.processors.JSONRenderer()
    if sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )


def main(argv: Sequence[str] | None = None, *, parts: ServeParts | None = None) -> int:
    """Run the `watermark` command; return its exit code (`parts`: see `ServeParts`)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["namespace"]:
        # Binding needs the object store too, which is gcd's side: one implementation.
        from gcd.cli.main import main as gcd_main  # noqa: PLC0415 - only for this command

        return gcd_main(arguments)
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.parts = parts if parts is not None else ServeParts()
    default_level = "info" if args.command == "serve" else "warning"
    _configure_logging(args.log_level or _env("L0GC_LOG_LEVEL", default_level))
    try:
        settings = EtcdSettings.from_args(args, required=args.command == "serve")
        result = asyncio.run(_run(args, settings))
    except (L0gcError, KeyboardInterrupt) as exc:
        code = _exit_code(exc)
        message = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
        if args.json:
            error = {"version": OUTPUT_VERSION, "error": type(exc).__name__, "message": message}
            sys.stdout.write(json.dumps(error) + "\n")
        sys.stderr.write(f"watermark: error: {message}\n")
        return code
    if args.json:
        sys.stdout.write(json.dumps({"version": OUTPUT_VERSION, **result}, sort_keys=True) + "\n")
    else:
        _write_text(args, result)
    return EXIT_OK

