"""What the deletion journal costs a sweeper per deleted key: CPU of the real writer.

    .venv/bin/python -m bench.journal_cost [--batches 100] [--runs 5] [--tree DIR]

Writes `--batches` requests of 1,000 keys each (the dense case's keys,
`bench.paired.case_keys`) through the real `gcd.journal.records.JournalWriter` into a
temporary directory, as the deleter calls it: a before record, then an after record
saying every key was deleted; then closes the segment (its index is written). Reported:
CPU (user + system, `time.process_time`) per key, the median of `--runs` runs, with
fsync on (what `gcd sweep --journal-dir` does) and off, and the share of each record
kind and of the close. `--tree` imports `gcd` from another checkout (a worktree of an
earlier commit), for a before/after comparison with the same bench.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_BATCH = 1000


def _run_once(gcd: Any, keys: list[str], epochs: list[int], fsync: bool) -> dict[str, float]:
    """CPU seconds spent in before, after and close over every batch."""
    spent = {"before": 0.0, "after": 0.0, "close": 0.0}
    with tempfile.TemporaryDirectory(prefix="l0gc-journal-cost-") as scratch:
        writer = gcd.JournalWriter(
            Path(scratch), "bench", namespace="/ns", bucket="b", root="r", fsync=fsync
        )
        basis = gcd.DeleteBasis(10**6, 10**6 + 1, 4242, pinning=(("p/0", 10**6),))
        clock = time.process_time
        for number, start in enumerate(range(0, len(keys), _BATCH), start=1):
            batch = tuple(keys[start : start + _BATCH])
            attempt = gcd.BatchAttempt(
                basis, batch, tuple(epochs[start : start + _BATCH]), 0, number, number
            )
            outcome = gcd.BatchOutcome(attempt, deleted=batch)
            began = clock()
            writer.before(attempt)
            middle = clock()
            writer.after(outcome)
            spent["before"] += middle - began
            spent["after"] += clock() - middle
        began = clock()
        writer.close()
        spent["close"] += clock() - began
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench.journal_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--batches", type=int, default=100, help="1,000-key requests per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per setting (median)")
    parser.add_argument("--tree", default=None, help="import gcd from this checkout")
    args = parser.parse_args(argv)
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    from types import SimpleNamespace  # noqa: PLC0415

    from bench.paired import case_keys  # noqa: PLC0415
    from gcd.journal import records  # noqa: PLC0415
    from gcd.observe import events  # noqa: PLC0415

    gcd = SimpleNamespace(
        JournalWriter=records.JournalWriter,
        DeleteBasis=events.DeleteBasis,
        BatchAttempt=events.BatchAttempt,
        BatchOutcome=events.BatchOutcome,
    )
    keys, _ = case_keys("dense", args.batches * _BATCH)
    epochs = [int(key.split("/")[-2]) for key in keys]
    print(
        f"### journal CPU per key: {len(keys):,} keys in {args.batches} requests of {_BATCH:,} "
        f"(gcd from {Path(records.__file__).parents[2]}), median of {args.runs} runs"
    )
    print("| fsync | before us/key | after us/key | close us/key | total us/key |")
    print("|---|---|---|---|---|")
    for fsync in (True, False):
        runs = [_run_once(gcd, keys, epochs, fsync) for _ in range(args.runs)]
        parts = {
            part: statistics.median(run[part] for run in runs) / len(keys) * 1e6
            for part in ("before", "after", "close")
        }
        total = statistics.median(sum(run.values()) for run in runs) / len(keys) * 1e6
        print(
            f"| {'on' if fsync else 'off'} | {parts['before']:.3f} | {parts['after']:.3f} "
            f"| {parts['close']:.3f} | {total:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
