"""`gcd demo`: the whole collector on one machine, with a ground truth to check it against.

- `gcd.testing.ledger` (shared with the simulation): which objects are still referenced.
- `gcd.demo.workload`: simulated writers and a lagging reconciler on the real Publisher.
- `gcd.demo.s3io`: the demo's own S3 client, and the store wrapper that watches deletes.
- `gcd.demo.azio`: the demo's own Azure Blob client (`--storage azure`).
- `gcd.demo.storage`: which store a run uses, S3 or Azure, opened in one place.
- `gcd.demo.view`: the live view on a terminal, progress log lines otherwise.
- `gcd.demo.verify`: the read-back at the end and the summary.
- `gcd.demo.runner`: one run, phase by phase.

The command itself (servers, signals, output) is `gcd.cli.demo`.

May import: `watermark` (below its API), and gcd's layers up to `testing` and `sim`.
"""
