"""Every pure decision of the sweeper side, shared by the async sweeper and Spark.

Lives here, one home per rule:

- `layout`: the key layout: format and parse epoch-stamped keys, shard the prefixes;
- `decision`: delete, keep or skip one key against M (`decide`);
- `cursor`: skip-ahead: where the next LIST starts, and when a listing prefix is done;
- `triage`: what a DeleteObjects answer means per key, and which error codes are
  retryable, throttling or worth bisecting;
- `backoff`: the retry policy: which failures are retried, how often, how long;
- `admission`: which M a round may use, or why it may delete nothing;
- `xmlkeys`: keys S3's XML cannot carry.

The async sweeper (`gcd.sweep`) and the Spark pipeline (`gcd.spark`) do the I/O and
ask these modules what to do.

May import: the standard library's data modules and the kernel's pure units (`l0gc.errors`,
`l0gc.contract`, `l0gc.strictjson`, `l0gc.display`, `l0gc.events`). No I/O, clock or
randomness (tests/test_layers.py checks it).
"""
