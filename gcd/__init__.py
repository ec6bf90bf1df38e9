"""l0gc sweeper side: key layouts, the sweeper, its daemon and CLIs, the Spark pipeline.

Layers, lowest first, above all of `watermark`; a layer imports only the layers below
it (tests/test_layers.py):

- `gcd.errors`: the sweeper's errors (storage), beside `watermark.errors`.
- `gcd.rules`: every pure decision: key layout, delete-or-keep, the next listing cursor
  (skip-ahead), DeleteObjects answer triage, retry backoff, admission of a round.
- `gcd.storage`: the object stores (S3, Azure Blob) behind one interface, their error
  codes, the retry loop and the request-rate limiter.
- `gcd.sweep`: the async sweeper, its deleter, brake, daemon, journal and metrics.
- `gcd.spark`: the PySpark pipeline (the same rules, on executors).
- `gcd.testing`: local servers, the fault proxy, in-memory stores, a local Spark cluster
  (tests, benchmarks, `gcd demo`, `gcd chaos` and `gcd simulate` use them).
- `gcd.sim`, `gcd.demo`, `gcd.chaos`: the simulation, the demo and the chaos harness.
- `gcd.cli`: the `gcd` command.

`gcd.__main__` is the composition root of the `gcd` command.
"""

__version__ = "0.1.0"
