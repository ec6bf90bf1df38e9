"""The `watermark` command: the publisher service and the admin commands.

    watermark serve [--partitions p1,p2 [--register]] [--http-port 8080] [--tick-interval 10s]
    watermark epoch get|advance [--expected N]
    watermark partition register|deregister NAME... | list | show NAME | repair NAME

Every option is an `Option` of `watermark.options`, the option system `gcd` uses too
(tables `COMMAND_OPTIONS` here, `ETCD_OPTIONS` for etcd): each has an environment
variable (`--tick-interval` is `L0GC_TICK_INTERVAL`) and a key in the TOML file of
`--config FILE` / `L0GC_CONFIG`; flag > env > config > default. Durations take seconds
or a unit ("10s", "1.5", "500ms"); a bad value exits 2 naming its source. `parse(argv,
environ)` does all of that without touching etcd (the chart tests run it on every
rendered container). Every command takes `--json`, whose output is one JSON object
carrying ``"version"``. Logs go to stderr (JSON unless stderr is a terminal); stdout
carries only the command's output.

Exit codes, decided in one place (`exitcodes.watermark_exit_code`): 0 success, 1
failure (partition not registered, CAS conflict, ...), 2 usage or configuration error,
4 etcd unreachable, 130 interrupted.

`serve` start-up changes nothing before it can serve: the options, token and TLS files
(`parse`), the partition records (registered, or --register; parsable), the listening
socket (bound, not yet accepting), and, without --replicated, the liveness of the
partitions' owners (`watermark.service.liveness`: a live publisher's partitions are
taken only with --take-over) are all checked before the first etcd write; then it
registers, adopts and starts accepting connections.

`serve --replicated` (`watermark.service.replicas`): partitions are owned through etcd leases
and claims shared with the other replicas instead of adopted at start; on SIGTERM they
are handed over (sealed) before what follows.

`serve` shutdown on SIGTERM/SIGINT: readiness turns 503, fence waiters are aborted
(new fences refused), held fences get a bounded time to commit (the HTTP API still
takes their commits), the HTTP server stops, the final publish is written, the ticker
resigns, exit 0 (130 after SIGINT). SIGHUP re-reads the --auth-token-file.

`serve`'s HTTP API (`ServeHttp`): 127.0.0.1 by default; on any other address it needs
--auth-token-file and/or --tls-client-ca-file, or --insecure-no-auth, else exit 2 (see
`watermark.api.auth`, `watermark.api.http_server`). Those files are checked before etcd is
contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from watermark import exitcodes
from watermark.api import repair
from watermark.api.auth import Exposure, TokenFile, TokenSet, check_exposure
from watermark.api.http_api import create_app
from watermark.api.http_server import (
    DEFAULT_HEAD_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER,
    DEFAULT_READ_TIMEOUT_S,
    ApiServer,
    HttpLimits,
    server_ssl_context,
)
from watermark.api.owners import FORCE_OPTIONS, deregister
from watermark.api.probes import create_probe_app
from watermark.core.contract import expand_partitions, partition_order
from watermark.core.display import printable
from watermark.core.fleet import FleetUrls
from watermark.core.gcstate import PartitionGcState
from watermark.core.kv import KV
from watermark.core.record import PartitionRecord
from watermark.errors import ConfigError, L0gcError, PartitionNotRegistered
from watermark.etcd.settings import ETCD_OPTIONS, EtcdSettings, add_etcd_arguments, open_kv
from watermark.etcd.store import WatermarkStore
from watermark.logs import LEVEL_NAMES, configure_logging
from watermark.options import (
    CommandParser,
    Option,
    add_config_option,
    add_options,
    boolean,
    choice,
    duration,
    integer,
    positive_duration,
    resolve,
    text,
    whole_seconds,
)
from watermark.service.eventlog import EVENT_LOG
from watermark.service.guard import DEFAULT_HOLD_TTL_S, FencingGuard
from watermark.service.liveness import Liveness, take_over_plan
from watermark.service.metrics import WatermarkMetrics
from watermark.service.publisher import DEFAULT_FENCE_TIMEOUT_S, Publisher
from watermark.service.replicas import ReplicaSet, ReplicaSettings, advertised_url
from watermark.service.ticker import EpochTicker

__all__ = ["COMMAND_OPTIONS", "Invocation", "ServeParts", "build_parser", "main", "parse"]

OUTPUT_VERSION = 1

_log = structlog.get_logger("watermark.cli")
Command = Callable[[argparse.Namespace, WatermarkStore, KV], Awaitable[dict[str, Any]]]


def _partition_list(value: object) -> tuple[str, ...]:
    """--partitions: a comma-separated string (or, in the config file, a list) with ranges."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ValueError("expected comma-separated partition names, e.g. orders/0-63,audit")
    try:
        return tuple(expand_partitions(value))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _fleet_urls(value: object) -> FleetUrls:
    """--fleet-urls: comma-separated address patterns (see `watermark.core.fleet`)."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ValueError("expected comma-separated SCHEME://HOST[:PORT] patterns")
    try:
        return FleetUrls.parse(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _output_options(log_level: str) -> tuple[Option, ...]:
    return (
        Option("--json", boolean, False, "print one JSON object on stdout", switch=True),
        Option("--log-level", choice(*LEVEL_NAMES), log_level,
               "log level on stderr: debug, info, warning or error", "LEVEL"),
    )  # fmt: skip


SERVE_OPTIONS: tuple[Option, ...] = (
    *_output_options("info"),
    Option("--http-host", text, "127.0.0.1",
           "address to listen on; any other than loopback needs --auth-token-file or "
           "--tls-client-ca-file, or --insecure-no-auth", "HOST"),
    Option("--http-port", integer(0, 65535), 8080, "port to listen on, 0 = any free port",
           "PORT"),
    Option("--auth-token-file", text, None,
           "bearer tokens callers must present, one per line as ROLE:TOKEN (role writer, "
           "reconciler, registrar or admin) or a bare TOKEN (admin); re-read on SIGHUP", "PATH"),
    Option("--tls-cert-file", text, None, "serve HTTPS with this PEM certificate chain",
           "PATH"),
    Option("--tls-key-file", text, None, "the PEM private key of --tls-cert-file", "PATH"),
    Option("--tls-client-ca-file", text, None,
           "require client certificates signed by this PEM CA (mutual TLS); without "
           "--auth-token-file every verified client is admin", "PATH"),
    Option("--insecure-no-auth", boolean, False,
           "allow a non-loopback --http-host without any authentication: anyone who reaches "
           "the port can get live objects deleted", switch=True),
    Option("--probe-port", integer(0, 65535), None,
           "also serve GET /healthz, /readyz and /metrics (only those, no token, no TLS) on "
           "this port of --http-host, a listener no API client can starve; point the "
           "liveness and readiness probes at it (default: none, probes on --http-port)",
           "PORT"),
    Option("--max-connections", integer(1), DEFAULT_MAX_CONNECTIONS,
           "connections beyond N open at once are answered 503 and closed", "N"),
    Option("--max-connections-per-peer", integer(1), DEFAULT_MAX_CONNECTIONS_PER_PEER,
           "connections beyond N open at once from one client address are answered 503 "
           "and closed (probes keep a reserve beyond --max-connections)", "N"),
    Option("--http-head-timeout", positive_duration, DEFAULT_HEAD_TIMEOUT_S,
           "how long a new connection may take to send its first request head before it "
           "is closed (at most --http-read-timeout)", "DURATION"),
    Option("--http-read-timeout", positive_duration, DEFAULT_READ_TIMEOUT_S,
           "how long a client may take to send a request's head, and again its body; also "
           "the idle keep-alive time", "DURATION"),
    Option("--owner-id", text, None,
           "this process's owner id in partition records (default hostname-pid)", "ID"),
    Option("--partitions", _partition_list, (),
           "comma-separated partitions to adopt at start; a last segment LO-HI is a range: "
           "orders/0-63 = orders/0 ... orders/63 (default: none)", "P1,P2"),
    Option("--register", boolean, False,
           "register the --partitions that are not registered yet before adopting them",
           switch=True),
    Option("--take-over", boolean, False,
           "adopt the --partitions even from a publisher that is alive (its liveness key "
           "is held): it turns stale and stops serving them; without it serve waits about "
           "2 lease TTLs for such owners to go, then exits 2", switch=True),
    Option("--publish-interval", positive_duration, 1.0,
           "how often M(p) of the owned partitions is published", "DURATION"),
    Option("--tick-interval", duration, 0.0,
           "advance the cluster epoch this often while elected leader; 0 = no ticker",
           "DURATION"),
    Option("--ticker-lease-ttl", whole_seconds(1), 10,
           "etcd lease TTL of ticker leadership, whole seconds: a lost leader is replaced "
           "after about this long", "DURATION"),
    Option("--fence-timeout", positive_duration, DEFAULT_FENCE_TIMEOUT_S,
           "deadline of a fence whose request gives none", "DURATION"),
    Option("--hold-ttl", positive_duration, DEFAULT_HOLD_TTL_S,
           "how long a granted fence may stay uncommitted before a waiting window slide may "
           "reclaim it", "DURATION"),
    Option("--drain-timeout", duration, 5.0,
           "on shutdown, how long held fences may still commit", "DURATION"),
    Option("--no-idle-advance", boolean, False,
           "do not give idle, reconciled partitions housekeeping epoch advances", switch=True),
    Option("--replicated", boolean, False,
           "share --partitions with the other --replicated replicas of this namespace: each "
           "partition is owned by one replica at a time through an etcd lease and moves when "
           "replicas come and go; requests for a partition owned elsewhere get a 307 to its "
           "owner (default: adopt every --partitions at start)", switch=True),
    Option("--advertise-url", text, None,
           "with --replicated: the URL other replicas redirect writers to (default: "
           "http(s)://HOST:PORT of --http-host, or of this host's name when that is 0.0.0.0 "
           "or ::)", "URL"),
    Option("--fleet-urls", _fleet_urls, None,
           "with --replicated: comma-separated patterns of the addresses replicas advertise, "
           "SCHEME://HOST[:PORT] with HOST an IP, a CIDR (10.244.0.0/16), a DNS name with '*' "
           "labels or '*', PORT a number or '*'; a member record outside them is ignored (no "
           "redirect, no partition) (default: this replica's scheme, and its port on any host "
           "or its host on any port)",
           "URLS"),
    Option("--member-lease-ttl", whole_seconds(2), 5,
           "etcd lease TTL of this process's liveness key ({ns}/owners/ID), or with "
           "--replicated of its membership and claims; a publisher that dies is seen as "
           "gone (its partitions may be adopted) after about this long", "DURATION"),
    Option("--membership-interval", positive_duration, 0.5,
           "with --replicated: how often the replicas and claims are read from etcd",
           "DURATION"),
)  # fmt: skip
ADMIN_OPTIONS = _output_options("warning")
EXPECTED_OPTION = Option("--expected", integer(0), None,
                         "fail unless the epoch is N before advancing (default: no check)",
                         "N")  # fmt: skip
# Each command's options (the etcd ones, `ETCD_OPTIONS`, come on top).
COMMAND_OPTIONS: dict[str, tuple[Option, ...]] = {
    "serve": SERVE_OPTIONS,
    "epoch get": ADMIN_OPTIONS,
    "epoch advance": (*ADMIN_OPTIONS, EXPECTED_OPTION),
    "partition register": ADMIN_OPTIONS,
    "partition deregister": (
        *ADMIN_OPTIONS, *FORCE_OPTIONS,
        Option("--name-hex", boolean, False,
               "the NAMEs are the hex bytes of records whose names are not valid partition "
               "names (control characters, bytes that are not UTF-8), as `gcd status` prints "
               "them; such a record has no owner to check", switch=True),
    ),
    "partition list": ADMIN_OPTIONS,
    "partition show": ADMIN_OPTIONS,
    "partition repair": (*ADMIN_OPTIONS, *repair.OPTIONS),
}
# Config-file keys some watermark command takes: one file serves every command.
CONFIG_KEYS = frozenset(
    o.dest for table in (*COMMAND_OPTIONS.values(), ETCD_OPTIONS) for o in table
)


def _command_parser(
    commands: Any, name: str, options: tuple[Option, ...], help_text: str
) -> argparse.ArgumentParser:
    """A subcommand's parser: --config, its options, the etcd options."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=help_text
    )
    add_config_option(parser)
    add_options(parser, options[:2], "output")
    if options[2:]:
        add_options(parser, options[2:], name)
    add_etcd_arguments(parser)
    return parser


