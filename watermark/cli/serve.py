"""`watermark serve`: the publisher service (HTTP API, epoch ticker), from its flags.

Design notes: docs/internals/publisher.md, `watermark.cli.serve`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from l0gc.contract.namespace import expand_partitions
from l0gc.contract.references import DEFAULT_MAX_REFERENCES
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings
from l0gc.options import (
    Option,
    boolean,
    duration,
    integer,
    positive_duration,
    text,
    whole_seconds,
)
from watermark.api.limits import (
    DEFAULT_HEAD_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER,
    DEFAULT_READ_TIMEOUT_S,
    HttpLimits,
)
from watermark.cli.output import output_options
from watermark.core.fleet import FleetUrls
from watermark.service.guard import DEFAULT_HOLD_TTL_S
from watermark.service.publisher import DEFAULT_FENCE_TIMEOUT_S

if TYPE_CHECKING:  # the server and the runner are imported when `serve` runs, not by
    # the admin commands, which share this module's flags table (`watermark.cli.main`)
    from watermark.api.front import ServeHttp
    from watermark.service.replicas import ReplicaSettings
    from watermark.service.runner import ServeParts

__all__ = ["HELP", "SERVE_OPTIONS", "default_owner_id", "run", "settle"]

HELP = "run the publisher service (HTTP API, epoch ticker)"


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


SERVE_OPTIONS: tuple[Option, ...] = (
    *output_options("info"),
    Option(
        "--http-host",
        text,
        "127.0.0.1",
        "address to listen on; any other than loopback needs --auth-token-file or "
        "--tls-client-ca-file, or --insecure-no-auth",
        "HOST",
    ),
    Option("--http-port", integer(0, 65535), 8080, "port to listen on, 0 = any free port", "PORT"),
    Option(
        "--auth-token-file",
        text,
        None,
        "bearer tokens callers must present, one per line as ROLE:TOKEN (role writer, "
        "reconciler, registrar or admin) or a bare TOKEN (admin); re-read on SIGHUP",
        "PATH",
    ),
    Option("--tls-cert-file", text, None, "serve HTTPS with this PEM certificate chain", "PATH"),
    Option("--tls-key-file", text, None, "the PEM private key of --tls-cert-file", "PATH"),
    Option(
        "--tls-client-ca-file",
        text,
        None,
        "require client certificates signed by this PEM CA (mutual TLS); without "
        "--auth-token-file every verified client is admin",
        "PATH",
    ),
    Option(
        "--insecure-no-auth",
        boolean,
        False,
        "allow a non-loopback --http-host without any authentication: anyone who reaches "
        "the port can get live objects deleted",
        switch=True,
    ),
    Option(
        "--probe-port",
        integer(0, 65535),
        None,
        "also serve GET /healthz, /readyz and /metrics (only those, no token, no TLS) on "
        "this port of --http-host, a listener no API client can starve; point the "
        "liveness and readiness probes at it (default: none, probes on --http-port)",
        "PORT",
    ),
    Option(
        "--max-connections",
        integer(1),
        DEFAULT_MAX_CONNECTIONS,
        "connections beyond N open at once are answered 503 and closed",
        "N",
    ),
    Option(
        "--max-connections-per-peer",
        integer(1),
        DEFAULT_MAX_CONNECTIONS_PER_PEER,
        "connections beyond N open at once from one client address are answered 503 "
        "and closed (probes keep a reserve beyond --max-connections)",
        "N",
    ),
    Option(
        "--http-head-timeout",
        positive_duration,
        DEFAULT_HEAD_TIMEOUT_S,
        "how long a new connection may take to send its first request head before it "
        "is closed (at most --http-read-timeout)",
        "DURATION",
    ),
    Option(
        "--http-read-timeout",
        positive_duration,
        DEFAULT_READ_TIMEOUT_S,
        "how long a client may take to send a request's head, and again its body; also "
        "the idle keep-alive time",
        "DURATION",
    ),
    Option(
        "--owner-id",
        text,
        None,
        "this process's owner id in partition records (default hostname-pid)",
        "ID",
    ),
    Option(
        "--partitions",
        _partition_list,
        (),
        "comma-separated partitions to adopt at start; a last segment LO-HI is a range: "
        "orders/0-63 = orders/0 ... orders/63 (default: none)",
        "P1,P2",
    ),
    Option(
        "--register",
        boolean,
        False,
        "register the --partitions that are not registered yet before adopting them",
        switch=True,
    ),
    Option(
        "--take-over",
        boolean,
        False,
        "adopt the --partitions even from a publisher that is alive (its liveness key "
        "is held): it turns stale and stops serving them; without it serve waits about "
        "2 lease TTLs for such owners to go, then exits 2",
        switch=True,
    ),
    Option(
        "--publish-interval",
        positive_duration,
        1.0,
        "how often M(p) of the owned partitions is published",
        "DURATION",
    ),
    Option(
        "--tick-interval",
        duration,
        0.0,
        "advance the cluster epoch this often while elected leader; 0 = no ticker",
        "DURATION",
    ),
    Option(
        "--ticker-lease-ttl",
        whole_seconds(1),
        10,
        "etcd lease TTL of ticker leadership, whole seconds: a lost leader is replaced "
        "after about this long",
        "DURATION",
    ),
    Option(
        "--fence-timeout",
        positive_duration,
        DEFAULT_FENCE_TIMEOUT_S,
        "deadline of a fence whose request gives none",
        "DURATION",
    ),
    Option(
        "--hold-ttl",
        positive_duration,
        DEFAULT_HOLD_TTL_S,
        "how long a granted fence may stay uncommitted before it is reclaimed and its "
        "commit refused",
        "DURATION",
    ),
    Option(
        "--max-references",
        integer(1),
        DEFAULT_MAX_REFERENCES,
        "object keys one partition may hold referenced by entries its reconciler has not "
        "released (docs/references.md); a commit past it is refused with 429 "
        "references_full",
        "N",
    ),
    Option(
        "--drain-timeout",
        duration,
        5.0,
        "on shutdown, how long held fences may still commit",
        "DURATION",
    ),
    Option(
        "--no-idle-advance",
        boolean,
        False,
        "do not give idle, reconciled partitions housekeeping epoch advances",
        switch=True,
    ),
    Option(
        "--replicated",
        boolean,
        False,
        "share --partitions with the other --replicated replicas of this namespace: each "
        "partition is owned by one replica at a time through an etcd lease and moves when "
        "replicas come and go; requests for a partition owned elsewhere get a 307 to its "
        "owner (default: adopt every --partitions at start)",
        switch=True,
    ),
    Option(
        "--advertise-url",
        text,
        None,
        "with --replicated: the URL other replicas redirect writers to (default: "
        "http(s)://HOST:PORT of --http-host, or of this host's name when that is 0.0.0.0 "
        "or ::)",
        "URL",
    ),
    Option(
        "--fleet-urls",
        _fleet_urls,
        None,
        "with --replicated: comma-separated patterns of the addresses replicas advertise, "
        "SCHEME://HOST[:PORT] with HOST an IP, a CIDR (10.244.0.0/16), a DNS name with '*' "
        "labels or '*', PORT a number or '*'; a member record outside them is ignored (no "
        "redirect, no partition) (default: this replica's scheme, and its port on any host "
        "or its host on any port)",
        "URLS",
    ),
    Option(
        "--member-lease-ttl",
        whole_seconds(2),
        5,
        "etcd lease TTL of this process's liveness key ({ns}/owners/ID), or with "
        "--replicated of its membership and claims; a publisher that dies is seen as "
        "gone (its partitions may be adopted) after about this long",
        "DURATION",
    ),
    Option(
        "--membership-interval",
        positive_duration,
        0.5,
        "with --replicated: how often the replicas and claims are read from etcd",
        "DURATION",
    ),
)


def _replica_settings(args: argparse.Namespace) -> ReplicaSettings:
    """`serve --replicated`: this process as one replica of `args.partitions` (ConfigError
    for a bad value, checked by `settle` before etcd is contacted)."""
    from watermark.service.replicas import ReplicaSettings  # noqa: PLC0415 - see TYPE_CHECKING

    return ReplicaSettings.for_serve(
        args.owner_id,
        tuple(args.partitions),
        args.member_lease_ttl,
        args.membership_interval,
        args.drain_timeout,
        advertise_url=args.advertise_url,
        fleet=args.fleet_urls,
    )


def default_owner_id(args: argparse.Namespace) -> None:
    """No --owner-id: this process's is hostname-pid."""
    args.owner_id = f"{socket.gethostname()}-{os.getpid()}"


