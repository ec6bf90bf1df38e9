"""`gcd`: the entry point. Dispatches to one module per subcommand, imported lazily.

`gcd --help` and `gcd --version` import nothing but this module, argparse-free: what a
command needs (asyncio, the options, its own module) is imported once it is chosen
(bench/startup.py measures it; tests/gcd/cli/test_startup.py guards it).

Design notes: docs/internals/cli.md, `gcd.cli.main`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Final, NamedTuple

from l0gc import __version__, exitcodes

if TYPE_CHECKING:
    import argparse

__all__ = ["EXAMPLES", "SUBCOMMANDS", "Subcommand", "freeze_opened", "load_frozen", "main"]


class Subcommand(NamedTuple):
    """Where a subcommand lives and its one-line help (a NamedTuple, not a dataclass:
    `gcd --help` does not import dataclasses and inspect for it)."""

    module: str
    help: str


SUBCOMMANDS: Final[dict[str, Subcommand]] = {
    "sweep": Subcommand("gcd.cli.sweep", "run one sweeper round (list, decide, delete) and exit"),
    "daemon": Subcommand("gcd.cli.daemon", "run sweeper rounds forever; /metrics /healthz /readyz"),
    "status": Subcommand("gcd.cli.status", "show cluster epoch, global M, lag, pinning partitions"),
    "pause": Subcommand("gcd.cli.pause", "pause every sweeper of a namespace (etcd gc/paused)"),
    "resume": Subcommand("gcd.cli.pause", "resume sweeping after `gcd pause`"),
    "namespace": Subcommand("gcd.cli.namespace", "bind a namespace to its bucket and root"),
    "journal": Subcommand("gcd.cli.journal", "verify the deletion journal; show who deleted a key"),
    "restore": Subcommand("gcd.cli.restore", "bring back objects deleted within the undo window"),
    "explain": Subcommand("gcd.cli.explain", "why is an object still there, or who deleted it"),
    "scrub": Subcommand("gcd.cli.scrub", "HEAD every referenced key; find lost and stranded keys"),
    "demo": Subcommand("gcd.cli.demo", "run it all here: etcd, S3, Azure or GCS, writers, GC"),
    "simulate": Subcommand("gcd.cli.simulate", "deterministic simulation of writers and GC"),
    "chaos": Subcommand("gcd.cli.chaos", "real processes under a nemesis, checked: etcd, S3, GC"),
    "spark-sweep": Subcommand("gcd.cli.spark", "sweep a huge bucket with PySpark"),
    "spark-report": Subcommand("gcd.cli.spark", "report garbage by epoch and prefix with PySpark"),
    "spark-package": Subcommand("gcd.cli.spark_package", "zip l0gc for Spark --py-files"),
    "dev": Subcommand("gcd.cli.dev", "start a local etcd for the guides (gcd dev etcd)"),
    "completion": Subcommand("gcd.cli.completion", "print a bash, zsh or fish completion script"),
}


EXAMPLES: Final[dict[str, str]] = {
    "sweep": """examples:
  gcd sweep --bucket my-l0-bucket --etcd etcd-0:2379 --namespace /l0gc/prod --dry-run
  gcd sweep --bucket my-l0-bucket --shard-index 0 --shard-count 4 --json
  gcd sweep --bucket my-l0-bucket --safe-epoch 1021   # M by hand, still checked in etcd""",
    "daemon": """examples:
  gcd daemon --bucket my-l0-bucket --etcd etcd-0:2379 --namespace /l0gc/prod
  gcd daemon --bucket my-l0-bucket --shard-index 0 --shard-count 4 --http-port 9464
  curl -s localhost:9464/metrics | grep l0gc_sweeper_epoch_lag""",
    "status": """examples:
  gcd status --etcd etcd-0:2379 --namespace /l0gc/prod
  gcd status --all                 # every partition (L0GC_ETCD, L0GC_NAMESPACE set)
  gcd status --json | jq .safe_epoch""",
    "pause": """examples:
  gcd pause --reason "incident 4711: reconciler replaying"
  gcd status | grep -A1 '^gc '""",
    "resume": """examples:
  gcd resume""",
    "namespace": """examples:
  watermark namespace bind --bucket my-l0-bucket --root level_zero/data
  watermark namespace show""",
    "journal": """examples:
  gcd journal verify --journal-dir /var/lib/l0gc/journal
  gcd journal show --journal-dir /var/lib/l0gc/journal --key level_zero/data/007/1021/x""",
    "restore": """examples:
  gcd pause --reason "wrong M(p) on orders/2"
  gcd restore --bucket my-l0-bucket --journal-dir /var/lib/l0gc/journal --since 2026-11-22T02:00Z
  gcd restore --bucket my-l0-bucket --journal-prefix l0gc-audit/journal --key KEY --dry-run""",
    "explain": """examples:
  gcd explain --bucket my-l0-bucket level_zero/data/007/000000000000001030/seg-a
  gcd explain --bucket my-l0-bucket --journal-dir /var/lib/l0gc/journal --from-file keys.txt
  gcd explain --bucket my-l0-bucket --json KEY | jq '.keys[0].waiting_on'""",
    "scrub": """examples:
  gcd scrub --bucket my-l0-bucket --journal-dir /var/lib/l0gc/journal
  gcd scrub --bucket my-l0-bucket --skip-listing --json | jq '.missing'
  gcd scrub --bucket my-l0-bucket --every 1h --metrics-port 9465""",
    "demo": """examples:
  gcd demo                          # etcd, S3, writers and GC here, about a minute
  gcd demo --duration 2m --json""",
    "dev": """examples:
  gcd dev etcd                      # etcd on 127.0.0.1:2379 until Ctrl-C
  export L0GC_ETCD=127.0.0.1:2379 L0GC_NAMESPACE=/l0gc/prod""",
    "completion": """examples:
  eval "$(gcd completion bash)"     # in ~/.bashrc
  gcd completion zsh > ~/.zfunc/_gcd  # a directory in $fpath""",
}
"""`--help` epilogs: a few command lines to start from."""


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [
        "usage: gcd [--version] <command> [options]",
        "",
        "Epoch-based garbage collector for temporary L0 objects in object storage.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {sub.help}" for name, sub in SUBCOMMANDS.items()),
        "",
        "Run `gcd <command> --help` for a command's options and examples.",
        "Exit codes: 0 ok, 1 partial failure, 2 usage error, 3 blocked by a safety rail,",
        "4 etcd unreachable, 130 interrupted (Ctrl-C; `gcd daemon` exits 0 on SIGTERM).",
        "",
        "examples:",
        "  gcd dev etcd                      # a local etcd for the guides",
        "  gcd status --etcd 127.0.0.1:2379 --namespace /l0gc/prod",
        "  gcd sweep --bucket my-l0-bucket --dry-run",
        '  eval "$(gcd completion bash)"     # shell completion',
    ]
    return "\n".join(lines) + "\n"


