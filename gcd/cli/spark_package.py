"""`gcd spark-package`: write l0gc as a zip for Spark's `--py-files` (see docs/spark.md).

    gcd spark-package --output l0gc-spark.zip [--main gcd-main.py] [--json]

The zip holds the `gcd` and `watermark` packages of this installation
(`gcd.spark.package.build_package`); pass it with `--py-files` to `spark-submit` or to
`gcd spark-sweep`/`spark-report`. Executors still need Python >= 3.11 with boto3,
pandas and pyarrow; the line printed says so. `--main` also writes the application
file for `spark-submit`. This is a build step: its flags have no environment
variables or config-file keys (an `output` key meant for spark-sweep must not
redirect it).
"""

from __future__ import annotations

import argparse
import sys

from gcd.cli.output import write_json
from gcd.spark.package import (
    EXECUTOR_REQUIREMENTS,
    STORE_REQUIREMENTS,
    build_package,
    write_launcher,
)
from l0gc import exitcodes

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--output (required), --main, --json."""
    parser.add_argument(
        "--output",
        required=True,
        metavar="ZIP",
        help="the zip to write, e.g. l0gc-spark.zip (required)",
    )
    parser.add_argument(
        "--main",
        metavar="FILE",
        help="also write the spark-submit application file here, e.g. gcd-main.py (default: none)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print what was written as JSON on stdout"
    )


def run(args: argparse.Namespace) -> int:
    """Write the zip (and the launcher); exit 0, or 2 when --output cannot be written."""
    summary = build_package(args.output)
    launcher = write_launcher(args.main) if args.main else None
    if args.json:
        document = summary.to_dict()
        document["main"] = None if launcher is None else str(launcher)
        write_json(document)
        return exitcodes.OK
    needs = ", ".join(EXECUTOR_REQUIREMENTS)
    stores = "; ".join(
        f"--storage {store} also {', '.join(extra)}" for store, extra in STORE_REQUIREMENTS.items()
    )
    sys.stdout.write(
        f"wrote {summary.path}: gcd + l0gc {summary.l0gc_version}, {summary.files} files, "
        f"{summary.bytes / 1024:.0f} KiB; ship it with --py-files {summary.path} "
        f"(executors need Python >= 3.11 with {needs}; {stores})\n"
    )
    if launcher is not None:
        sys.stdout.write(f"wrote {launcher}: the spark-submit application (runs gcd)\n")
    return exitcodes.OK
