"""Client cost of a round: CPU microseconds per deleted key and peak RSS, server excluded.

Each measurement is one fresh process (`python -m bench.client_cost --child N`) that
runs one sweeper round over `bench.synthetic.SyntheticStore`: a bucket of N garbage
objects over 1000 prefixes whose listing pages are synthesised on the fly, so the
store holds no objects and its memory does not grow with N. The child reports:

- CPU: `time.process_time()` around the round, minus the store's own CPU (it times
  itself inside every call), divided by the keys deleted. Gross figures are shown too.
- RSS: resident set (VmRSS) after setting everything up and running a small warm-up
  round (imports, caches, the event loop); then the peak is reset (clear_refs) and the
  peak resident set (VmHWM) is read after the measured round. The
  peak after the round is the sweeper's footprint; its growth from 50k to 500k objects
  is the streaming claim (bounded queue, nothing kept per key).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import sys
import time
from pathlib import Path

import structlog

from bench.common import (
    PYTHON,
    Goal,
    Report,
    Scale,
    Table,
    child_env,
    median,
    proc_status_kib,
    run_child,
)
from bench.synthetic import BucketShape, SyntheticStore
from gcd.sweep.sweeper import RoundConfig, Sweeper

NAME = "client_cost"
TITLE = "4. Client cost per deleted key: CPU and peak RSS (in-memory fake, no server)"
_SIZES = {Scale.TOY: (2_000, 20_000), Scale.QUICK: (50_000, 500_000), Scale.FULL: (50_000, 500_000)}


async def _round(objects: int) -> dict[str, float]:
    shape = BucketShape.spread(1000, max(1, objects // 1000), 0)
    store = SyntheticStore(shape)
    sweeper = Sweeper(store, RoundConfig())
    wall, cpu = time.perf_counter(), time.process_time()
    result = await sweeper.sweep(shape.safe_epoch, None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert result.summary.deleted == shape.total_garbage == store.deleted, result.summary
    return {"deleted": store.deleted, "cpu_s": cpu, "store_cpu_s": store.own_cpu_s, "wall_s": wall}


def child(objects: int) -> dict[str, float]:
    """Body of the child process: warm up, then measure one round."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(_round(1000))  # warm-up: imports, regex caches, metrics registry
    before = _memory_kib("VmRSS")
    reset = _reset_peak()
    figures = asyncio.run(_round(objects))
    after = _memory_kib("VmHWM")
    return {**figures, "rss_before_kib": before, "rss_peak_kib": after, "peak_reset": reset}


def _memory_kib(field: str) -> int:
    """A /proc/self/status figure (VmRSS now, VmHWM peak) in KiB; ru_maxrss elsewhere."""
    kib = proc_status_kib(field)
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) if kib is None else kib


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs "5"), so the peak is the round's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Measure both sizes `runs` times each, alternating, each in a fresh process."""
    small, large = _SIZES[scale]
    report = Report(NAME, TITLE, scale, runs)
    samples: dict[int, list[dict[str, float]]] = {small: [], large: []}
    for _ in range(runs):
        for size in (small, large):
            done = run_child(
                [PYTHON, "-m", "bench.client_cost", "--child", str(size)], env=child_env()
            )
            if done.returncode != 0:
                raise RuntimeError(f"client_cost child failed: {done.stderr[-2000:]}")
            samples[size].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    peaks = {}
    for size, figures in samples.items():
        net = median([(f["cpu_s"] - f["store_cpu_s"]) / f["deleted"] * 1e6 for f in figures])
        gross = median([f["cpu_s"] / f["deleted"] * 1e6 for f in figures])
        fake = median([f["store_cpu_s"] / f["deleted"] * 1e6 for f in figures])
        rate = median([f["deleted"] / f["wall_s"] for f in figures])
        before = median([f["rss_before_kib"] / 1024 for f in figures])
        peak = median([f["rss_peak_kib"] / 1024 for f in figures])
        peaks[size] = peak
        rows.append((f"{size:,}", net, gross, fake, rate, before, peak, peak - before))
        report.goals.append(
            Goal(
                f"CPU per deleted key at {size:,} objects (net of the fake)",
                f"{net:.2f} us",
                "<= 10 us",
                net <= 10,
            )
        )
    growth = peaks[large] / peaks[small] - 1
    report.goals.append(
        Goal(
            f"peak RSS growth from {small:,} to {large:,} objects",
            f"{growth:+.1%}",
            "< 10%",
            growth < 0.10,
        )
    )
    report.tables.append(
        Table(
            "One round, all objects garbage, default RoundConfig (8 deleters, 4 listers, "
            "batches of 1000)",
            (
                "objects",
                "CPU us/key, sweeper (net)",
                "CPU us/key, gross",
                "CPU us/key, the fake",
                "keys/s (wall, CPU-bound)",
                "RSS before round, MiB",
                "peak RSS, MiB",
                "growth in round, MiB",
            ),
            tuple(rows),
        )
    )
    report.notes += [
        (
            "Baseline for client CPU on a real server: see table 1 (client CPU us/key of "
            "gcd sweep, s5cmd and the naive script on moto, which adds the HTTP client and "
            "XML parsing)."
        ),
        (
            "RSS before the round includes the interpreter, aiobotocore-free imports of the "
            "sweeper, prometheus-client and structlog; the fake holds no objects."
        ),
    ]
    report.raw["samples"] = {str(k): v for k, v in samples.items()}
    return report


def main() -> int:
    """`--child N`: run one measured round and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=int, required=True, help="objects in the bucket")
    args = parser.parse_args()
    sys.stdout.write(json.dumps(child(args.child)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
