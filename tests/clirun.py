"""Running the two commands as a user does: `python -m gcd ...` / `python -m watermark ...`
in a child process, output captured as text, the exit code left to the test to judge.

One helper for the CLI tests' subprocess runs (each test file used to carry its own
copy); the in-process runs (`main(argv)` with capsys) stay with their tests.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["run_cli"]


def run_cli(
    program: str,
    *argv: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m PROGRAM ARGV` (`gcd` or `watermark`) to its end; never raises on the
    exit code. `env` replaces the environment (None: this process's)."""
    return subprocess.run(
        [sys.executable, "-m", program, *argv],
        env=None if env is None else dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
