"""The object stores behind one interface: one folder per store, one registry.

`objectstore` (the `ObjectStore` interface the sweeper uses), `backend` (the `Backend`
protocol a store folder provides, and `StoreSettings`), `registry` (each kind's backend,
opening and checking the store settings name, store URLs), the folders `s3`, `azure` and
`gcs`, and what they share: `retry` (the async retry loop), `ratelimit`, `executor` (the
Spark executors' store protocol), `sync_retry` (their retry loop) and `rows` (the row
transforms Spark applies to listings and inventories).

May import: the kernel (`l0gc`) and `gcd.rules`.
"""
