"""The SparkSession for `gcd spark-sweep` / `gcd spark-report` (entry points only).

Transforms never build a session: they take DataFrames. Only the CLI (and the
benchmark) call `spark_session`, which reuses the active session when there is one
(a test fixture, a notebook, `spark-submit`'s own) and then leaves it running, or
builds one with quiet defaults and stops it on exit.

On a `local[...]` master the Python workers must run the interpreter that runs the
driver (the one with pyarrow and l0gc installed), so `PYSPARK_PYTHON` defaults to
`sys.executable` there. On a cluster, ship the environment (docs/spark.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from gcd.errors import ConfigError

__all__ = ["QUIET_CONF", "require_pyspark", "slots_per_executor", "spark_session"]

QUIET_CONF: Mapping[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    # Arrow batches feed mapInPandas; this bounds the memory of one batch.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.session.timeZone": "UTC",
}

PYSPARK_MISSING = (
    "PySpark is not installed: install the Spark extra with pip install 'l0gc[spark]' "
    "(pyspark, pyarrow, pandas<3, matplotlib)"
)


def require_pyspark() -> None:
    """Raise ConfigError naming the extra to install when pyspark/pyarrow are missing."""
    try:
        import pandas  # noqa: F401, PLC0415
        import pyarrow  # noqa: F401, PLC0415
        import pyspark  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ConfigError(PYSPARK_MISSING) from exc


@contextlib.contextmanager
def spark_session(
    master: str | None = None,
    *,
    app_name: str = "l0gc",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> Iterator[Any]:
    """The active SparkSession, or a new one (stopped on exit) on `master`.

    `master` None: spark-submit's `--master` when run by spark-submit, else local[*].
    """
    require_pyspark()
    from pyspark import SparkContext  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    if SparkContext._active_spark_context is not None:
        # Someone else's session (spark-submit, a notebook, a test fixture): use it as is.
        yield SparkSession.builder.getOrCreate()
        return
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM
    if master is None and not submitted:
        master = "local[*]"
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in {**QUIET_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    try:
        yield session
    finally:
        session.stop()


def slots_per_executor(session: Any) -> int:
    """How many tasks one executor runs at once (for per-executor rate limits)."""
    conf = session.sparkContext.getConf()
    master = str(conf.get("spark.master", "local[*]"))
    task_cpus = max(1, int(conf.get("spark.task.cpus", "1")))
    if master.startswith("local"):
        inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
        threads = inside.split(",")[0].strip()
        cores = (os.cpu_count() or 1) if threads == "*" else int(threads)
    else:
        cores = int(conf.get("spark.executor.cores", "1"))
    return max(1, cores // task_cpus)
