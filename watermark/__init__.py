"""l0gc watermark: the per-partition epoch tracker and what publishes its watermark.

Layers, lowest first; a layer imports only the layers below it (tests/test_layers.py):

- `watermark.errors`: every error, grouped by who is at fault. Imports nothing.
- `watermark.core`: the pure rules (epoch window, fence lock, GC state, records, the
  etcd contract, global M, replica assignment, namespace binding). No asyncio, no I/O,
  no clock; imports `watermark.errors` only.
- `watermark.options`, `watermark.logs`, `watermark.exitcodes`: the option system every
  command uses (flag > env > config file > default), the one logging setup, and what
  each exit code of every l0gc command means.
- `watermark.etcd`: etcd I/O: the client, the in-memory KV, the store that applies the
  contract, the watch-based follower of M, connection settings.
- `watermark.service`: the async service: fencing guard, hosted partitions, publisher,
  epoch ticker, replicas, the writers' epoch clock, Prometheus metrics.
- `watermark.api`: the edges: the `watermark` command and the HTTP API.

`watermark.__main__` is the composition root of the `watermark` command. Nothing is
re-exported here: every name has one import path, its defining module's.
"""
