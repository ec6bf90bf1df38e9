"""What `gcd` costs before it does anything: `gcd --help`, `gcd sweep --help`, and an
empty round (issue 56: an empty round <= 0.4 s of CPU).

    .venv/bin/python -m bench.startup --runs 7 [--before TREE] [--json-out FILE]
    .venv/bin/python -m bench.startup --side image=.:/tmp/l0gc-runtime/bin/python

`--side LABEL=TREE[:PYTHON]` (repeatable) adds a side: a tree run by an interpreter,
e.g. a venv built as the Dockerfile's builder builds the image's (runtime dependencies
only: no `rich`, which structlog imports when installed; bench/RESULTS.md section 32
says how), to see what the dev dependencies add.

One real etcd (`LocalEtcd`) and moto's S3 server (in this process) are started on free
loopback ports; a namespace is set up as an operator's would be (cluster epoch 8, one
partition at M(p) = 5) and bound to a bucket that holds one live object (epoch 9) and no
garbage. Then, for each tree in turn (this one, and `--before` if given, alternating
run by run: A B A B ...), these run as child processes:

- `gcd --help`
- `gcd sweep --help`
- the empty round: `gcd sweep --bucket ... --etcd ... --namespace ... --json`, M read
  from etcd through the binding, one live key listed, nothing deleted;
- the empty round with M by hand (`--safe-epoch 5`, no etcd), section 32's round.

Each child's CPU (user + sys, `os.wait4`) is the figure to read (the load average is
printed with the results; walls are printed too but mean little on a shared machine).
Module counts (`len(sys.modules)` as the command returns, and how many of them are
botocore, aiobotocore, aiohttp, grpc/aetcd/protobuf, structlog, msgspec) come from one
extra run of each command under a small wrapper, not from the timed runs.

Children run from byte-compiled modules: PYTHONDONTWRITEBYTECODE is dropped from their
environment and each tree is byte-compiled first, so no run pays for compiling sources.

`--budget` also runs the bound empty round `--runs` times per side under a wrapper that
reads the process's CPU (`time.process_time`) between its phases (interpreter start,
`gcd.cli.main`, the command's module and arguments, its `RUN_IMPORTS`, the store's and
etcd's clients imported by `load_frozen`, the runtime opened, the round, the output),
and prints the median of each: where the round's CPU goes. Phases a tree has no hook
for (a tree older than `load_frozen`) fold into the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import PYTHON, REPO, child_env
from l0gc.contract.namespace import Publication
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3

NAMESPACE = "/l0gc/bench-startup"
BUCKET = "bench-startup"
ROOT = "level_zero/data"
LIVE_KEY = f"{ROOT}/001/000000000000000009/live"

_COUNT = """
import sys
from gcd.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    names = list(sys.modules)
    groups = {
        "botocore": ("botocore", "aiobotocore", "boto3"),
        "aiohttp": ("aiohttp", "yarl", "multidict", "frozenlist", "aiosignal"),
        "etcd": ("aetcd", "grpc", "google.protobuf"),
        "structlog": ("structlog", "rich"),
        "msgspec": ("msgspec",),
        "prometheus": ("prometheus_client",),
        "azure": ("azure",),
        "google_cloud": ("google.cloud", "google.auth", "google.api_core"),
        "pyspark": ("pyspark", "py4j"),
        "l0gc": ("gcd", "l0gc", "watermark"),
    }
    counts = {g: sum(1 for n in names if n in p or n.startswith(tuple(x + "." for x in p)))
              for g, p in groups.items()}
    print("MODULES " + __import__("json").dumps({"total": len(names), **counts}), file=sys.stderr)
"""


_PHASES = """
import sys, time
marks = [("interpreter, site", time.process_time())]
def mark(name):
    marks.append((name, time.process_time()))
import gcd.cli.main as m
mark("gcd.cli.main")
parse = getattr(m, "_parse", None)
def _parse(*a, **k):
    out = parse(*a, **k)
    mark("the command's module (structlog, options), arguments read")
    return out
if parse is not None:
    m._parse = _parse
