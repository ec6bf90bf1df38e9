"""Exit codes of every l0gc command, and the one place exceptions are mapped to them.

Design notes: docs/internals/kernel.md, `l0gc.exitcodes`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Final

from l0gc.errors import (
    ConfigError,
    EtcdUnavailable,
    L0gcError,
    PartitionNotRegistered,
    WatermarkUnavailable,
)

__all__ = [
    "BLOCKED",
    "BROKEN_PIPE",
    "ERROR_NAMES",
    "ETCD_UNREACHABLE",
    "INTERRUPTED",
    "OK",
    "PARTIAL_FAILURE",
    "USAGE",
    "error_document",
    "exit_code_for",
    "quiet_broken_pipe",
    "watermark_exit_code",
]

OK: Final = 0
PARTIAL_FAILURE: Final = 1
USAGE: Final = 2
BLOCKED: Final = 3
ETCD_UNREACHABLE: Final = 4
INTERRUPTED: Final = 130
BROKEN_PIPE: Final = 141


ERROR_NAMES: Final = {
    PARTIAL_FAILURE: "failed",
    USAGE: "usage",
    BLOCKED: "blocked",
    ETCD_UNREACHABLE: "etcd_unreachable",
    INTERRUPTED: "interrupted",
}
"""The `"error"` of the JSON document a command given `--json` prints when it fails."""


def quiet_broken_pipe(run: Callable[[], int]) -> int:
    """`run()`, flushing stdout; a reader of stdout that went away ends the command with
    `BROKEN_PIPE` and no traceback, stdout then pointed at /dev/null so the
    interpreter's last flush has nowhere to fail either."""
    try:
        code = run()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    return code


def error_document(code: int, message: str) -> dict[str, object]:
    """What a command given `--json` prints on stdout when it stops on an error."""
    return {
        "version": 1,
        "error": ERROR_NAMES.get(code, "failed"),
        "exit_code": code,
        "message": message,
    }


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for an exception a command let escape; None: not ours, re-raise it."""
    if isinstance(exc, ConfigError):
        return USAGE
    if isinstance(exc, EtcdUnavailable):
        return ETCD_UNREACHABLE
    if isinstance(exc, WatermarkUnavailable):
        return BLOCKED
    if isinstance(exc, L0gcError):  # l0gc.errors.StorageError too
        return PARTIAL_FAILURE
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return None


def watermark_exit_code(exc: BaseException) -> int:
    """The exit code of the `watermark` command for an error it stopped on."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(exc, EtcdUnavailable):
        return ETCD_UNREACHABLE
    if isinstance(exc, ConfigError) and not isinstance(exc, PartitionNotRegistered):
        return USAGE
    return PARTIAL_FAILURE
