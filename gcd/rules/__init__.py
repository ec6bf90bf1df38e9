"""Every pure decision of the sweeper side, shared by the async sweeper and Spark.

Lives here: `layout` (the key layout: format and parse epoch-stamped keys), `decision`
(delete, keep or skip one key against M), `xmlkeys` (keys S3's XML cannot carry).

May import: the standard library's data modules, `watermark.errors`, `watermark.core`
and `gcd.errors`. No I/O, clock or randomness (tests/test_layers.py checks it).
"""