load = getattr(m, "load_frozen", None)
def load_frozen(*names):
    mark("RUN_IMPORTS (sweep runtime, sweeper, journal, metrics), settings")
    for name in names:
        load(name)
        mark("imported by load_frozen: " + name)
    import gcd.service.runtime as rt
    run_round = rt.SweepRuntime.run_round
    async def timed(self):
        mark("runtime opened (preflight, store and etcd clients, binding, shard)")
        out = await run_round(self)
        mark("the round")
        return out
    rt.SweepRuntime.run_round = timed
if load is not None:
    m.load_frozen = load_frozen
code = m.main()
mark("output")
print("PHASES " + __import__("json").dumps(
    [(n, t - p) for (n, t), (_, p) in zip(marks, [("", 0.0)] + marks)]), file=sys.stderr)
sys.exit(code)
"""


def _phases(side: tuple[str, str], argv: list[str]) -> tuple[list[tuple[str, float]], float]:
    """(CPU s per phase, CPU s of the whole process) of one bound empty round."""
    tree, python = side
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [python, "-c", _PHASES, *argv], cwd=tree, env=_env(tree), stdout=out, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"budget run failed: {text[-2000:]}")
    line = next(x for x in text.splitlines() if x.startswith("PHASES "))
    phases = [(str(n), float(c)) for n, c in json.loads(line.removeprefix("PHASES "))]
    return phases, usage.ru_utime + usage.ru_stime


def _budget(sides: dict[str, tuple[str, str]], argv: list[str], runs: int) -> dict[str, Any]:
    """The median CPU of each phase of the bound empty round, per side; what is left
    after the last phase (the interpreter's exit) is the whole process's CPU minus them."""
    found: dict[str, dict[str, list[float]]] = {}
    for _ in range(runs):
        for label, side in sides.items():
            phases, total = _phases(side, argv)
            by_phase = found.setdefault(label, {})
            for name, cpu in phases:
                by_phase.setdefault(name, []).append(cpu)
            by_phase.setdefault("exit (interpreter finalisation)", []).append(
                total - sum(c for _, c in phases)
            )
            by_phase.setdefault("whole process", []).append(total)
    return {
        label: {name: round(statistics.median(v), 3) for name, v in by_phase.items()}
        for label, by_phase in found.items()
    }


def _commands(etcd: LocalEtcd, s3: LocalS3) -> dict[str, list[str]]:
    store = ["--bucket", BUCKET, "--endpoint-url", s3.endpoint_url, "--region", "us-east-1"]
    return {
        "gcd --help": ["--help"],
        "gcd sweep --help": ["sweep", "--help"],
        "empty round (bound, etcd)": [
            "sweep",
            *store,
            "--etcd",
            etcd.endpoint,
            "--namespace",
            NAMESPACE,
            "--grace",
            "1m",
            "--json",
        ],
        "empty round (--safe-epoch)": [
            "sweep",
            *store,
            "--safe-epoch",
            "5",
            "--grace",
            "1m",
            "--json",
        ],
    }


def _env(tree: str) -> dict[str, str]:
    env = child_env(PYTHONPATH=tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _check(name: str, code: int, out: bytes, err: bytes) -> None:
    if code != 0:
        raise RuntimeError(f"{name}: exit {code}: {err.decode(errors='replace')[-2000:]}")
    if name.startswith("empty round"):
        summary = json.loads(out)
        if summary["deleted"] != 0 or summary["listed"] != 1:
            raise RuntimeError(f"{name}: not an empty round: {summary}")


def _timed(side: tuple[str, str], name: str, argv: list[str]) -> tuple[float, float]:
    """(CPU s, wall s) of one `python -m gcd ARGV` from (tree, python): its own rusage."""
    tree, python = side
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        wall = time.perf_counter()
        proc = subprocess.Popen(
            [python, "-m", "gcd", *argv], cwd=tree, env=_env(tree), stdout=out, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        _check(name, proc.returncode, out.read(), err.read())
    return usage.ru_utime + usage.ru_stime, wall


def _modules(side: tuple[str, str], name: str, argv: list[str]) -> dict[str, int]:
    tree, python = side
    run = subprocess.run(
        [python, "-c", _COUNT, *argv], cwd=tree, env=_env(tree), capture_output=True, check=False
    )
    _check(name, run.returncode, run.stdout, run.stderr)
    line = next(
        x for x in run.stderr.decode(errors="replace").splitlines() if x.startswith("MODULES ")
    )
    counts: dict[str, int] = json.loads(line.removeprefix("MODULES "))
    return counts


async def _prepare(etcd: LocalEtcd, s3: LocalS3) -> None:
    from gcd.storage.s3.client import S3ObjectStore  # noqa: PLC0415
    from gcd.storage.s3.settings import S3Settings  # noqa: PLC0415
    from gcd.sweep.binding import bind_namespace  # noqa: PLC0415
    from l0gc.contract.binding import StorageTarget  # noqa: PLC0415

    s3.seed(BUCKET, [LIVE_KEY], last_modified=datetime.now(UTC) - timedelta(hours=2))
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=NAMESPACE))
    store = WatermarkStore(kv, NAMESPACE)
    try:
        await store.init_cluster_epoch(1)
        await store.register_partition("t/0")
        owned = await store.acquire_ownership("t/0", "p")
        for _ in range(7):
            await store.advance_cluster_epoch()
        await store.publish_one(Publication("t/0", "p", owned.owner_epoch, 5))
        settings = S3Settings(bucket=BUCKET, endpoint_url=s3.endpoint_url, region="us-east-1")
        target = StorageTarget(BUCKET, ROOT, s3.endpoint_url)
        async with S3ObjectStore.open(settings) as objects:
            await bind_namespace(store, objects, target)
    finally:
        await kv.close()


def _table(report: dict[str, Any]) -> str:
    """The report as a Markdown table: CPU median [range] and module count per side."""
    lines = [
        f"load {report['load_before']} -> {report['load_after']}",
        "",
        "| command | side | CPU s (median) | range | modules |",
        "|---|---|---|---|---|",
    ]
    for name, by_side in report["commands"].items():
        for label, row in by_side.items():
            low, high = min(row["cpu_s"]), max(row["cpu_s"])
            lines.append(
                f"| {name} | {label} | {row['cpu_s_median']:.3f} | {low:.3f}-{high:.3f} "
                f"| {row['modules']['total']} |"
            )
    for label, phases in report.get("budget", {}).items():
        lines += ["", f"empty round (bound, etcd), {label}: CPU s per phase (median)", ""]
        lines += [f"    {cpu:6.3f}  {name}" for name, cpu in phases.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run every command `--runs` times per tree, alternating; print a JSON report."""
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command and tree")
    parser.add_argument("--before", help="another tree (e.g. a worktree of main) to compare")
    parser.add_argument(
        "--side", action="append", default=[], metavar="LABEL=TREE[:PYTHON]", help="another side"
    )
    parser.add_argument("--budget", action="store_true", help="the empty round's phases too")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    sides = {"this tree": (str(REPO), PYTHON)}
    if args.before:
        sides["before"] = (str(Path(args.before).resolve()), PYTHON)
    for spec in args.side:
        label, _, rest = spec.partition("=")
        tree, _, python = rest.partition(":")
        sides[label] = (str(Path(tree).resolve()), python or PYTHON)
    for tree, _ in sides.values():
        for package in ("gcd", "l0gc", "watermark", "l0lab"):
            compileall.compile_dir(Path(tree) / package, quiet=1, workers=0)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with LocalEtcd() as etcd, LocalS3() as s3:
        asyncio.run(_prepare(etcd, s3))
        commands = _commands(etcd, s3)
        report: dict[str, Any] = {
            "load_before": os.getloadavg(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "commands": {},
        }
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for name, command in commands.items():
            for side in sides.values():
                _timed(side, name, command)  # warm the page cache, unmeasured
            for _ in range(args.runs):
                for label, side in sides.items():
                    runs.setdefault((name, label), []).append(_timed(side, name, command))
            sys.stderr.write(f"{name}: done\n")
        for (name, label), values in runs.items():
            cpus = [round(c, 3) for c, _ in values]
            report["commands"].setdefault(name, {})[label] = {
                "cpu_s_median": round(statistics.median(cpus), 3),
                "cpu_s": cpus,
                "wall_s_median": round(statistics.median(w for _, w in values), 3),
                "modules": _modules(sides[label], name, commands[name]),
            }
        if args.budget:
            report["budget"] = _budget(sides, commands["empty round (bound, etcd)"], args.runs)
        report["load_after"] = os.getloadavg()
    sys.stderr.write(_table(report))
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    if args.json_out is not None:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
