"""`gcd chaos`: the whole system as real processes on one machine, under a nemesis, checked.

`gcd simulate` proves the rules in memory; this runs the real processes (a 3-member etcd
cluster, an S3 server behind a fault proxy, `watermark serve` publishers, writers over
the HTTP API and embedded ones, reconcilers, sharded `gcd daemon` sweepers with their
deletion journal), kills, freezes, restarts and throttles them on a seeded schedule, and
checks the recorded history afterwards, as Jepsen does:

- `l0lab.chaos.config`: the run's sizes and timings, the fault kinds, the broken builds.
- `l0lab.testing.procs`: child processes, signalled and stopped by PID.
- `l0lab.chaos.cluster`: the processes of a run and the operations on them.
- `l0lab.chaos.records`: partition logs and histories, as JSON lines.
- `l0lab.chaos.writer`, `l0lab.chaos.backends`: the writer processes.
- `l0lab.chaos.reconciler`: one lagging reconciler per partition.
- `l0lab.chaos.nemesis`: the faults, one at a time, each healed and recovered from.
- `l0lab.chaos.monitor`: M, the sweepers and the first loss, while it runs.
- `l0lab.chaos.checker`: the verdict over the whole history (pure).
- `l0lab.chaos.runner`, `l0lab.chaos.report`, `l0lab.chaos.view`: one run, its report, its view.
- `l0lab.chaos.broken_serve`: `watermark serve` with a deliberately broken part.

The command itself is `gcd.cli.chaos`; the recorded long run is in docs/reliability.md.

May import: `watermark` and `gcd` (not `gcd.cli`), and `l0lab`'s layers up to `demo`.
"""
