"""The async publisher service: thin asyncio shells around the pure core.

`guard` (the shell of the fence lock), `hosted` (one partition), `publisher` (hosts
partitions, publishes M(p)), `fence` (the Python writer's fence handle), `ticker` (the
cluster epoch), `replicas` and `replica_view` (replicated publishers), `liveness` (a
publisher's liveness key), `records`, `runner` (one `watermark serve`), `clock` (the
writers' epoch clock), `metrics` and `eventlog` (the core's events, measured and logged).

May import the kernel (`l0gc`) and `watermark.core`.
"""
