"""Exit codes of every l0gc command, and the one place exceptions are mapped to them.

    0  OK               the command did what it was asked
    1  PARTIAL_FAILURE  it ran, but some work failed (e.g. deletes that kept failing); for
                        `watermark`: it failed (etcd unreachable, not registered, CAS conflict)
    2  USAGE            bad flags, env vars, config file, or a command that is not installed;
                        a bucket the sweeping commands cannot list at start (S3 preflight)
    3  BLOCKED          (gcd) a safety rail stopped it: M undefined, M regression, M above
                        the cluster epoch, GC paused, etcd unreachable
  130  INTERRUPTED      Ctrl-C (`gcd sweep` also on SIGTERM; `gcd daemon` exits 0 on SIGTERM,
                        the way Kubernetes stops it)

`exit_code_for` is gcd's mapping; `watermark_exit_code` the `watermark` command's, which
has no BLOCKED (it deletes nothing) and counts an unregistered partition as a failure of
the run, not a usage error.
"""

from __future__ import annotations

from typing import Final

from watermark.errors import ConfigError, L0gcError, PartitionNotRegistered, WatermarkUnavailable

__all__ = [
    "BLOCKED",
    "INTERRUPTED",
    "OK",
    "PARTIAL_FAILURE",
    "USAGE",
    "exit_code_for",
    "watermark_exit_code",
]

OK: Final = 0
PARTIAL_FAILURE: Final = 1
USAGE: Final = 2
BLOCKED: Final = 3
INTERRUPTED: Final = 130


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for an exception a command let escape; None: not ours, re-raise it."""
    if isinstance(exc, ConfigError):
        return USAGE
    if isinstance(exc, WatermarkUnavailable):
        return BLOCKED
    if isinstance(exc, L0gcError):  # gcd.errors.StorageError too
        return PARTIAL_FAILURE
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return None


def watermark_exit_code(exc: BaseException) -> int:
    """The exit code of the `watermark` command for an error it stopped on."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(exc, ConfigError) and not isinstance(exc, PartitionNotRegistered):
        return USAGE
    return PARTIAL_FAILURE
