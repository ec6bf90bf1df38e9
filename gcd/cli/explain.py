"""`gcd explain`: why is this object still there, or who deleted it?

Design notes: docs/internals/cli.md, `gcd.cli.explain`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gcd.cli.explain_text import render_text
from gcd.cli.options import resolve
from gcd.cli.output import write_json
from gcd.cli.sweep import COMMON_OPTIONS, add_round_arguments, round_setup
from gcd.explainer.answer import ExplainReport, explain_keys, read_gc_facts
from gcd.rules.admission import UNREACHABLE
from gcd.service.reader import open_reader
from l0gc import exitcodes
from l0gc.display import printable
from l0gc.errors import ConfigError
from l0gc.logs import configure_logging
from l0gc.options import Option, add_options, boolean, text

__all__ = ["EXPLAIN_OPTIONS", "add_arguments", "explain", "read_keys", "run"]

MAX_KEYS = 1_000_000
MAX_KEY_BYTES = 1024 * 4  # S3 keys are at most 1024 bytes; a longer line is no key

EXPLAIN_OPTIONS: tuple[Option, ...] = (
    Option(
        "--from-file", text, None, "read keys from this file, one per line ('-': stdin)", "FILE"
    ),
    Option(
        "--json",
        boolean,
        False,
        "print one JSON document: an object per key with "
        "key, verdict, reason, summary and the facts",
        switch=True,
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd explain` options: the keys, then the `gcd sweep` options it uses (the others
    are accepted, not listed: `gcd.cli.sweep.SWEEPER_ONLY`)."""
    parser.add_argument("keys", nargs="*", metavar="KEY", help="object keys to explain")
    add_round_arguments(parser, reader=True)
    add_options(parser, EXPLAIN_OPTIONS, "keys and output")


def read_keys(args: argparse.Namespace, stdin: Any = None) -> list[str]:
    """The keys of the arguments, `--from-file`, or stdin (see the module docstring)."""
    keys = list(args.keys)
    stream = sys.stdin if stdin is None else stdin
    lines: list[str] = []
    if args.from_file == "-" or (args.from_file is None and not keys and not stream.isatty()):
        lines = stream.read().splitlines()
    elif args.from_file is not None:
        try:
            lines = (
                Path(args.from_file)
                .read_text(encoding="utf-8", errors="surrogateescape")
                .splitlines()
            )
        except OSError as exc:
            raise ConfigError(
                f"--from-file {args.from_file}: cannot be read "
                f"({exc.strerror}); give a file of keys, one per line"
            ) from exc
    keys += [line for line in lines if line.strip()]
    if not keys:
        raise ConfigError(
            "no key to explain: give KEY arguments, --from-file FILE, or keys "
            "on stdin (one per line)"
        )
    if len(keys) > MAX_KEYS:
        raise ConfigError(f"{len(keys)} keys given; explain at most {MAX_KEYS} per call")
    too_long = next(
        (k for k in keys if len(k.encode("utf-8", "surrogateescape")) > MAX_KEY_BYTES), None
    )
    if too_long is not None:
        raise ConfigError(
            f"key {printable(too_long[:60])}... is longer than {MAX_KEY_BYTES} "
            "bytes: no object store holds such a key"
        )
    return keys


async def explain_from_args(args: argparse.Namespace, keys: Sequence[str]) -> ExplainReport:
    """Open what the flags name (`gcd.service.reader.open_reader`), read once, explain `keys`."""
    setup = round_setup(args)
    layout = setup.round.layout
    prefix = None if args.journal_prefix is None else args.journal_prefix.strip("/")
    async with open_reader(setup.etcd, setup.store, layout.root) as reader:
        objects, source = reader.bucket(), reader.source
        store = None if source is None else source.store
        facts = await read_gc_facts(
            store,
            source,
            grace_s=setup.round.grace_s,
            override=setup.safe_epoch_override,
            journal_prefix=prefix,
        )
        journal = setup.journal.segments(objects, layout.root)
        return await explain_keys(
            keys, layout, facts, objects=objects, journal=journal, store=store
        )


async def explain(
    keys: Sequence[str], **options: str | int | float | bool | None
) -> list[dict[str, Any]]:
    """`gcd explain --json` for programs: one dict per key of `keys`, in order (key,
    verdict, reason, summary and the facts; docs/python-api.md).

    `options` are the command's flags with underscores, e.g. ``bucket="my-l0-bucket",
    etcd="etcd-0:2379", namespace="/l0gc/prod", journal_dir="/var/lib/l0gc/journal",
    grace="10m"``; True turns a switch on, None or False leaves a flag out. Unset ones come
    from the ``L0GC_*`` environment and the ``config`` file, as for the command.
    Raises `ConfigError` for a bad option, `EtcdUnavailable` / `StorageError` when etcd or
    the store cannot be read.
    """
    parser = argparse.ArgumentParser(prog="gcd explain", add_help=False, exit_on_error=False)
    add_arguments(parser)
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        argv += [flag] if value is True else [flag, str(value)]
    try:
        args, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise ConfigError(f"gcd.explain: {exc}") from exc
    if unknown:
        raise ConfigError(
            f"gcd.explain: unknown options {unknown}; use the flags of "
            "`gcd explain --help` with underscores"
        )
    resolve(args, (*COMMON_OPTIONS, *EXPLAIN_OPTIONS))
    if not keys:
        raise ConfigError("gcd.explain: no key to explain")
    report = await explain_from_args(args, list(keys))
    return [answer.to_dict() for answer in report.explanations]


async def run(args: argparse.Namespace) -> int:
    """Explain the keys; see the module docstring."""
    resolve(args, (*COMMON_OPTIONS, *EXPLAIN_OPTIONS))
    configure_logging(args.log_level or "warning")
    keys = read_keys(args)
    report = await explain_from_args(args, keys)
    if args.json:
        write_json(report.to_dict())
    else:
        sys.stdout.write(render_text(report))
    refused = report.facts.refused
    if refused is not None and refused.startswith(UNREACHABLE):
        return exitcodes.ETCD_UNREACHABLE
    return exitcodes.OK