def _fail(message: str) -> int:
    sys.stderr.write(
        f"usage: gcd [--version] <command> [options]\ngcd: error: {message}\n"
        "Run `gcd --help` for the list of commands.\n"
    )
    return exitcodes.USAGE


def _load(name: str) -> ModuleType | str:
    """The subcommand's module, or a message saying why it cannot be used."""
    sub = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(sub.module)
    except ModuleNotFoundError as exc:
        if exc.name == sub.module:
            return f"command {name!r} is not available in this installation ({sub.module} missing)"
        return (
            f"command {name!r} needs the Python package {exc.name!r}, which is not installed; "
            "install the matching extra, e.g. pip install 'l0gc[spark]'"
        )
    if not callable(getattr(module, "add_arguments", None)) or not callable(
        getattr(module, "run", None)
    ):
        return f"command {name!r}: {sub.module} lacks add_arguments()/run()"
    return module


def main(argv: Sequence[str] | None = None, *, prog: str = "gcd") -> int:
    """Run `gcd` with `argv` (default sys.argv[1:]); return the exit code. `prog` names
    the command in messages (`watermark namespace` runs this as prog "watermark").

    Without `argv` (the `gcd` script, `python -m gcd`) the process ends when this returns:
    what start-up loaded stays frozen (`_main`), so the interpreter's last collections
    at exit do not walk it all (an empty `gcd sweep`'s exit: 0.19 -> 0.02 s of CPU at a
    load of 9, `python -m bench.startup --budget`)."""
    return exitcodes.quiet_broken_pipe(lambda: _main(argv, prog))


