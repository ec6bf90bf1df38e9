"""Reproducible benchmarks of l0gc against what a user would run instead.

Run them with `.venv/bin/python -m bench [--quick] [--only NAME] [--runs N]` (or
`make bench`). Each benchmark is one module with a `run(scale, runs)` function that
returns a `bench.common.Report`; `bench.__main__` runs them and prints Markdown. The
recorded figures, with the command, date and machine, are in `bench/RESULTS.md`.

Benchmarks are not tests: nothing here asserts a timing. The smoke test in
`tests/bench/` only runs each benchmark at toy size and checks the shape of its report.
"""

__all__ = ["BENCHMARKS"]

BENCHMARKS: dict[str, str] = {
    "watermark": "bench.watermark_path",
    "throughput": "bench.throughput",
    "latency": "bench.latency",
    "list_cost": "bench.list_cost",
    "client_cost": "bench.client_cost",
    "spark": "bench.spark",
    "failover": "bench.failover",
    "writer_api": "bench.writer_api",
    "global_m": "bench.global_m",
    "skip_ahead": "bench.skip_ahead",
    "azure": "bench.azure",
    "versions": "bench.versions",
    "gcs": "bench.gcs",
    "explain": "bench.explain",
    "undo": "bench.undo",
    "scrub": "bench.scrub",
}
"""Benchmark name (for `--only`) -> module; run in this order."""
