"""The `watermark` command (`python -m watermark`, and the console script).

The composition root: every command is `watermark.cli`'s but `watermark namespace`, the
old spelling of `gcd namespace` (binding needs the object store, which is gcd's side).
That alias runs `gcd` in a child process, so neither package imports the other.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from l0gc import __version__
from l0gc.exitcodes import quiet_broken_pipe

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
        sys.stdout.flush()
        argv = [sys.executable, "-c", _GCD_AS_WATERMARK, *arguments]
        return subprocess.run(argv, check=False).returncode  # noqa: S603 - our own argv
    from watermark.cli.main import main as watermark_main  # noqa: PLC0415 - light --version

    return watermark_main(arguments)


if __name__ == "__main__":
    sys.exit(main())
