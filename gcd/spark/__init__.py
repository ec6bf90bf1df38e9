"""The PySpark pipeline for buckets too big for one machine (`gcd spark-sweep/-report`).

    source (S3 Inventory: `inventory.read_inventory`, or a distributed ListObjectsV2:
            `listing.list_objects`; Azure: `azinventory.read_blob_inventory`, or List
            Blobs through `azure.AzureTarget`)  -> DataFrame (key, size, last_modified_s)
    -> `transforms.classify`  (gcd.rules.decision.decide on executors; M broadcast)
    -> `delete.apply_deletes` (boto3 DeleteObjects, or a store's own deletes through the
       `stores.ExecutorStore` seam: Azure Blob Batch, on executors) -> decisions
    or `report.write_report`  (tables, summary, chart)

Every decision is the async sweeper's own (`gcd.rules`): which key goes (`decision`),
where a listing skips to (`cursor`), what a DeleteObjects answer means (`triage`),
when a request is retried (`backoff`) and which M the driver may use (`admission`,
through `gcd.sweep.safety.read_admission`).

Importing this package does not import pyspark: every function that needs it imports
it when called, so the CLI can say "install l0gc[spark]" when it is missing. The
SparkSession is made only at the entry points (`session.spark_session`).

May import: `watermark` (below its API), `l0gc.errors`, `gcd.rules`,
`gcd.storage`, `gcd.sweep`.
"""
