"""The PySpark pipeline for buckets too big for one machine (`gcd spark-sweep/-report`).

A source (an inventory, or a distributed listing through the store's executor client in
`gcd.storage.<kind>`) becomes a DataFrame of keys, classified on executors with the async
sweeper's own rules (`gcd.rules`), then deleted in batches (`delete`) or reported
(`report`). Importing this package does not import pyspark; the SparkSession is made
only at the entry points (`session`). docs/spark.md and docs/internals/spark.md say more.

May import: the kernel (`l0gc`), `gcd.rules`, `gcd.storage`, `gcd.observe`,
`gcd.journal`, `gcd.undo`, `gcd.sweep`, `gcd.explainer`, `gcd.service`.
"""
