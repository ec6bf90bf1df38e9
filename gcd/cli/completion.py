"""`gcd completion bash|zsh|fish`: the shell completion script of `gcd` (`l0gc.completion`).

    gcd completion bash > ~/.local/share/bash-completion/completions/gcd   # or: eval "$(...)"

`watermark completion` prints the `watermark` command's; both can be sourced together.
"""

from __future__ import annotations

import argparse
import sys

from l0gc import exitcodes
from l0gc.completion import SHELLS, Tree, script, tree_of
from l0gc.options import CommandParser

__all__ = ["add_arguments", "command_tree", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd completion` options."""
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def command_tree() -> Tree:
    """Every command path of `gcd`, its flags and the words after it."""
    from gcd.cli.main import SUBCOMMANDS, _load  # noqa: PLC0415 - import cycle with main

    tree: Tree = {"gcd": (["--help", "--version"], list(SUBCOMMANDS), {})}
    for name in SUBCOMMANDS:
        module = _load(name)
        if isinstance(module, str):  # not installed here (e.g. pyspark): no flags to offer
            continue
        parser = CommandParser(prog=f"gcd {name}")
        module.add_arguments(parser)
        tree.update(tree_of(parser, f"gcd {name}"))
    return tree


def run(args: argparse.Namespace) -> int:
    """Print the script for `args.shell`."""
    sys.stdout.write(script(args.shell, command_tree(), "gcd"))
    return exitcodes.OK
