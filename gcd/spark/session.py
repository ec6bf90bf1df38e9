"""The SparkSession for `gcd spark-sweep` / `gcd spark-report` (entry points only).

Design notes: docs/internals/spark.md, `gcd.spark.session`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError

__all__ = [
    "PY_FILE_SUFFIXES",
    "QUIET_CONF",
    "check_py_files",
    "is_local_master",
    "local_task_slots",
    "parse_conf",
    "parse_py_files",
    "require_pyspark",
    "spark_session",
    "task_slots",
]

QUIET_CONF: Mapping[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    # Arrow batches feed mapInPandas; this bounds the memory of one batch.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.session.timeZone": "UTC",
}
PY_FILE_SUFFIXES = (".zip", ".egg", ".jar", ".py")
"""What PySpark puts on an executor's path (a wheel is not among them)."""

PYSPARK_MISSING = (
    "PySpark is not installed: install the Spark extra with pip install 'l0gc[spark]' "
    "(pyspark, pyarrow, pandas<3, matplotlib)"
)
_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]")


def require_pyspark() -> None:
    """Raise ConfigError naming the extra to install when pyspark/pyarrow are missing."""
    try:
        import pandas  # noqa: F401, PLC0415
        import pyarrow  # noqa: F401, PLC0415
        import pyspark  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ConfigError(PYSPARK_MISSING) from exc


def is_local_master(master: str) -> bool:
    """True when the driver and its executors share one machine and file system
    (`local`, `local[N]`, `local[*]`, `local[N,F]`, `local-cluster[...]`)."""
    return master.startswith("local")


def local_task_slots(master: str, cpu_count: int) -> int | None:
    """Task threads of a local master (local[*] = `cpu_count`); None if not local."""
    if (match := _LOCAL.fullmatch(master.strip())) is not None:
        threads = match.group(1)
        if threads is None:
            return 1
        return cpu_count if threads == "*" else int(threads)
    if (match := _LOCAL_CLUSTER.fullmatch(master.strip())) is not None:
        return int(match.group(1)) * int(match.group(2))
    return None


def parse_conf(value: object) -> dict[str, str]:
    """Spark settings from `--conf K=V` flags (a list), an env var (one K=V per line) or a
    config-file table ({"spark.x" = "v"}); ValueError says what is expected."""
    if isinstance(value, dict):
        entries = [(str(key), item) for key, item in value.items()]
    else:
        lines = value.splitlines() if isinstance(value, str) else value
        if not isinstance(lines, list):
            raise ValueError("expected KEY=VALUE settings, e.g. spark.executor.memory=2g")
        entries = []
        for line in lines:
            key, equals, item = str(line).strip().partition("=")
            if line.strip() and not equals:
                raise ValueError(f"expected KEY=VALUE, got {line!r}, e.g. spark.executor.cores=2")
            if line.strip():
                entries.append((key, item))
    settings: dict[str, str] = {}
    for key, item in entries:
        if not key.strip().startswith("spark.") or key != key.strip():
            raise ValueError(f"{key!r} is not a Spark setting: keys start with 'spark.'")
        if isinstance(item, bool):
            settings[key] = "true" if item else "false"
        elif isinstance(item, str | int | float):
            settings[key] = str(item)
        else:
            raise ValueError(f"{key}: expected a string or number value, got {item!r}")
    return settings


