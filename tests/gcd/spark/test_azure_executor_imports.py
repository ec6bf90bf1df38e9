"""What Spark executors import for `--storage azure` needs only the synchronous Azure SDK
(azure-storage-blob), boto3's botocore, pandas and pyarrow: no aiohttp (the aio client's
transport), aiobotocore, structlog, aetcd or prometheus_client."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from gcd.spark.package import DRIVER_ONLY_MODULES
from gcd.storage.azure.settings import AZURE_EXECUTOR_REQUIREMENTS

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
    import gcd.storage.azure.inventory, gcd.storage.azure.executor, gcd.storage.executor
    import gcd.spark.delete, gcd.spark.listing, gcd.spark.nesting
    from azure.core.exceptions import HttpResponseError
    from l0gc.errors import StorageError
    from gcd.rules.backoff import Backoff
    from gcd.storage.azure.executor import AzureTarget, call_with_retries
    from gcd.storage.executor import ExecutorStore
    from gcd.storage.azure.settings import AzureSettings

    def busy():
        error = HttpResponseError(message="busy")
        error.status_code, error.error_code = 503, "ServerBusy"
        raise error

    try:
        call_with_retries(busy, what="Blob Batch", backoff=Backoff(max_attempts=2),
                          sleep=lambda s: None)
    except StorageError as exc:
        print("translated", exc.code, exc.retryable)
    target = AzureTarget(AzureSettings("http://127.0.0.1:1/acct", "ctr"))
    print("store", isinstance(target, ExecutorStore))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("loaded", loaded)
    """
)


def test_azure_executor_modules_import_without_driver_dependencies() -> None:
    """The Azure listing, delete and inventory code imports and translates Azure errors
    with the driver-only modules blocked, and `AzureTarget` is an `ExecutorStore`."""
    blocked = ",".join(sorted(DRIVER_ONLY_MODULES))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, blocked],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "translated ServerBusy True" in done.stdout
    assert "store True" in done.stdout
    assert "loaded []" in done.stdout


def test_azure_executor_requirements_are_not_driver_only() -> None:
    assert set(AZURE_EXECUTOR_REQUIREMENTS) == {"azure-storage-blob", "azure-identity"}
    assert not set(AZURE_EXECUTOR_REQUIREMENTS) & DRIVER_ONLY_MODULES
