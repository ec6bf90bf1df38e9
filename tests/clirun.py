"""The CLI tests' two ways to run a command: in-process (`Cli`, the `cli` fixture of
`tests/conftest.py`) and as a user does (`run_cli`, a child process).

`cli("gcd", *argv)` / `cli("watermark", *argv)` calls the command's `main(argv)` in this
process, its output captured at the file-descriptor level (pytest's capfd), so a child
the command starts (`watermark namespace` runs `gcd` in one) is captured too; it returns a
`CliResult`. `run_cli` runs `python -m gcd ...` / `python -m watermark ...` to its end and
leaves the exit code to the test to judge. Each test file used to carry its own copies of
both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import structlog

__all__ = ["Cli", "CliResult", "Program", "run_cli"]

Program = Literal["gcd", "watermark"]


@dataclass(frozen=True)
class CliResult:
    """One in-process run: its exit code and what it wrote to stdout and stderr."""

    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        """The last line of stdout, parsed as JSON (the `--json` document)."""
        lines = self.out.strip().splitlines()
        try:
            return json.loads(lines[-1])
        except (IndexError, ValueError) as exc:
            raise AssertionError(
                f"no JSON document ends stdout (exit {self.code}): {exc}\n"
                f"stdout:\n{self.out}\nstderr:\n{self.err}"
            ) from exc


def _main(program: Program) -> Callable[[Sequence[str]], int]:
    if program == "gcd":
        from gcd.cli.main import main as gcd_main  # noqa: PLC0415 - only what is run

        return gcd_main
    if program == "watermark":
        from watermark.__main__ import main as watermark_main  # noqa: PLC0415

        return watermark_main
    raise ValueError(f"unknown program {program!r}: gcd or watermark")


class Cli:
    """`cli(program, *argv)`: run `program`'s `main(argv)` here; a `CliResult` of this run
    alone (output written before the call is dropped). The logging set-up `main()` makes
    is undone after each run, so runs in one test do not see each other's."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self._capfd = capfd

    def __call__(self, program: Program, *argv: str) -> CliResult:
        run = _main(program)
        self._capfd.readouterr()  # only this run's output
        try:
            code = run(list(argv))
        finally:
            structlog.reset_defaults()
        sys.stdout.flush()
        sys.stderr.flush()
        captured = self._capfd.readouterr()
        return CliResult(code=code, out=captured.out, err=captured.err)


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