def _main(argv: Sequence[str] | None, prog: str) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        return _fail("no command given")
    first = args[0]
    if first in {"-h", "--help", "help"}:
        sys.stdout.write(_usage())
        return exitcodes.OK
    if first == "--version":
        sys.stdout.write(f"gcd {__version__}\n")
        return exitcodes.OK
    if first not in SUBCOMMANDS:
        import difflib  # noqa: PLC0415 - only for a mistyped command

        close = difflib.get_close_matches(first, SUBCOMMANDS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return _fail(f"unknown command {first!r}; {hint}choose one of {', '.join(SUBCOMMANDS)}")
    # Start-up (the command's module imported, its parser built, its arguments read,
    # then its `RUN_IMPORTS`: what its `run` imports and `--help` does not) runs with the
    # cyclic collector off, and what it loaded is then frozen: importing allocates
    # hundreds of thousands of objects that all stay, which collections would walk again
    # and again for nothing (start-up's, then every full collection of a round's,
    # bench/RESULTS.md section 21). In-process callers get them back (thawed) when the
    # command returns; a process that ends then (`main()` without `argv`) leaves them
    # frozen, so its exit neither walks nor frees them one by one.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            parsed = _parse(first, args, prog)
            if isinstance(parsed, tuple):  # what `run` imports and `--help` does not
                from l0gc.process.tls import defer_aiohttp_ca_load  # noqa: PLC0415

                defer_aiohttp_ca_load()  # ~35 ms of CPU less for who never uses them
                for name in getattr(parsed[0], "RUN_IMPORTS", ()):
                    importlib.import_module(name)
        finally:
            gc.freeze()
            if collecting:
                gc.enable()
        return _run(first, parsed)
    finally:
        if argv is not None:
            gc.unfreeze()


def _run(first: str, parsed: tuple[ModuleType, argparse.Namespace] | int) -> int:
    """Run the command (its exit code), or return `parsed` when it is one already."""
    global _running  # noqa: PLW0603 - one command runs at a time
    if isinstance(parsed, int):
        return parsed
    module, namespace = parsed
    import inspect  # noqa: PLC0415 - `gcd --help` stays light

    _running = True
    try:
        result = module.run(namespace)
        if inspect.isawaitable(result):
            import asyncio  # noqa: PLC0415

            result = asyncio.run(_await(result))
    except KeyboardInterrupt:
        return _interrupted(first, bool(getattr(namespace, "json", False)))
    except Exception as exc:
        code = exitcodes.exit_code_for(exc)
        if code is None:
            raise
        sys.stderr.write(f"{namespace.prog}: error: {exc}\n")
        if getattr(namespace, "json", False):
            _json_error(code, str(exc))
        return code
    finally:
        _running = False
    return int(result)


def _parse(first: str, args: list[str], prog: str) -> tuple[ModuleType, argparse.Namespace] | int:
    """The command's module and its parsed arguments, or the exit code of a usage error
    (or of `--help`)."""
    module = _load(first)
    if isinstance(module, str):
        return _fail(module)
    import argparse  # noqa: PLC0415 - `gcd --help` stays light

    from l0gc.errors import ConfigError  # noqa: PLC0415
    from l0gc.options import CommandParser  # noqa: PLC0415

    parser = CommandParser(
        prog=f"{prog} {first}",
        description=SUBCOMMANDS[first].help,
        epilog=EXAMPLES.get(first),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    try:
        module.add_arguments(parser)
    except ConfigError as exc:  # the lab a command runs is not installed (gcd.cli.lab)
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        if "--json" in args:
            _json_error(exitcodes.USAGE, str(exc))
        return exitcodes.USAGE
    try:
        namespace = parser.parse_args(args[1:])
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        status = exc.code if isinstance(exc.code, int) else exitcodes.USAGE
        if status != exitcodes.OK and "--json" in args:
            _json_error(status, "bad usage: see the message on stderr")
        return status
    namespace.command = first
    namespace.prog = parser.prog
    return module, namespace


def _json_error(code: int, message: str) -> None:
    """With `--json`, a failure is a JSON document on stdout too (scripts read one)."""
    import json  # noqa: PLC0415 - `gcd --help` stays light

    sys.stdout.write(json.dumps(exitcodes.error_document(code, message)) + "\n")
    sys.stdout.flush()


def _interrupted(command: str, as_json: bool) -> int:
    """Ctrl-C that the command did not turn into a clean stop of its own: exit 130."""
    sys.stderr.write(f"gcd {command}: interrupted (Ctrl-C); stopped at once\n")
    if as_json:
        import json  # noqa: PLC0415 - `gcd --help` stays light

        sys.stdout.write(json.dumps({"version": 1, "error": "interrupted"}) + "\n")
        sys.stdout.flush()
    return exitcodes.INTERRUPTED


_running = False
"""True while `_main` runs a command (start-up frozen): `load_frozen` freezes what it loads."""


def load_frozen(*modules: str) -> None:
    """Import `modules` now: what a command imports when it first uses them (its store's
    client, etcd's), named once its settings are read. Run by `main`, they are imported
    with the cyclic collector off and frozen with the rest of start-up (`_main`), as if
    the command had imported them at its top: no collection walks them while they load,
    nor in every full collection after. A module that cannot be imported is left to the
    code that uses it, which reports it as it always did."""
    collecting = gc.isenabled()
    if _running:
        gc.disable()
    try:
        for name in modules:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    finally:
        if _running:
            gc.freeze()
            if collecting:
                gc.enable()


def freeze_opened() -> None:
    """Freeze what the command has loaded so far, once what it works with is open and
    before the work (`gcd sweep`, `gcd daemon`: the store's clients with botocore's S3
    model, etcd's session): long-lived like start-up, so frozen with it, and no full
    collection of the round walks it (nor the exit, in a process that ends). Only while
    `main` runs a command: in-process callers get it back when the command returns."""
    if _running:
        gc.freeze()


async def _await(awaitable: object) -> object:
    return await awaitable  # type: ignore[misc]