def parse_py_files(value: object) -> tuple[str, ...]:
    """--py-files: comma-separated (flag, env var) or a list (config file)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected comma-separated files, e.g. l0gc-spark.zip")
    files = tuple(item.strip() for item in items if item.strip())
    if not files:
        raise ValueError("expected at least one file, e.g. l0gc-spark.zip")
    return files


def check_py_files(py_files: Sequence[str]) -> None:
    """ConfigError for a --py-files entry PySpark would not put on the path, or a
    local file that does not exist."""
    for entry in py_files:
        path = entry.split("://", 1)[-1] if entry.startswith("file://") else entry
        if not path.lower().endswith(PY_FILE_SUFFIXES):
            msg = (
                f"--py-files {entry!r}: PySpark puts only .zip, .egg, .jar and .py files on "
                "the executors' path (not a wheel); make the zip with `gcd spark-package "
                "--output l0gc-spark.zip`"
            )
            raise ConfigError(msg)
        local = "://" not in entry or entry.startswith("file://")
        if local and not Path(path).is_file():
            raise ConfigError(f"--py-files {entry!r} does not exist; give the file's path")


@contextlib.contextmanager
def _environment(changes: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _runtime_conf(session: Any, conf: Mapping[str, str]) -> Iterator[None]:
    """Set `conf` on a session we did not make, and put the old values back after."""
    saved: dict[str, str | None] = {}
    for key, value in conf.items():
        if not session.conf.isModifiable(key):
            msg = (
                f"--conf {key}={value}: {key} is fixed when the Spark session starts and this "
                "command runs in an existing one; set it where that session is made (e.g. "
                "spark-submit --conf)"
            )
            raise ConfigError(msg)
        saved[key] = session.conf.get(key, None)
    try:
        for key, value in conf.items():
            session.conf.set(key, value)
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, old)


@contextlib.contextmanager
def spark_session(
    master: str | None = None,
    *,
    app_name: str = "l0gc",
    conf: Mapping[str, str] | None = None,
    py_files: Sequence[str] = (),
    log_level: str = "ERROR",
) -> Iterator[Any]:
    """The active SparkSession, or a new one (stopped on exit) on `master`.

    `master` None: spark-submit's `--master` when run by spark-submit, else local[*].
    """
    require_pyspark()
    check_py_files(py_files)
    from pyspark import SparkContext  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    conf = dict(conf or {})
    if SparkContext._active_spark_context is not None:
        # Someone else's session (a notebook, a test fixture): use it as is, with the
        # runtime settings asked for until we are done.
        session = SparkSession.builder.getOrCreate()
        for path in py_files:
            session.sparkContext.addPyFile(path)
        with _runtime_conf(session, conf):
            yield session
        return
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM
    if master is None and not submitted:
        master = "local[*]"
    environment: dict[str, str] = {}
    if master is not None and is_local_master(master):
        environment["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
        environment["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    if "spark.pyspark.python" in conf:  # spark-submit's rule: the conf names the workers'
        environment["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    with _environment(environment):
        builder = SparkSession.builder.appName(app_name)
        if master is not None:
            builder = builder.master(master)
        for key, value in {**QUIET_CONF, **conf}.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        try:
            session.sparkContext.setLogLevel(log_level)
            for path in py_files:
                session.sparkContext.addPyFile(path)
            yield session
        finally:
            session.stop()


def _executor_cores(context: Any) -> list[int] | None:
    """Cores of each active executor (not the driver), from Spark's status store."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415

    try:
        executors = context._jsc.sc().statusStore().executorList(True)
        found = [executors.apply(index) for index in range(executors.size())]
        return [int(e.totalCores()) for e in found if str(e.id()) != "driver" and e.isActive()]
    except Py4JError:
        return None


def task_slots(session: Any) -> int:
    """How many tasks the cluster runs at once: local threads, or the cores Spark granted
    the executors registered now (after waiting for the first), over `spark.task.cpus`."""
    context = session.sparkContext
    task_cpus = max(1, int(context.getConf().get("spark.task.cpus", "1")))
    threads = local_task_slots(context.master, os.cpu_count() or 1)
    if threads is not None:
        return max(1, threads // task_cpus)
    session.range(1).count()  # a JVM-only job: returns once an executor has registered
    cores = _executor_cores(context)
    if cores:
        return max(1, sum(count // task_cpus for count in cores))
    return max(1, int(context.defaultParallelism) // task_cpus)
