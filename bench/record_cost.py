"""Where one partition record's parse goes: each step of a bulk read, timed alone.

    .venv/bin/python -m bench.record_cost [--passes 5] [--number 100000]

A 1M-record `gcd status` (or a daemon's cold start) validates every record in full
(`l0gc.contract.record`: a malformed one makes M undefined), so its time is about
a million times what one record costs. This times, on the realistic record the status
benchmark seeds (`bench.watermark_path._record`), the steps of that parse in a hot loop
(µs per call: the fastest of `--passes` passes of `--number` calls, the passes
interleaved across the steps): the strict JSON parse
(`l0gc.strictjson.loads`) and its parts, the field checks, and the whole
`_checked_fields`. No server: the gRPC read and the index are measured by
`bench.status_scale` and the profile in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable

import msgspec

from bench.watermark_path import _record
from l0gc import strictjson
from l0gc.contract.record import MAX_RECORD_BYTES, MAX_RECORD_DEPTH, _checked_fields, _fields


def _steps(raw: bytes, name: str) -> dict[str, Callable[[], object]]:
    text = raw.decode()
    decoder, encoder = msgspec.json.Decoder(), msgspec.json.Encoder()
    value = decoder.decode(text)
    return {
        "UTF-8 decode": lambda: raw.decode("utf-8"),
        "nesting bound (bracket counts)": lambda: strictjson._check_depth(
            text, what="x", max_depth=MAX_RECORD_DEPTH
        ),
        "msgspec decode": lambda: decoder.decode(text),
        "no duplicate key (encode back, count ':')": lambda: (
            encoder.encode(value).count(b":") == text.count(":")
        ),
        "no integer -0 (search)": lambda: strictjson._NEGATIVE_ZERO.search(text),
        "strictjson.loads, whole": lambda: strictjson.loads(
            raw, what="x", max_bytes=MAX_RECORD_BYTES, max_depth=MAX_RECORD_DEPTH
        ),
        "field checks (_fields)": lambda: _fields(value, name),
        "_checked_fields, whole": lambda: _checked_fields(raw, name),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench.record_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--number", type=int, default=100_000)
    args = parser.parse_args(argv)
    name = "topic-00001/12"
    raw = _record("x", 1000).replace(b'"partition":"x"', f'"partition":"{name}"'.encode())
    print(f"record: {len(raw)} bytes; µs per call, min of {args.passes} x {args.number:,}")
    print("| step | µs |")
    print("|---|---|")
    steps = _steps(raw, name)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(args.passes):  # interleaved: a slower spell of the machine hits every step
        for step, call in steps.items():
            best[step] = min(best[step], timeit.timeit(call, number=args.number))
    for step, seconds in best.items():
        print(f"| {step} | {seconds / args.number * 1e6:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
