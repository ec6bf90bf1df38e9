"""Paired, alternating runs of one sweeper round: this tree vs another (before/after).

    .venv/bin/python -m bench.paired run --server seaweedfs --case dense --runs 3 \\
        --before /path/to/old/tree
    .venv/bin/python -m bench.paired child ...     (one round; run by `run`)

A loaded machine moves every figure; so the sides of one comparison run back to back
in an order that alternates every run (A B C D, then D C B A, ...), each side a child
process of its own, and the table shows per-side medians and, per run, the ratio to
this tree's sweeper (paired: both saw about the same load). Client CPU is the child's
rusage (less load-sensitive than wall time) and, for the sweeper sides, the CPU of the
round alone (`time.process_time` around it, without Python start-up); server CPU is
the SeaweedFS process's (/proc) or, for moto, this process's. The sweeper sides count
the keys the server returned (a store wrapper around `S3ObjectStore`).

Cases (the default layout, M above every garbage key):

- ``dense``: 20,000 garbage keys in prefixes 000-099 (all under ``{root}/0``);
- ``skip``: 20 prefixes, each 20 garbage + 2,000 live keys (100 live : 1 garbage).

Sides: ``gcd sweep`` (the real CLI of this tree: M from etcd through the namespace
binding, the journal, everything a user runs; client CPU is the whole process's),
``gcd sweep before`` (the CLI of the tree given by --before), ``gcd sweep --flag V``
(this tree's CLI with those flags, e.g. ``--list-concurrency 1``), ``gcd`` (one round of this
tree's Sweeper in a child process, without etcd), ``gcd-before`` (the same from the
--before tree, which must hold this file too), ``gcd-full`` (this tree,
--full-listing), ``s5cmd``, ``obstore`` (the last two only for ``dense``: they cannot
tell live keys from garbage). ``--sides`` picks them (the first is the reference of the
paired ratios); ``--keys`` sizes the dense case (20,000 by default):

    .venv/bin/python -m bench.paired run --server seaweedfs --case dense --keys 100000 \\
        --sides "gcd sweep,s5cmd,obstore" --runs 3

On a cheap server, where the client is the bound (`--server lean`:
`l0lab.testing.lean_s3`, ~5 µs of server CPU per key; `--server rclone` lists wrongly
while keys are deleted and walks the whole prefix on every page, see
`l0lab.testing.local_rclone`), ``gcd sweep journal`` is the CLI with a fresh
``--journal-dir`` each run, ``--startup`` adds, every run, the CPU of ``gcd --help``
and of a ``gcd sweep`` round with nothing to delete (the bucket emptied, the namespace
bound), and ``--tree`` pins the tree whose CLI the ``gcd sweep`` sides run (a copy of a
commit, while the checkout changes under the run):

    .venv/bin/python -m bench.paired run --server lean --case dense --keys 100000 \\
        --sides "gcd sweep,gcd sweep journal,obstore,s5cmd" --runs 3 --startup

The ratios are paired, run by run: ``x obstore`` is obstore's wall over the side's
(above 1, the side was faster), ``x s5cmd`` the same against s5cmd. ``--prefixes``
spreads the dense case over more partition prefixes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO, ROOT, child_env, median, timed_child
from bench.s3sides import SERVERS, S3Bench

_CASES = ("dense", "skip")
_SIDES = (
    "gcd sweep",
    "gcd sweep journal",
    "gcd sweep before",
    "gcd",
    "gcd-before",
    "gcd-full",
    "s5cmd",
    "obstore",
)
_STARTUP = ("gcd --help", "gcd sweep, nothing to delete")
"""What `--startup` measures once a run: the CPU of a process that deletes nothing."""


def case_keys(case: str, keys: int = 20_000, prefixes: int = 100) -> tuple[list[str], list[str]]:
    """(garbage, live) keys of a case; live epochs are above 10**6. ``dense``: `keys`
    garbage keys, epochs 1 to keys/prefixes in each of `prefixes` prefixes (at most
    1,000: the layout's three digits)."""
    garbage: list[str] = []
    live: list[str] = []
    if case == "dense":
        if not 1 <= prefixes <= 1000:
            raise ValueError(f"prefixes {prefixes} not in 1..1000")
        per_prefix = keys // prefixes
        for prefix in range(prefixes):
            garbage += [f"{ROOT}/{prefix:03d}/{epoch:018d}/g" for epoch in range(1, per_prefix + 1)]
    else:
        for prefix in range(0, 1000, 50):
            garbage += [f"{ROOT}/{prefix:03d}/{epoch:018d}/g" for epoch in range(1, 21)]
            live += [f"{ROOT}/{prefix:03d}/{10**6 + i:018d}/live" for i in range(2000)]
    return garbage, live


# -- the child: one round, in process -------------------------------------------------


class _Counting:
    """An object store that counts the keys its LIST answers carry."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.returned = 0

    async def list_page(self, prefix: str, **options: Any) -> Any:
        page = await self.inner.list_page(prefix, **options)
        self.returned += len(page.objects)
        return page

    async def delete_batch(self, keys: Sequence[str]) -> Any:
        return await self.inner.delete_batch(keys)


async def _child(args: argparse.Namespace) -> dict[str, Any]:
    from gcd.rules.layout import KeyLayout  # noqa: PLC0415 - from the tree under test
    from gcd.storage.s3.client import S3ObjectStore  # noqa: PLC0415
    from gcd.storage.s3.settings import S3Settings  # noqa: PLC0415
    from gcd.sweep.sweeper import RoundConfig, Sweeper  # noqa: PLC0415

    settings = S3Settings(bucket=args.bucket, endpoint_url=args.endpoint_url, region="us-east-1")
    config = RoundConfig(
        layout=KeyLayout.default(ROOT), grace_s=0.0, skip_ahead=not args.full_listing
    )
    import gcd  # noqa: PLC0415

    if args.tree and not gcd.__file__.startswith(os.path.abspath(args.tree)):
        raise RuntimeError(f"imported {gcd.__file__}, not the tree {args.tree}")
    async with S3ObjectStore.open(settings) as store:
        counting = _Counting(store)
        sweeper = Sweeper(counting, config)
        cpu, started = time.process_time(), time.perf_counter()
        result = await sweeper.sweep(args.safe_epoch, None)
        round_s, round_cpu = time.perf_counter() - started, time.process_time() - cpu
    summary = result.summary
    return {
        "deleted": summary.deleted,
        "list_requests": summary.list_requests,
        "keys_returned": counting.returned,
        "round_s": round_s,
        "round_cpu_s": round_cpu,
        "errors": summary.errors,
    }


# -- the parent: paired, alternating runs ----------------------------------------------


def _flags(side: str) -> list[str]:
    """The extra flags of a side ``gcd sweep --flag value ...`` (this tree's CLI with them)."""
    rest = side.removeprefix("gcd sweep")
    return rest.split() if rest != side and rest.startswith(" --") else []


def _order(sides: Sequence[str], run: int) -> list[str]:
    return list(sides) if run % 2 == 0 else list(reversed(sides))


def _sweep_argv(bench: S3Bench, side: str, journal: str | None) -> list[str]:
    """The `gcd sweep` command line of a ``gcd sweep...`` side (-P: the child imports the
    tree its PYTHONPATH names, not the working directory)."""
    argv = [sys.executable, "-P", *bench.argv("gcd sweep", bench.s3.endpoint_url)[1:]]
    argv += _flags(side)
    if journal is not None:
        argv += ["--journal-dir", journal]
    return argv


def _side(bench: S3Bench, side: str, before: str | None, tree: str) -> dict[str, Any]:
    bench.reseed()
    endpoint = bench.s3.endpoint_url
    journal: str | None = None
    if side.startswith("gcd sweep"):  # the real CLI: M from etcd, binding, journal...
        tree = before if side == "gcd sweep before" and before else tree
        asyncio.run(bench.bind(endpoint))
        if side == "gcd sweep journal":
            journal = tempfile.mkdtemp(prefix="l0gc-bench-journal-")
        argv = _sweep_argv(bench, side, journal)
        env = child_env(PYTHONPATH=str(tree))
    elif side.startswith("gcd"):
        tree = before if side == "gcd-before" and before else tree
        # -P: the working directory (this tree) does not go first on sys.path, so the
        # child imports the tree PYTHONPATH names
        argv = [
            sys.executable,
            "-P",
            "-m",
            "bench.paired",
            "child",
            "--endpoint-url",
            endpoint,
            "--bucket",
            bench.bucket,
            "--safe-epoch",
            "1000",
            "--tree",
            str(tree),
        ]
        if side == "gcd-full":
            argv.append("--full-listing")
        env = child_env(PYTHONPATH=str(tree))
    else:
        argv = bench.argv("s5cmd rm" if side == "s5cmd" else "obstore", endpoint)
        env = child_env()
    load = os.getloadavg()[0]
    server_before = bench.server_cpu_s()
    journal_bytes = None
    try:
        child = timed_child(argv, env=env)
        if journal is not None:  # what the journal wrote: it was on
            journal_bytes = sum(p.stat().st_size for p in Path(journal).rglob("*") if p.is_file())
    finally:
        if journal is not None:
            shutil.rmtree(journal, ignore_errors=True)
    server_cpu = bench.server_cpu_s() - server_before
    if child.returncode != 0:
        raise RuntimeError(f"{side} exited {child.returncode}: {child.stderr[-2000:]}")
    wrong = bench.left_wrong()
    if wrong is not None:
        raise RuntimeError(f"{side}: {wrong}")
    figures: dict[str, Any] = {
        "wall_s": child.wall_s,
        "cpu_s": child.cpu_s,
        "server_cpu_s": server_cpu,
        "load": load,
    }
    if journal_bytes is not None:
        figures["journal_bytes"] = journal_bytes
    if side.startswith("gcd sweep"):
        summary = json.loads(child.stdout.strip().splitlines()[-1])
        figures |= {
            "deleted": summary["deleted"],
            "list_requests": summary["list_requests"],
            "round_s": summary["duration_s"],
            "errors": summary["errors"],
        }
    elif side.startswith("gcd"):
        figures |= json.loads(child.stdout.strip().splitlines()[-1])
    return figures


def _startup(bench: S3Bench, what: str, tree: str) -> dict[str, Any]:
    """One process of `_STARTUP` from `tree`: its wall and CPU (rusage, user + system)."""
    env = child_env(PYTHONPATH=str(tree))
    if what == "gcd --help":
        argv = [sys.executable, "-P", "-m", "gcd", "--help"]
    else:  # a round with nothing to delete: the bucket emptied, the namespace bound
        bench.s3.delete_bucket_contents(bench.bucket)
        asyncio.run(bench.bind(bench.s3.endpoint_url))
        argv = _sweep_argv(bench, "gcd sweep", None)
    load = os.getloadavg()[0]
    child = timed_child(argv, env=env)
    if child.returncode != 0:
        raise RuntimeError(f"{what} exited {child.returncode}: {child.stderr[-2000:]}")
    figures: dict[str, Any] = {"wall_s": child.wall_s, "cpu_s": child.cpu_s, "load": load}
    if what != "gcd --help":
        summary = json.loads(child.stdout.strip().splitlines()[-1])
        if summary["deleted"] != 0:
            raise RuntimeError(f"{what} deleted {summary['deleted']} keys")
        figures["list_requests"] = summary["list_requests"]
    return figures


def _table(results: dict[str, list[dict[str, Any]]], keys: int) -> str:
    cols = (
        "side",
        "wall s",
        "round s",
        "keys/s wall",
        "client CPU us/key",
        "round CPU us/key",
        "server CPU us/key",
        "LISTs",
        "keys returned",
        "x first side (paired wall)",
        "x obstore (paired wall)",
        "x s5cmd (paired wall)",
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    ours = results[next(iter(results))]

    def against(other: str, runs: list[dict[str, Any]]) -> str:
        """Median over runs of `other`'s wall / this side's (above 1: this side faster)."""
        if other not in results:
            return "-"
        pairs = zip(results[other], runs, strict=True)
        return f"{median([o['wall_s'] / r['wall_s'] for o, r in pairs]):.2f}"

    for side, runs in results.items():

        def med(name: str, runs: list[dict[str, Any]] = runs) -> float | None:
            values = [r[name] for r in runs if name in r]
            return median(values) if values else None

        # > 1: the first side was faster than `side` (its wall / the first's, run by run)
        paired = median([r["wall_s"] / o["wall_s"] for o, r in zip(ours, runs, strict=True)])
        round_cpu = med("round_cpu_s")
        cells = (
            side,
            f"{med('wall_s'):.2f}",
            "-" if med("round_s") is None else f"{med('round_s'):.2f}",
            f"{keys / (med('wall_s') or 1):,.0f}",
            f"{(med('cpu_s') or 0) / keys * 1e6:.1f}",
            "-" if round_cpu is None else f"{round_cpu / keys * 1e6:.1f}",
            f"{(med('server_cpu_s') or 0) / keys * 1e6:.1f}",
            "-" if med("list_requests") is None else f"{med('list_requests'):.0f}",
            "-" if med("keys_returned") is None else f"{med('keys_returned'):,.0f}",
            f"{paired:.2f}",
            against("obstore", runs),
            against("s5cmd", runs),
        )
        lines.append("| " + " | ".join(cells) + " |")
    loads = [r["load"] for runs in results.values() for r in runs]
    spread = f"min {min(loads):.1f}, max {max(loads):.1f}"
    lines.append(
        f"\n1-minute load average during the runs: median {median(loads):.1f} "
        f"({spread}) on {os.cpu_count()} cores"
    )
    return "\n".join(lines)


def _startup_table(startup: dict[str, list[dict[str, Any]]]) -> str:
    cols = ("process (nothing to delete)", "wall s", "CPU s (user + sys)", "min CPU s", "runs")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for what, runs in startup.items():
        cpus = [r["cpu_s"] for r in runs]
        cells = (
            what,
            f"{median([r['wall_s'] for r in runs]):.2f}",
            f"{median(cpus):.3f}",
            f"{min(cpus):.3f}",
            str(len(runs)),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> None:
    garbage, live = case_keys(args.case, args.keys, args.prefixes)
    tree = os.path.abspath(args.tree or REPO)
    if args.sides:
        sides = args.sides.split(",")
    else:
        sides = ["gcd", "gcd-before"] if args.before else ["gcd"]
        sides += ["s5cmd", "obstore"] if args.case == "dense" else ["gcd-full"]
    unknown = {side for side in sides if side not in _SIDES and not _flags(side)}
    if unknown or (args.before is None and any(side.endswith("before") for side in sides)):
        raise SystemExit(f"sides {sorted(unknown) or sides} not among {_SIDES} (before: --before)")
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    startup: dict[str, list[dict[str, Any]]] = {what: [] for what in _STARTUP}
    bench = S3Bench("paired", garbage, args.server, live)
    try:
        for run in range(args.runs):
            for side in _order(sides, run):
                results[side].append(_side(bench, side, args.before, tree))
                print(side, json.dumps(results[side][-1]), file=sys.stderr, flush=True)
            if args.startup:
                for what in _order(_STARTUP, run):
                    startup[what].append(_startup(bench, what, tree))
                    print(what, json.dumps(startup[what][-1]), file=sys.stderr, flush=True)
    finally:
        bench.close()
    per_prefix = f", {args.prefixes} prefixes" if args.case == "dense" else ""
    print(
        f"### {args.case} on {args.server}: {len(garbage):,} garbage + {len(live):,} live "
        f"keys{per_prefix}, {args.runs} paired alternating runs (medians); gcd from {tree}\n"
    )
    print(_table(results, len(garbage)))
    if args.startup:
        print("\n" + _startup_table(startup))
    print("\nraw: " + json.dumps({"sides": results, "startup": startup if args.startup else {}}))


def main() -> int:
    """`run` (the comparison) or `child` (one round of this tree's sweeper)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run")
    run.add_argument("--server", choices=SERVERS, default="seaweedfs")
    run.add_argument("--case", choices=_CASES, default="dense")
    run.add_argument("--runs", type=int, default=3)
    run.add_argument("--before", default=None, help="another tree holding bench/paired.py")
    run.add_argument("--keys", type=int, default=20_000, help="garbage keys of the dense case")
    run.add_argument("--prefixes", type=int, default=100, help="prefixes of the dense case")
    run.add_argument(
        "--tree", default=None, help="the tree whose CLI the gcd sweep sides run (default: this)"
    )
    run.add_argument(
        "--startup",
        action="store_true",
        help="each run, also the CPU of gcd --help and of a round with nothing to delete",
    )
    run.add_argument(
        "--sides",
        default=None,
        help=f"comma-separated, the first is the "
        f"reference of the paired ratios; of {', '.join(_SIDES)}",
    )
    child = sub.add_parser("child")
    child.add_argument("--endpoint-url", required=True)
    child.add_argument("--bucket", required=True)
    child.add_argument("--safe-epoch", type=int, required=True)
    child.add_argument("--full-listing", action="store_true")
    child.add_argument("--tree", default=None, help="fail unless gcd is imported from here")
    args = parser.parse_args()
    if args.mode == "child":
        sys.stdout.write(json.dumps(asyncio.run(_child(args))) + "\n")
    else:
        _run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
