"""Where garbage collection stands, as data: `read` (the one etcd read of `gcd status`),
`report` (the `StatusReport` it builds), `fleet` (replicas, the ticker, owners), `owner`
(owners that are gone) and `why` (the partition pinned longest, the oldest kept key).
`gcd.cli.status` opens the reader and prints.

May import: every layer of gcd below the Spark pipeline and the commands.
"""
