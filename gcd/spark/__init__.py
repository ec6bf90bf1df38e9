"""The PySpark pipeline for buckets too big for one machine (`gcd spark-sweep/-report`).

    source (S3 Inventory: `inventory.read_inventory`, or a distributed ListObjectsV2:
            `listing.list_objects`)  -> DataFrame (key, size, last_modified_s)
    -> `transforms.classify`  (gcd.decision.decide on executors; M broadcast)
    -> `delete.apply_deletes` (boto3 DeleteObjects on executors) -> decisions
    or `report.write_report`  (tables, summary, chart)

Importing this package does not import pyspark: every function that needs it imports
it when called, so the CLI can say "install l0gc[spark]" when it is missing. The
SparkSession is made only at the entry points (`session.spark_session`).
"""

from gcd.spark.delete import DECISIONS_SCHEMA, DeleteSettings, apply_deletes, delete_keys
from gcd.spark.inventory import InventoryFormat, InventoryManifest, read_inventory
from gcd.spark.listing import list_objects, listing_tasks
from gcd.spark.report import ReportSettings, monthly_cost, write_report
from gcd.spark.s3client import S3Target
from gcd.spark.session import require_pyspark, spark_session
from gcd.spark.transforms import Action, LayoutSpec, classify

__all__ = [
    "DECISIONS_SCHEMA",
    "Action",
    "DeleteSettings",
    "InventoryFormat",
    "InventoryManifest",
    "LayoutSpec",
    "ReportSettings",
    "S3Target",
    "apply_deletes",
    "classify",
    "delete_keys",
    "list_objects",
    "listing_tasks",
    "monthly_cost",
    "read_inventory",
    "require_pyspark",
    "spark_session",
    "write_report",
]
