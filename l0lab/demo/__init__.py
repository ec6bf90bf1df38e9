"""`gcd demo`: the whole collector on one machine, with a ground truth to check it against.

- `l0lab.testing.ledger` (shared with the simulation): which objects are still referenced.
- `l0lab.demo.workload`: simulated writers and a lagging reconciler on the real Publisher.
- `l0lab.demo.s3io`: the demo's own S3 client, and the store wrapper that watches deletes.
- `l0lab.demo.azio`: the demo's own Azure Blob client (`--storage azure`).
- `l0lab.demo.storage`: which store a run uses, S3 or Azure, opened in one place.
- `l0lab.demo.view`: the live view on a terminal, progress log lines otherwise.
- `l0lab.demo.verify`: the read-back at the end and the summary.
- `l0lab.demo.runner`: one run, phase by phase.

The command itself (servers, signals, output) is `gcd.cli.demo`.

May import: `watermark` and `gcd` (not `gcd.cli`), and `l0lab.testing` and `l0lab.sim`.
"""
