"""`gcd status`: where garbage collection stands, from one consistent etcd read
(`gcd.status.read`), printed as text or JSON.

Design notes: docs/internals/status.md, `gcd.status.report`.
"""

from __future__ import annotations

import argparse
import sys
import time

from gcd.cli.options import QUIET_LOG_LEVEL
from gcd.cli.output import write_json
from gcd.cli.reading import open_etcd
from gcd.cli.status_text import render_text
from gcd.explainer.answer import ExplainReport
from gcd.status.read import read_status
from l0gc import exitcodes
from l0gc.etcd.settings import add_etcd_arguments
from l0gc.options import Option, add_config_option, add_options, boolean

__all__ = [
    "STATUS_OPTIONS",
    "add_arguments",
    "run",
]


STATUS_OPTIONS: tuple[Option, ...] = (
    Option("--all", boolean, False, "list every partition, not only those pinning M", switch=True),
    Option(
        "--json", boolean, False, "print the status as one JSON document on stdout", switch=True
    ),
    Option(
        "--why",
        boolean,
        False,
        "also explain the oldest kept key (`gcd explain` on the "
        "lowest epoch above M, looked for under the bound S3 root)",
        switch=True,
    ),
    QUIET_LOG_LEVEL,
)


def _explain_text(answer: ExplainReport) -> str:
    from gcd.cli.explain_text import render_text  # noqa: PLC0415 - with --why only

    return render_text(answer)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd status` options."""
    add_config_option(parser)
    add_options(parser, STATUS_OPTIONS, "output")
    add_etcd_arguments(parser)


async def run(args: argparse.Namespace) -> int:
    """Read etcd once, report; 3 when blocked."""
    async with open_etcd(args, STATUS_OPTIONS) as (kv, store):
        now = time.time()
        explain = _explain_text if args.why else None
        report = await read_status(store, kv, now, include_all=args.all, explain=explain)
    if args.json:
        document = report.to_dict()
        if document["why"] is not None:
            document["why"].pop("text", None)
        write_json(document)
    else:
        sys.stdout.write(render_text(report, now))
        if report.why is not None:
            sys.stdout.write("\nwhy            the oldest kept key:\n" + report.why["text"])
        elif args.why:
            sys.stdout.write("\nwhy            no key above M is kept\n")
    return exitcodes.BLOCKED if report.blocked or report.refused else exitcodes.OK
