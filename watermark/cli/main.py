"""`watermark`: the parser of every subcommand, option resolution, dispatch, exit codes.

Design notes: docs/internals/publisher.md, `watermark.cli.main`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from l0gc import exitcodes
from l0gc.completion import SHELLS, script, tree_of
from l0gc.contract.kv import KV
from l0gc.errors import L0gcError
from l0gc.etcd.settings import ETCD_OPTIONS, EtcdSettings, add_etcd_arguments, open_kv
from l0gc.etcd.store import WatermarkStore
from l0gc.logs import configure_logging
from l0gc.options import CommandParser, Option, add_config_option, add_options, resolve
from watermark.cli import epoch, partition, repair, serve
from watermark.cli.output import ADMIN_OPTIONS, OUTPUT_VERSION

if TYPE_CHECKING:  # imported by `serve` only: the admin commands start without aiohttp
    from watermark.api.front import ServeHttp
    from watermark.service.runner import ServeParts

__all__ = ["COMMAND_OPTIONS", "Invocation", "build_parser", "main", "parse"]

Command = Callable[[argparse.Namespace, WatermarkStore, KV], Awaitable[dict[str, Any]]]
Writer = Callable[[argparse.Namespace, dict[str, Any]], None]

# Each command's options (the etcd ones, `ETCD_OPTIONS`, come on top).
COMMAND_OPTIONS: dict[str, tuple[Option, ...]] = {
    "serve": serve.SERVE_OPTIONS,
    "epoch get": epoch.GET_OPTIONS,
    "epoch advance": epoch.ADVANCE_OPTIONS,
    "partition register": ADMIN_OPTIONS,
    "partition deregister": partition.DEREGISTER_OPTIONS,
    "partition list": ADMIN_OPTIONS,
    "partition show": ADMIN_OPTIONS,
    "partition repair": (*ADMIN_OPTIONS, *repair.OPTIONS),
}
# Config-file keys some watermark command takes: one file serves every command.
CONFIG_KEYS = frozenset(
    o.dest for table in (*COMMAND_OPTIONS.values(), ETCD_OPTIONS) for o in table
)
# The admin commands: what each does with etcd, and how its result is printed as text.
_COMMANDS: dict[str, tuple[Command, Writer]] = {
    "epoch get": (epoch.get, epoch.write_text),
    "epoch advance": (epoch.advance, epoch.write_text),
    "partition register": (partition.register, partition.write_records),
    "partition deregister": (partition.deregister_partitions, partition.write_deregistered),
    "partition list": (partition.list_partitions, partition.write_records),
    "partition show": (partition.show, partition.write_records),
    "partition repair": (repair.run, lambda args, result: repair.write_text(result)),
}


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
        prog="watermark",
        description="l0gc watermark publisher service and admin commands.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _command_parser(commands, "serve", serve.SERVE_OPTIONS, serve.HELP)
    epochs = commands.add_parser("epoch", help="read or advance the cluster epoch")
    epoch_commands = epochs.add_subparsers(dest="action", required=True, metavar="ACTION")
    _command_parser(epoch_commands, "get", epoch.GET_OPTIONS, "print the cluster epoch")
    _command_parser(
        epoch_commands,
        "advance",
        epoch.ADVANCE_OPTIONS,
        "advance the cluster epoch by exactly 1 (CAS)",
    )
    commands.add_parser(
        "namespace",
        help="bind the namespace to its bucket and root, or show the binding "
        "(`watermark namespace bind --help`)",
        add_help=False,
    )
    completion = commands.add_parser(
        "completion", help="print the shell completion script of `watermark`"
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    partitions = commands.add_parser("partition", help="manage partition records")
    part_commands = partitions.add_subparsers(dest="action", required=True, metavar="ACTION")
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
        part_commands,
        "repair",
        COMMAND_OPTIONS["partition repair"],
        "write a validated partition record by compare-and-swap (never lowers M(p) without "
        "--force)",
    ).add_argument("name", metavar="NAME", help="partition name")
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
    if command != "serve":
        return Invocation(command, args, EtcdSettings.from_args(args, env, required=False), None)
    if args.owner_id is None:  # before the etcd settings, as always
        serve.default_owner_id(args)
    etcd = EtcdSettings.from_args(args, env, required=True)
    return Invocation(command, args, etcd, serve.settle(args))  # files before etcd


async def _run(invocation: Invocation, parts: ServeParts) -> dict[str, Any]:
    args, settings = invocation.args, invocation.etcd
    if invocation.http is not None:  # `serve`: the runner opens etcd itself
        return await serve.run(args, settings, invocation.http, parts)
    run_command = _COMMANDS[invocation.command][0]
    kv = await open_kv(settings)
    try:
        return await run_command(args, parts.store_class(kv, settings.namespace), kv)
    finally:
        await kv.close()


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
    if args.command == "completion":
        tree = tree_of(build_parser(), "watermark", top=("--version",))
        sys.stdout.write(script(args.shell, tree, "watermark"))
        return exitcodes.OK
    try:
        invocation = _settle(args, None)  # bad values, token or TLS files: exit 2, no etcd
        configure_logging(args.log_level)
        if parts is None:
            from watermark.service.runner import ServeParts  # noqa: PLC0415 - see TYPE_CHECKING

            parts = ServeParts()
        result = asyncio.run(_run(invocation, parts))
    except (L0gcError, KeyboardInterrupt) as exc:
        code = exitcodes.watermark_exit_code(exc)
        interrupted = isinstance(exc, KeyboardInterrupt)
        message = "interrupted (Ctrl-C); stopped cleanly" if interrupted else str(exc)
        if getattr(args, "json", None) is True:  # the flag, or resolved (the first option)
            kind = "interrupted" if interrupted else type(exc).__name__  # as gcd writes it
            error = {
                "version": OUTPUT_VERSION,
                "error": kind,
                "exit_code": code,
                "message": message,
            }
            sys.stdout.write(json.dumps(error) + "\n")
        sys.stderr.write(f"watermark {args.command}: {'' if interrupted else 'error: '}{message}\n")
        return code
    if args.json:
        sys.stdout.write(json.dumps({"version": OUTPUT_VERSION, **result}, sort_keys=True) + "\n")
    elif invocation.command in _COMMANDS:  # `serve` prints nothing on stdout without --json
        _COMMANDS[invocation.command][1](args, result)
    return exitcodes.OK
