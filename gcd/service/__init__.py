"""The sweeping process: `runtime` (every command's pieces, opened on one etcd client and
owned together) and `daemon` (rounds forever, with probes, metrics and the M picture).

May import: every layer of gcd below the Spark pipeline and the commands.
"""
