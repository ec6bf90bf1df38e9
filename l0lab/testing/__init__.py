"""Support for tests, benchmarks, the demo, the simulation and the chaos harness.

Lives here: `local_servers` (etcd and moto on free loopback ports, stopped by PID),
`local_seaweedfs`, `local_azurite`, `local_replicas` (replicated `watermark serve`),
`spark_cluster` (a Spark standalone cluster on loopback), `faultproxy` (an HTTP proxy
that injects faults), `procs` (child processes, signalled by PID), `memory` (the
in-memory object store). Nothing in the daemon or the sweep path imports this.

May import: `watermark` and `gcd` (not `gcd.cli`).
"""