def settle(args: argparse.Namespace) -> ServeHttp:
    """Check what `serve` needs before etcd is contacted: the token and TLS files and the
    exposure (`ServeHttp`), the replica settings (ConfigError: exit 2)."""
    from watermark.api.front import ServeHttp  # noqa: PLC0415 - see TYPE_CHECKING

    http = ServeHttp.open(
        args.http_host,
        auth_token_file=args.auth_token_file,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        tls_client_ca_file=args.tls_client_ca_file,
        insecure_no_auth=bool(args.insecure_no_auth),
        limits=HttpLimits(
            max_connections=args.max_connections,
            read_timeout_s=args.http_read_timeout,
            max_connections_per_peer=args.max_connections_per_peer,
            head_timeout_s=args.http_head_timeout,
        ),
    )
    if args.replicated:
        _replica_settings(args)
    return http


async def run(
    args: argparse.Namespace, etcd: EtcdSettings, http: ServeHttp, parts: ServeParts
) -> dict[str, Any]:
    """Serve until SIGTERM/SIGINT (see `watermark.service.runner`)."""
    from watermark.api.front import ApiFront  # noqa: PLC0415 - see TYPE_CHECKING
    from watermark.service.runner import PublisherRunner, RunnerSettings  # noqa: PLC0415

    settings = RunnerSettings(
        owner_id=args.owner_id,
        partitions=tuple(args.partitions),  # expanded by the option: orders/0-63 is 64 names
        register=args.register,
        take_over=args.take_over,
        publish_interval_s=args.publish_interval,
        idle_advance=not args.no_idle_advance,
        hold_ttl_s=args.hold_ttl,
        max_references=args.max_references,
        fence_timeout_s=args.fence_timeout,
        drain_timeout_s=args.drain_timeout,
        tick_interval_s=args.tick_interval,
        ticker_lease_ttl_s=args.ticker_lease_ttl,
        member_lease_ttl_s=args.member_lease_ttl,
        http_host=args.http_host,
        replicas=_replica_settings(args) if args.replicated else None,
        advertise_url=args.advertise_url,
        fleet_urls_given=args.fleet_urls is not None,
    )
    front = ApiFront(
        http,
        args.http_host,
        args.http_port,
        args.probe_port,
        announce=sys.stderr if sys.stderr.isatty() else None,
    )
    return await PublisherRunner(settings, etcd, front, parts).run()
