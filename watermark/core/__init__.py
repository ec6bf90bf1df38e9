"""The pure core: every rule of the tracker and the etcd contract, decided without I/O.

Lives here: `window` (the sliding epoch window), `fencelock` (the fence lock as a state
machine), `events` (what the core reports to instrumentation), `gcstate` and `snapshot`
(a partition's applied window and M(p)), `record` and `contract` (the documents and rules
of the etcd contract), `safe_epoch` and `gcindex` (the global M, in one read or change by
change), `assignment` (which replica owns which partition), `binding` (a namespace bound
to its storage), `kv` (the key-value interface the store is written against),
`strictjson` and `display` (bounded JSON in, printable text out).

May import: the standard library's data modules and `watermark.errors`. No asyncio,
clock, randomness, network or file access (tests/test_layers.py checks every module).
"""
