"""What every `watermark` command shares: `--json`, `--log-level`, the JSON version.

Every command takes `--json`, whose output is one JSON object carrying ``"version"``
(`OUTPUT_VERSION`); logs go to stderr at `--log-level` (info for `serve`, warning for
the admin commands), so stdout carries only the command's output.
"""

from __future__ import annotations

from l0gc.logs import LEVEL_NAMES
from l0gc.options import Option, boolean, choice

__all__ = ["ADMIN_OPTIONS", "OUTPUT_VERSION", "output_options"]

OUTPUT_VERSION = 1


def output_options(log_level: str) -> tuple[Option, ...]:
    """`--json` and `--log-level` (default `log_level`): the first two options of every
    command, shown in the "output" group of its help."""
    return (
        Option("--json", boolean, False, "print one JSON object on stdout", switch=True),
        Option(
            "--log-level",
            choice(*LEVEL_NAMES),
            log_level,
            "log level on stderr: debug, info, warning or error",
            "LEVEL",
        ),
    )


ADMIN_OPTIONS = output_options("warning")
"""The options of an admin command that has no others."""
