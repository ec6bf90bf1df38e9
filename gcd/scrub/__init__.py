"""`gcd scrub`: prove in production that nothing live is missing, and find what GC left.

`findings` (pure: a HEAD answer's verdict, a missing key joined with the journal, the
stranded-garbage rule, partitions that never report, the report and its JSON), `head`
(one HEAD per key on each kind of store), `run` (the async shell: one etcd read, the
HEADs, the journal search, one listing of the root), `metrics` (the daemon mode's
Prometheus registry). `gcd.cli.scrub` parses flags and prints. docs/scrub.md says what
each finding means and what to do.

May import: every layer of gcd below the Spark pipeline and the commands.
"""
