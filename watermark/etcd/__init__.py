"""etcd I/O: the contract of `watermark.core` applied to a real (or in-memory) etcd.

Lives here: `client` (`EtcdKV`, aetcd behind the `watermark.core.kv.KV` interface),
`memory` (`MemoryKV`, revisioned, for unit tests and the simulation), `store`
(`WatermarkStore`: registration, ownership fencing, monotonic M(p), the global M),
`follow` (`GcFollower`: M kept current from an etcd watch), `settings` (how a process
is told where its etcd is, and opening the client), `session` (`LeaseSession`: one
lease kept alive, as etcd's `concurrency.Session`).

May import: `watermark.errors`, `watermark.core`, `watermark.options`, `watermark.logs`.
"""
