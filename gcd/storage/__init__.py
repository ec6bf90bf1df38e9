"""The object stores behind one interface, and how their requests are made.

Lives here: `objectstore` (the `ObjectStore` interface: `list_page`, `delete_batch`),
`s3` (`S3ObjectStore`, aiobotocore), `s3errors` (S3 answers to `StorageError`),
`azure` and `azsettings` (Azure Blob Storage), `gcs`, `gcsbatch` and `gcssettings`
(Google Cloud Storage), `open` (`StoreSettings`, the one store type, and opening and
checking the store it names), `retry` (the async retry loop, under the policy of
`gcd.rules.backoff`), `ratelimit` (the request-rate limiter).

May import: `watermark` (any layer below its API), `l0gc.errors`,
`gcd.rules`.
"""
