"""The async publisher service: thin asyncio shells around the pure core.

Lives here: `guard` (`FencingGuard`: the asyncio shell of `watermark.core.fencelock`),
`hosted` (one partition: GC state, guard, commits), `publisher` (`Publisher`: hosts
partitions and publishes M(p)), `fence` (the Python writer's fence handle), `ticker`
(the cluster epoch ticker), `replicas` (replicated publishers under etcd leases),
`replica_view` (what a replica reads of the others), `liveness` (a publisher's liveness
key), `records` (watching the partition records), `runner` (`PublisherRunner`: one
`watermark serve`, its parts and their lifetimes), `clock` (the writers' cached epoch
clock), `metrics` (Prometheus metrics, fed by the core's events through hooks),
`eventlog` (the logging hook: one fixed log event name per core event), `buildinfo` (the
build's metric), `signals` (stop signals of every long-running command, gcd's too).

May import: `watermark.errors`, `watermark.core`, `watermark.options`, `watermark.logs`,
`watermark.etcd`.
"""