_EXAMPLES = """examples:
  watermark --version
  watermark serve --etcd etcd-0:2379 --namespace /l0gc/prod --partitions 'orders/0-7' --register
  watermark epoch get --json
  watermark partition list

Exit codes: 0 ok, 1 failed, 2 usage, 4 etcd unreachable, 130 interrupted."""


def build_parser() -> CommandParser:
    """The argument parser of every subcommand (values are checked by `parse`)."""
    parser = CommandParser(
        prog="watermark", description="l0gc watermark publisher service and admin commands.",
        epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _command_parser(
        commands, "serve", SERVE_OPTIONS, "run the publisher service (HTTP API, epoch ticker)"
    )
    epoch = commands.add_parser("epoch", help="read or advance the cluster epoch")
    epoch_commands = epoch.add_subparsers(dest="action", required=True, metavar="ACTION")
    _command_parser(epoch_commands, "get", ADMIN_OPTIONS, "print the cluster epoch")
    _command_parser(
        epoch_commands, "advance", COMMAND_OPTIONS["epoch advance"],
        "advance the cluster epoch by exactly 1 (CAS)",
    )  # fmt: skip
    commands.add_parser(
        "namespace",
        help="bind the namespace to its bucket and root, or show the binding "
        "(`watermark namespace bind --help`)",
        add_help=False,
    )
    partition = commands.add_parser("partition", help="manage partition records")
    part_commands = partition.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, help_text in (
        ("register", "register partitions (M(p) = cluster epoch - 1); existing ones unchanged"),
        ("deregister", "delete partitions' records (do this only once their data is gone)"),
    ):
        sub = _command_parser(
            part_commands, action, COMMAND_OPTIONS[f"partition {action}"], help_text
        )
        sub.add_argument("names", nargs="+", metavar="NAME", help="partition name(s)")
    _command_parser(part_commands, "list", ADMIN_OPTIONS, "list every partition record")
    show = _command_parser(part_commands, "show", ADMIN_OPTIONS, "print one partition record")
    show.add_argument("name", metavar="NAME", help="partition name")
    _command_parser(
        part_commands, "repair", COMMAND_OPTIONS["partition repair"],
        "write a validated partition record by compare-and-swap (never lowers M(p) without "
        "--force)",
    ).add_argument("name", metavar="NAME", help="partition name")  # fmt: skip
    return parser


@dataclass(frozen=True, slots=True)
class Invocation:
    """What `watermark ARGS` is to do, settled before any network I/O (see `parse`)."""

    command: str  # "serve", "epoch get", "partition list", ...
    args: argparse.Namespace  # every option resolved: flag > env > config > default
    etcd: EtcdSettings
    http: ServeHttp | None  # `serve` only: tokens, TLS, limits, exposure


def parse(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Invocation:
    """Parse and check `watermark ARGV` against `environ` (default os.environ); no etcd.

    Raises SystemExit as argparse does (0 after --help, 2 after a usage error) and
    ConfigError for a bad value (naming its flag, env var or config key), a missing etcd
    endpoint for `serve`, or a bad token or TLS file. `watermark namespace` is gcd's
    command and is not parsed here.
    """
    return _settle(build_parser().parse_args(list(argv)), environ)


def _settle(args: argparse.Namespace, environ: Mapping[str, str] | None) -> Invocation:
    env = os.environ if environ is None else environ
    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    options = (*COMMAND_OPTIONS[command], *ETCD_OPTIONS)
    resolve(args, options, environ=env, known=CONFIG_KEYS)
    if command == "serve" and args.owner_id is None:
        args.owner_id = f"{socket.gethostname()}-{os.getpid()}"
    etcd = EtcdSettings.from_args(args, env, required=command == "serve")
    http = ServeHttp.from_args(args) if command == "serve" else None  # files before etcd
    if command == "serve" and args.replicated:
        _replica_settings(args)
    return Invocation(command, args, etcd, http)


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


async def _epoch_advance(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    epoch = await store.advance_cluster_epoch(args.expected)
    return {"epoch": epoch, "previous": epoch - 1}


async def _register(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    return {"partitions": [_record(await store.register_partition(n)) for n in args.names]}


async def _deregister(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    """Delete the records; a live owner's only with --force, revoked first (`owners`)."""
    if args.name_hex:
        raw = [_hex_name(name) for name in args.names]
        removed = [name for name, data in zip(args.names, raw, strict=True)
                   if await store.deregister_raw(data)]  # fmt: skip
        return {"deregistered": removed, "absent": [n for n in args.names if n not in removed]}
    deleted = await deregister(
        store, args.names, force=args.force, revoke_wait_s=args.revoke_wait, reason=args.reason
    )
    return {"deregistered": deleted, "absent": [n for n in args.names if n not in deleted]}


def _hex_name(text_: str) -> bytes:
    try:
        return bytes.fromhex(text_)
    except ValueError:
        raise ConfigError(
            f"--name-hex: {text_!r} is not hex; give the bytes of the record's name after "
            "{ns}/partitions/ as `gcd status` prints them (e.g. 6f72646572730a)"
        ) from None


async def _list(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    records = await store.list_partitions()
    return {
        "partitions": [
            {"partition": name, "error": str(found)}
            if isinstance(found, L0gcError)
            else _record(found)
            for name, found in sorted(records.items(), key=lambda item: partition_order(item[0]))
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
        insecure = bool(args.insecure_no_auth)
        ssl_context = server_ssl_context(
            args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file
        )
        token_file = None if args.auth_token_file is None else TokenFile(args.auth_token_file)
        authenticated = token_file is not None or args.tls_client_ca_file is not None
        exposure = check_exposure(args.http_host, authenticated=authenticated, insecure=insecure)
        limits = HttpLimits(
            max_connections=args.max_connections,
            read_timeout_s=args.http_read_timeout,
            max_connections_per_peer=args.max_connections_per_peer,
            head_timeout_s=args.http_head_timeout,
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


def _replica_settings(args: argparse.Namespace) -> ReplicaSettings:
    """`serve --replicated`: this process as one replica of `args.partitions` (ConfigError
    for a bad value, checked by `parse` before etcd is contacted)."""
    return ReplicaSettings.for_serve(
        args.owner_id, tuple(args.partitions), args.member_lease_ttl,
        args.membership_interval, args.drain_timeout, advertise_url=args.advertise_url,
        fleet=args.fleet_urls,
    )  # fmt: skip


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
    partitions = list(args.partitions)  # expanded by the option: orders/0-63 is 64 names
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
    # Nothing is written to etcd before every check has passed and the port is bound:
    # a `serve` that cannot start leaves every partition as it found it. (Replicas adopt
    # each partition on its own later, retrying one that cannot be adopted yet.)
    owners = {}
    if not args.replicated:
        owners = await _current_owners(store, partitions, register=args.register)
    replicas = None
    if args.replicated:
        replicas = ReplicaSet(store, kv, publisher, _replica_settings(args))
    def ready() -> bool:
        return bool(publisher.published_once and not stopping.is_set()
                    and (replicas is None or replicas.settled))  # fmt: skip

    app = create_app(publisher, ready=ready, tokens=http.tokens, limits=http.limits,
                     router=replicas)  # fmt: skip
    server = ApiServer(app, ssl_context=http.ssl_context, metrics=metrics)
    port = await server.start(args.http_host, args.http_port, serving=False)
    probes = None  # --probe-port: answers from now on, the API once adopted
    if args.probe_port is not None:
        probes = ApiServer(create_probe_app(publisher, ready), metrics=metrics)
    liveness = None
    try:
        if probes is not None:
            await probes.start(args.http_host, args.probe_port, flag="--probe-port")
        if replicas is None:
            liveness = Liveness(kv, store.namespace, args.owner_id, args.member_lease_ttl)
            await _take_partitions(args, store, publisher, liveness, owners)
        else:
            tls = http.ssl_context is not None
            replicas.advertise(args.advertise_url or advertised_url(args.http_host, port, tls=tls))
            for name in partitions if args.register else ():
                await store.register_partition(name)
        await server.start_serving()
    except BaseException:
        await server.stop()
        if probes is not None:
            await probes.stop()
        if liveness is not None:
            await liveness.release()
        raise
    http.log_exposure(args.http_host, port)
    publisher_stop, ticker_stop, replicas_stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(publisher.run(publisher_stop), name="publisher")]
    liveness_stop = asyncio.Event()
    if liveness is not None:
        tasks.append(asyncio.create_task(liveness.keep(liveness_stop), name="liveness"))
    if replicas is not None:  # announced once the API answers at the advertised URL
        if args.fleet_urls is None:
            _log.warning(
                "watermark.fleet_urls_unset",
                fleet=repr(replicas.fleet),
                message="no --fleet-urls: a member record under {ns}/replicas/members/ with "
                "this replica's port on any host, or its host on any port, gets redirects "
                "with writers' tokens; set --fleet-urls to the addresses replicas advertise",
            )
        tasks.append(asyncio.create_task(replicas.run(replicas_stop), name="replicas"))
        replicas_done = tasks[-1]
    if args.tick_interval > 0:
        ticker = EpochTicker(
            store, kv, args.tick_interval, args.owner_id, args.ticker_lease_ttl,
            hook=(metrics.hook, EVENT_LOG),
        )  # fmt: skip
        tasks.append(asyncio.create_task(ticker.run(ticker_stop), name="ticker"))
    _log.info("watermark.serve_started", owner=args.owner_id, port=port, partitions=partitions)
    stop_wait = asyncio.create_task(stopping.wait())
    done, _ = await asyncio.wait([stop_wait, *tasks], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stop_wait
    stopping.set()
    _log.info("watermark.serve_stopping", owner=args.owner_id)
    if replicas is not None:  # hand the partitions over while the API still answers
        ticker_stop.set()  # and let another replica tick meanwhile
        replicas_stop.set()
        await asyncio.wait([replicas_done])
    publisher.abort_waiters()
    await publisher.drain()
    await server.stop()
    if probes is not None:
        await probes.stop()
    publisher_stop.set()
    ticker_stop.set()
    liveness_stop.set()
    # The publisher's run ends with the final publish; the ticker's with resigning.
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    if liveness is not None:  # after the final publish: a successor may adopt at once
        await liveness.release()
    for task, outcome in zip(tasks, outcomes, strict=True):
        if isinstance(outcome, BaseException) or task in done:
            _log.error("watermark.task_failed", task=task.get_name(), error=repr(outcome))
            raise L0gcError(f"the {task.get_name()} task failed ({outcome!r}); see the logs")
    if signal.SIGINT in stopped_by[:1]:
        raise KeyboardInterrupt  # Ctrl-C: the same clean stop, then exit 130
    return {"stopped": True, "owner": args.owner_id, "partitions": publisher.partitions}


async def _current_owners(
    store: WatermarkStore, partitions: Sequence[str], *, register: bool
) -> dict[str, str | None]:
    """Each partition's owner as stored (read only); PartitionNotRegistered for one that
    is not registered unless `register`, InvalidRecord for one that does not parse."""
    records = await store.list_partitions() if partitions else {}
    owners: dict[str, str | None] = {}
    for name in partitions:
        found = records.get(name)
        if isinstance(found, L0gcError):
            raise found
        if found is None and not register:
            raise PartitionNotRegistered(name)
        owners[name] = None if found is None else found.owner
    return owners


async def _take_partitions(
    args: argparse.Namespace,
    store: WatermarkStore,
    publisher: Publisher,
    liveness: Liveness,
    owners: dict[str, str | None],
) -> None:
    """Non-replicated `serve`: hold this owner id's liveness key, wait (bounded) for the
    live owners of our partitions to go (unless --take-over), register, adopt."""
    wait_s = 2.0 * args.member_lease_ttl + 1.0
    await liveness.hold(wait_s)
    if args.take_over:
        alive = await liveness.alive([o for o in owners.values() if o is not None])
        held = take_over_plan(owners, args.owner_id, alive.__contains__)
        if held:
            _log.warning("watermark.take_over", partitions=sorted(held), owners=sorted(alive))
    else:
        await liveness.wait_for_owners(owners, wait_s)
    for name in owners:
        if args.register:
            await store.register_partition(name)
        await publisher.adopt(name)


_COMMANDS: dict[str, Command] = {
    "serve": _serve,
    "epoch get": _epoch_get,
    "epoch advance": _epoch_advance,
    "partition register": _register,
    "partition deregister": _deregister,
    "partition list": _list,
    "partition show": _show,
    "partition repair": repair.repair,
}


async def _run(invocation: Invocation, parts: ServeParts) -> dict[str, Any]:
    args, settings = invocation.args, invocation.etcd
    args.http, args.parts = invocation.http, parts
    kv = await open_kv(settings)
    try:
        store = parts.store_class(kv, settings.namespace)
        return await _COMMANDS[invocation.command](args, store, kv)
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
    elif args.command == "partition" and args.action == "repair":
        repair.write_text(result)
    elif args.command == "partition":
        docs = result.get("partitions", [result])
        for doc in docs:
            name = printable(doc["partition"])
            if "error" in doc:
                sys.stdout.write(f"{name}  MALFORMED: {printable(doc['error'])}\n")
                continue
            low, high = doc["window"]
            window = "empty" if low is None else f"[{low}, {high}]"
            owner = "none" if doc["owner"] is None else printable(doc["owner"])
            sys.stdout.write(
                f"{name}  M(p)={doc['watermark']}  window={window}  "
                f"created_epoch={doc['created_epoch']}  owner={owner}"
                f"  owner_epoch={doc['owner_epoch']}\n"
            )


def main(argv: Sequence[str] | None = None, *, parts: ServeParts | None = None) -> int:
    """Run the `watermark` command; return its exit code (`parts`: see `ServeParts`)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(arguments)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        code = exc.code if isinstance(exc.code, int) else exitcodes.USAGE
        if code and "--json" in arguments:  # scripts read stdout: one JSON document
            error = exitcodes.error_document(code, "bad usage: see stderr")
            sys.stdout.write(json.dumps(error) + "\n")
        return code
    try:
        invocation = _settle(args, None)  # bad values, token or TLS files: exit 2, no etcd
        configure_logging(args.log_level)
        result = asyncio.run(_run(invocation, parts if parts is not None else ServeParts()))
    except (L0gcError, KeyboardInterrupt) as exc:
        code = exitcodes.watermark_exit_code(exc)
        interrupted = isinstance(exc, KeyboardInterrupt)
        message = "interrupted (Ctrl-C); stopped cleanly" if interrupted else str(exc)
        if getattr(args, "json", None) is True:  # the flag, or resolved (the first option)
            kind = "interrupted" if interrupted else type(exc).__name__  # as gcd writes it
            error = {"version": OUTPUT_VERSION, "error": kind, "exit_code": code,
                     "message": message}  # fmt: skip
            sys.stdout.write(json.dumps(error) + "\n")
        sys.stderr.write(f"watermark {args.command}: {'' if interrupted else 'error: '}{message}\n")
        return code
    if args.json:
        sys.stdout.write(json.dumps({"version": OUTPUT_VERSION, **result}, sort_keys=True) + "\n")
    else:
        _write_text(args, result)
    return exitcodes.OK
