"""Google Cloud Storage: one folder, everything gcd knows of this store.

`settings` (naming the store), `backend` (its `gcd.storage.backend.Backend`: open,
preflight, store URLs), `client` (the async sweeper store), `wire` (its sans-IO wire
format), `executor` (the Spark executors' synchronous client) and `inventory` (reading its
inventory reports in Spark).

May import the kernel (`l0gc`), `gcd.rules` and the rest of `gcd.storage`.
"""
