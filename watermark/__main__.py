"""The `watermark` command (`python -m watermark`, and the console script).

This is the composition root: `watermark namespace ...` is gcd's command (binding needs
the object store too, which is gcd's side: one implementation), every other command is
`watermark.cli`. Imports of gcd happen here only, and only for that command and for
`--version` (one version for the one distribution, the same `gcd --version` prints).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from watermark.exitcodes import quiet_broken_pipe


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `watermark` command; return its exit code (a reader of stdout that went
    away: `watermark.exitcodes.quiet_broken_pipe`)."""
    return quiet_broken_pipe(lambda: _main(list(sys.argv[1:] if argv is None else argv)))


def _main(arguments: list[str]) -> int:
    if arguments[:1] == ["--version"]:
        from gcd import __version__  # noqa: PLC0415 - one version for the one distribution

        sys.stdout.write(f"watermark {__version__}\n")
        return 0
    if arguments[:1] == ["namespace"]:
        from gcd.cli.main import main as gcd_main  # noqa: PLC0415 - only for this command

        return gcd_main(arguments, prog="watermark")
    from watermark.cli.main import main as watermark_main  # noqa: PLC0415 - keeps gcd out

    return watermark_main(arguments)


if __name__ == "__main__":
    sys.exit(main())
