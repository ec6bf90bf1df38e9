"""Where a `gcd sweep` process spends its CPU, per key: the cost budget of issue 56.

    .venv/bin/python -m bench.profile_sweep --server lean --keys 100000 \\
        [--tree /path/to/tree] [--cprofile FILE]

Seeds the dense case (`bench.paired.case_keys`) into a server of `bench.s3sides`, binds
the namespace, and runs the real CLI (`python -P -m gcd sweep ...`, from --tree) three
ways, each on a fresh seed: plain (its CPU, user + system, from rusage), with the journal
on, and under this file's own sampler (run as a script, so it imports nothing from the
tree but the CLI). The sampler is py-spy's idea in-process (py-spy is not in the venv):
`setitimer(ITIMER_PROF)` sends SIGPROF every millisecond of the process's CPU (time
spent waiting for the server sends none), and the handler weighs the CPU since the last
tick to the first frame of the interrupted stack, leaf first, whose file names a
category (`CATEGORIES`; stdlib helpers such as json, hmac or re name none, so their time
goes to their caller's category; C functions have no frame, so theirs goes to the Python
frame that called them). Python's cyclic garbage collector runs with no frame of its
own: `gc.callbacks` time every collection, and that CPU is taken out of the tick that
saw it and counted as "cyclic GC". The table gives each category's share of the
sampled run's CPU, scaled to the plain runs' median CPU.

`--cprofile FILE` also runs the CLI once under cProfile (`python -m cProfile -o FILE`)
for reading with pstats; cProfile's per-call cost inflates exactly the small per-key
functions this budget is about, so the table does not use it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import runpy
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up (imports)", ("<frozen importlib", "importlib/", "pkgutil.py")),
    ("journal", ("/gcd/journal/",)),
    ("logs", ("/structlog/", "/logging/", "/gcd/observe/log")),
    ("metrics", ("/prometheus_client/", "/gcd/observe/metrics", "/gcd/observe/telemetry")),
    ("parse (XML answers)", ("/xml/etree/", "/xml/parsers/", "/botocore/parsers.py")),
    ("parse (XML answers)", ("/gcd/storage/s3/wire.py",)),
    ("HTTP + event loop", ("/aiohttp/", "/yarl/", "/multidict/", "/asyncio/", "selectors.py")),
    ("HTTP + event loop", ("/aiobotocore/endpoint.py", "/aiobotocore/httpsession.py")),
    ("HTTP + event loop", ("/aiobotocore/_endpoint_helpers.py", "/aiohappyeyeballs/")),
    ("build + sign", ("/botocore/", "/aiobotocore/")),
    ("build + sign", ("/gcd/storage/s3/lean.py",)),  # the lean path's signer (and its send)
    ("decision (rule, pages)", ("/gcd/rules/", "/gcd/sweep/pages.py")),
    ("etcd", ("/l0gc/etcd/", "/aetcd/", "/grpc/", "/google/protobuf/")),
    ("sweeper bookkeeping", ("/gcd/",)),
    ("other", ("/l0gc/", "/watermark/", "/site-packages/")),
)
"""(category, file-name fragments), first match wins; a frame matching none is passed."""
_BUILDERS = frozenset({"delete_body", "_text"})
"""The functions of gcd.storage.s3.wire that write a request body (build), not parse."""
_ORDER = [
    "parse (XML answers)",
    "build + sign",
    "HTTP + event loop",
    "decision (rule, pages)",
    "sweeper bookkeeping",
    "journal",
    "logs",
    "metrics",
    "etcd",
    "start-up (imports)",
    "other",
    "unattributed",
]
_INTERVAL_S = 0.001


def _category(filename: str, function: str) -> str | None:
    if function in _BUILDERS and filename.endswith("/gcd/storage/s3/wire.py"):
        return "build + sign"
    for name, fragments in CATEGORIES:
        if any(fragment in filename for fragment in fragments):
            return name
    return None


# -- the child: gcd under the sampler (run as a script: python -P bench/profile_sweep.py) --


def _sample(argv: list[str], out: str) -> None:
    weights: defaultdict[str, float] = defaultdict(float)
    """CPU seconds by category: each SIGPROF tick weighs the process CPU since the last."""
    state = {"last": time.process_time(), "gc": 0.0, "gc_s": 0.0, "gc_runs": 0.0}
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.process_time())
        elif started:
            spent = time.process_time() - started.pop()
            state["gc"] += spent
            state["gc_s"] += spent
            state["gc_runs"] += 1

    def on_tick(signum: int, frame: Any) -> None:
        now = time.process_time()
        elapsed, state["last"] = now - state["last"], now
        in_gc = min(state["gc"], elapsed)
        state["gc"] -= in_gc
        weights["cyclic GC"] += in_gc
        category = None
        while frame is not None and category is None:
            category = _category(frame.f_code.co_filename, frame.f_code.co_name)
            frame = frame.f_back
        weights[category or "unattributed"] += elapsed - in_gc

    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGPROF, on_tick)
    signal.setitimer(signal.ITIMER_PROF, _INTERVAL_S, _INTERVAL_S)
    sys.argv = ["gcd", *argv]
    cpu = time.process_time()
    code: Any = 0
    try:
        runpy.run_module("gcd", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    cpu = time.process_time() - cpu
    Path(out).write_text(
        json.dumps(
            {
                "seconds": dict(weights),
                "gc_s": state["gc_s"],
                "gc_runs": int(state["gc_runs"]),
                "cpu_s": cpu,
            }
        )
    )
    sys.stdout.flush()
    os._exit(int(code or 0))


def _gc_only(argv: list[str], out: str) -> None:
    """gcd with only the GC timer: the GC time of an unsampled run."""
    total = {"s": 0.0, "n": 0}
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.process_time())
        elif started:
            total["s"] += time.process_time() - started.pop()
            total["n"] += 1

    gc.callbacks.append(on_gc)
    sys.argv = ["gcd", *argv]
    code: Any = 0
    try:
        runpy.run_module("gcd", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    Path(out).write_text(json.dumps({"gc_s": total["s"], "gc_runs": total["n"]}))
    sys.stdout.flush()
    os._exit(int(code or 0))


# -- the parent ---------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> None:
    from bench.common import child_env, median, timed_child  # noqa: PLC0415
    from bench.paired import _sweep_argv, case_keys  # noqa: PLC0415
    from bench.s3sides import S3Bench  # noqa: PLC0415

    tree = os.path.abspath(args.tree or Path(__file__).resolve().parent.parent)
    env = child_env(PYTHONPATH=tree)
    garbage, _ = case_keys("dense", args.keys)
    bench = S3Bench("profile", garbage, args.server)
    me = str(Path(__file__).resolve())
    figures: dict[str, Any] = {"plain_cpu_s": [], "journal_cpu_s": [], "gc_s": [], "walls": []}
    try:

        def once(prefix: list[str], journal: bool = False) -> Any:
            bench.reseed()
            asyncio.run(bench.bind(bench.s3.endpoint_url))
            with tempfile.TemporaryDirectory(prefix="l0gc-profile-") as scratch:
                argv = _sweep_argv(bench, "gcd sweep", scratch if journal else None)
                child = timed_child([argv[0], "-P", *prefix, *argv[4:]], env=env)
                if child.returncode != 0:
                    raise RuntimeError(f"gcd sweep exited {child.returncode}: {child.stderr}")
                summary = json.loads(child.stdout.strip().splitlines()[-1])
                if summary["deleted"] != len(garbage):
                    raise RuntimeError(f"deleted {summary['deleted']} of {len(garbage)}")
                return child

        for _ in range(args.runs):
            plain = once(["-m", "gcd"])
            figures["plain_cpu_s"].append(plain.cpu_s)
            figures["walls"].append(plain.wall_s)
            figures["journal_cpu_s"].append(once(["-m", "gcd"], journal=True).cpu_s)
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                once([me, "gc-only", out.name, "--"])
                figures["gc_s"].append(json.loads(Path(out.name).read_text())["gc_s"])
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            sampled = once([me, "sample", out.name, "--"])
            profile = json.loads(Path(out.name).read_text())
        if args.cprofile:
            once(["-m", "cProfile", "-o", args.cprofile, "-m", "gcd"])
    finally:
        bench.close()
    keys = len(garbage)
    cpu = median(figures["plain_cpu_s"])
    gc_s = median(figures["gc_s"])
    seconds: dict[str, float] = profile["seconds"]
    total = sum(seconds.values())
    print(
        f"### gcd sweep, dense, {keys:,} keys on {args.server} (gcd from {tree}): "
        f"client CPU {cpu / keys * 1e6:.1f} us/key (median of {args.runs}), "
        f"journal on {median(figures['journal_cpu_s']) / keys * 1e6:.1f}\n"
    )
    print("| where | share of the sampled run's CPU | us/key (scaled to the plain run's CPU) |")
    print("|---|---|---|")
    for name in [*_ORDER, "cyclic GC"]:
        if seconds.get(name):
            share = seconds[name] / total
            print(f"| {name} | {share:.1%} | {share * cpu / keys * 1e6:.1f} |")
    print(f"| (cyclic GC of the plain runs, gc.callbacks) | - | {gc_s / keys * 1e6:.1f} |")
    journal_us = (median(figures["journal_cpu_s"]) - cpu) / keys * 1e6
    print(f"| journal on, added (plain runs, journal on - off) | - | {journal_us:.1f} |")
    print(f"| **total (plain run)** | | **{cpu / keys * 1e6:.1f}** |")
    print(
        f"\nSIGPROF every {_INTERVAL_S * 1000:g} ms of CPU in the sampled run (its CPU "
        f"{profile['cpu_s']:.2f} s against {cpu:.2f} s plain; wall {sampled.wall_s:.2f} s); "
        f"GC there: {profile['gc_runs']} collections, {profile['gc_s']:.2f} s; "
        f"1-minute load {os.getloadavg()[0]:.1f}"
    )
    print("\nraw: " + json.dumps({"figures": figures, "profile": profile}))


def main() -> int:
    """`sample OUT -- ARGS` / `gc-only OUT -- ARGS` (children), or the profile run."""
    if len(sys.argv) > 3 and sys.argv[1] in ("sample", "gc-only") and sys.argv[3] == "--":
        (_sample if sys.argv[1] == "sample" else _gc_only)(sys.argv[4:], sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="lean")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", default=None, help="the tree whose gcd CLI runs")
    parser.add_argument("--cprofile", default=None, help="also write a cProfile of one run")
    _run(parser.parse_args())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
