"""Every pure decision of the sweeper side, shared by the async sweeper and Spark.

`layout` (format and parse epoch-stamped keys, shard the prefixes), `decision` (delete,
keep or skip one key against M), `cursor` (skip-ahead), `triage` (what a DeleteObjects
answer means per key), `backoff` (the retry policy), `admission` (which M a round may
use), `candidate` (a key selected for deletion), `xmlkeys` (keys S3's XML cannot carry),
and the rules of listing growth, splitting, the undo window, usage and prices.

May import: the standard library's data modules and the kernel's pure units (`l0gc.errors`,
`l0gc.contract`, `l0gc.strictjson`, `l0gc.display`, `l0gc.events`). No I/O, clock or
randomness (tests/test_layers.py checks it).
"""
