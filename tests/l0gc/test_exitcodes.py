"""A reader of stdout that goes away (`gcd sweep | head -2`) ends a command quietly:
exit 141 (128 + SIGPIPE, as a shell reports for a GNU tool), no traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from l0gc import exitcodes


@pytest.mark.parametrize(
    "argv", [["gcd", "--help"], ["gcd", "--version"], ["watermark", "--version"]]
)
def test_a_closed_stdout_is_exit_141_without_a_traceback(argv: list[str]) -> None:
    """stdout is a pipe whose reader is closed before the command starts, so its first
    write fails (deterministically, unlike `| head`, which may read everything). Not
    `--help` of a subcommand: argparse swallows the error itself (exit 0, no output)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        module = {"gcd": "gcd.cli.main", "watermark": "watermark"}[argv[0]]
        runner = (
            f"import sys; from {module} import main; sys.exit(main(sys.argv[1:]))"
            if argv[0] == "gcd"
            else None
        )
        command = (
            [sys.executable, "-c", runner, *argv[1:]]
            if runner is not None
            else [sys.executable, "-m", module, *argv[1:]]
        )
        done = subprocess.run(
            command, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False
        )
    finally:
        os.close(write_end)
    assert done.returncode == exitcodes.BROKEN_PIPE, done.stderr
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr
