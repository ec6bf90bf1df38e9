"""`gcd pause` and `gcd resume`: stop and restart deletion for a whole namespace.

Design notes: docs/internals/cli.md, `gcd.cli.pause`.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from typing import Any

from gcd.cli.options import QUIET_LOG_LEVEL
from gcd.cli.output import write_json
from gcd.cli.reading import open_etcd
from gcd.service.reader import empty_namespace
from l0gc import exitcodes
from l0gc.display import printable
from l0gc.etcd.settings import add_etcd_arguments
from l0gc.options import Option, add_config_option, add_options, boolean, text

__all__ = ["OUTPUT_VERSION", "PAUSE_OPTIONS", "RESUME_OPTIONS", "add_arguments", "run"]

OUTPUT_VERSION = 1

RESUME_OPTIONS: tuple[Option, ...] = (
    Option(
        "--json", boolean, False, "print the outcome as one JSON document on stdout", switch=True
    ),
    QUIET_LOG_LEVEL,
)
PAUSE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--reason",
        text,
        None,
        "why GC is paused, shown by `gcd status` and in sweeper "
        "logs (default: 'paused with gcd pause by USER@HOST')",
        "TEXT",
    ),
    *RESUME_OPTIONS,
)


def _command(parser: argparse.ArgumentParser) -> str:
    return parser.prog.rsplit(" ", 1)[-1]


def _options(command: str) -> tuple[Option, ...]:
    return PAUSE_OPTIONS if command == "pause" else RESUME_OPTIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gcd pause` (with --reason) or `gcd resume`, by the parser's prog."""
    add_config_option(parser)
    add_options(
        parser, _options(_command(parser)), "pause" if _command(parser) == "pause" else "output"
    )
    add_etcd_arguments(parser)


def _default_reason() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name (e.g. a container with an unnamed uid)
        user = "unknown"
    return f"paused with gcd pause by {user}@{socket.gethostname()}"


async def run(args: argparse.Namespace) -> int:
    """Set or clear `{ns}/gc/paused`; report what changed."""
    command = str(args.command)
    async with open_etcd(args, _options(command)) as (kv, store):
        previous = await store.get_paused()
        if command == "pause" and previous is None and await kv.get(store.epoch_key) is None:
            # Nothing initialised there: most likely a typo, and a pause written there
            # would pause nothing while the operator believes GC stopped.
            raise empty_namespace(store.namespace)
        if command == "pause":
            reason = args.reason or _default_reason()
            await store.set_paused(reason)
            doc: dict[str, Any] = {"paused": True, "reason": reason}
        else:
            await store.clear_paused()
            doc = {"paused": False}
    doc = {
        "version": OUTPUT_VERSION,
        "namespace": store.namespace,
        **doc,
        "was_paused": previous is not None,
        "previous_reason": previous,
    }
    if args.json:
        write_json(doc)
    else:
        sys.stdout.write(_text(command, doc))
    return exitcodes.OK


def _text(command: str, doc: dict[str, Any]) -> str:
    # The reasons come from etcd (or the command line): escape what a terminal would obey.
    ns, previous = doc["namespace"], doc["previous_reason"]
    previous = None if previous is None else printable(previous)
    if command == "pause":
        lines = [
            f"GC paused for {ns}: {printable(doc['reason'])}",
            "Sweepers of this namespace stop deleting within one DeleteObjects batch.",
            "Undo with `gcd resume`.",
        ]
        if previous is not None:
            lines.append(f"(it was already paused: '{previous}'; the reason is replaced)")
    elif previous is None:
        lines = [f"GC was not paused for {ns}; nothing changed."]
    else:
        lines = [
            f"GC resumed for {ns} (was paused: {previous}).",
            "Sweepers delete again: daemons within seconds, gcd sweep on its next run.",
        ]
    return "\n".join(lines) + "\n"
