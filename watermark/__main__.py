"""The `watermark` command (`python -m watermark`, and the console script).

The composition root: every command is `watermark.cli`'s but `watermark namespace`, the
old spelling of `gcd namespace` (binding needs the object store, which is gcd's side).
That alias runs `gcd` in a child process, so neither package imports the other.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence

from l0gc import __version__
from l0gc.exitcodes import quiet_broken_pipe

_FORWARDED = (signal.SIGTERM, signal.SIGHUP)
_GCD_AS_WATERMARK = (
    "import sys; from gcd.cli.main import main; sys.exit(main(sys.argv[1:], prog='watermark'))"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `watermark` command; return its exit code (a reader of stdout that went
    away: `l0gc.exitcodes.quiet_broken_pipe`)."""
    return quiet_broken_pipe(lambda: _main(list(sys.argv[1:] if argv is None else argv)))


def _main(arguments: list[str]) -> int:
    if arguments[:1] == ["--version"]:
        sys.stdout.write(f"watermark {__version__}\n")
        return 0
    if arguments[:1] == ["namespace"]:
        return _gcd_namespace(arguments)
    from watermark.cli.main import main as watermark_main  # noqa: PLC0415 - light --version

    return watermark_main(arguments)


def _gcd_namespace(arguments: list[str]) -> int:
    """`gcd namespace ARGS` in a child process, its exit code ours. A stop signal sent to
    this process goes on to the child; a Ctrl-C at a terminal reaches both, so here it
    only waits for the child to end as it decides (gcd stops cleanly on the first)."""
    sys.stdout.flush()
    argv = [sys.executable, "-c", _GCD_AS_WATERMARK, *arguments]
    child = subprocess.Popen(argv)  # noqa: S603 - our own interpreter and arguments

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    previous = {number: signal.signal(number, forward) for number in _FORWARDED}
    try:
        while True:
            try:
                code = child.wait()
                return code if code >= 0 else 128 - code  # killed by a signal: as a shell says
            except KeyboardInterrupt:
                continue
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


if __name__ == "__main__":
    sys.exit(main())
