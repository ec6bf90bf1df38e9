"""What Spark executors import needs only boto3, pandas and pyarrow (+ pyspark's own zip).

Executors run a Python that may have none of l0gc's driver-side dependencies; the
l0gc code reaches them as the `gcd spark-package` zip. These tests run the executor
side in a child interpreter where aiobotocore, aiohttp, structlog, aetcd and
prometheus_client cannot be imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from gcd.spark.package import DRIVER_ONLY_MODULES, EXECUTOR_REQUIREMENTS

_CHILD = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not installed on this executor")
            return None

    sys.meta_path.insert(0, Block())
    import gcd.spark
    import gcd.spark.delete, gcd.spark.journal, gcd.spark.listing, gcd.spark.nesting
    import gcd.storage.rows
    from botocore.exceptions import ClientError
    from l0gc.errors import StorageError
    from gcd.rules.backoff import Backoff
    from gcd.storage.s3.executor import call_with_retries

    def throttled():
        raise ClientError({"Error": {"Code": "SlowDown", "Message": "slow"},
                           "ResponseMetadata": {"HTTPStatusCode": 503}}, "DeleteObjects")

    try:
        call_with_retries(throttled, what="DeleteObjects", backoff=Backoff(max_attempts=2),
                          sleep=lambda s: None)
    except StorageError as exc:
        print("translated", exc.code, exc.retryable)
    import gcd.storage.gcs.spark, gcd.storage.gcs.inventory
    from gcd.storage.gcs.executor import GcsTarget

    GcsTarget("bkt", "http://127.0.0.1:9", anonymous=True).client(pool=1)  # urllib3 only
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED
                    or m in {"gcd.storage.s3.client", "gcd.storage.gcs.client", "google.auth"})
    print("loaded", loaded)
    """
)


def test_executor_modules_import_without_driver_dependencies() -> None:
    """The delete, listing and classify code (S3's and GCS's) imports and translates S3
    errors with only botocore: no aiobotocore/aiohttp/structlog/aetcd; gcd.storage.s3.client and
    the daemon's GCS client are never loaded, nor google-auth for an anonymous emulator."""
    blocked = ",".join(sorted(DRIVER_ONLY_MODULES))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, blocked],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "translated SlowDown True" in done.stdout
    assert "loaded []" in done.stdout


def test_executor_requirements_name_what_the_executors_import() -> None:
    """The documented executor dependencies are boto3, pandas and pyarrow, none driver-only."""
    assert set(EXECUTOR_REQUIREMENTS) == {"boto3", "pandas", "pyarrow"}
    assert not set(EXECUTOR_REQUIREMENTS) & DRIVER_ONLY_MODULES
