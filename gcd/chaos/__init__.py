"""`gcd chaos`: the whole system as real processes on one machine, under a nemesis, checked.

`gcd simulate` proves the rules in memory; this runs the real processes (a 3-member etcd
cluster, an S3 server behind a fault proxy, `watermark serve` publishers, writers over
the HTTP API and embedded ones, reconcilers, sharded `gcd daemon` sweepers with their
deletion journal), kills, freezes, restarts and throttles them on a seeded schedule, and
checks the recorded history afterwards, as Jepsen does:

- `gcd.chaos.config`: the run's sizes and timings, the fault kinds, the broken builds.
- `gcd.testing.procs`: child processes, signalled and stopped by PID.
- `gcd.chaos.cluster`: the processes of a run and the operations on them.
- `gcd.chaos.records`: partition logs and histories, as JSON lines.
- `gcd.chaos.writer`, `gcd.chaos.backends`: the writer processes.
- `gcd.chaos.reconciler`: one lagging reconciler per partition.
- `gcd.chaos.nemesis`: the faults, one at a time, each healed and recovered from.
- `gcd.chaos.monitor`: M, the sweepers and the first loss, while it runs.
- `gcd.chaos.checker`: the verdict over the whole history (pure).
- `gcd.chaos.runner`, `gcd.chaos.report`, `gcd.chaos.view`: one run, its report, its view.
- `gcd.chaos.broken_serve`: `watermark serve` with a deliberately broken part.

The command itself is `gcd.cli.chaos`; the recorded long run is in docs/reliability.md.

May import: `watermark` (below its API), and gcd's layers up to `demo`.
"""
