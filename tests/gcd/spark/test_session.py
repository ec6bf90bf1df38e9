"""`spark_session` on a session that already runs (the test fixture stands for a notebook
or spark-submit's): --conf applies runtime settings for the run only and refuses the
ones fixed at start; --py-files are shipped; task slots come from what Spark granted."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from gcd.spark.session import spark_session, task_slots
from l0gc.errors import ConfigError

pytestmark = [pytest.mark.spark]

BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


def test_runtime_conf_holds_for_the_run_and_is_put_back(spark: Any) -> None:
    """A runtime SQL setting given with --conf is in force inside, and the running
    session's own value is back afterwards."""
    before = spark.conf.get(BATCH)
    with spark_session(conf={BATCH: "7"}) as session:
        assert session is spark
        assert session.conf.get(BATCH) == "7"
    assert spark.conf.get(BATCH) == before


def test_a_setting_fixed_at_start_is_refused_on_a_running_session(spark: Any) -> None:
    """spark.executor.memory cannot change in a running session: ConfigError says where
    to set it, instead of being silently ignored."""
    with (
        pytest.raises(ConfigError, match="fixed when the Spark session starts"),
        spark_session(conf={"spark.executor.memory": "2g"}),
    ):
        pass


def test_py_files_reach_the_executors(spark: Any, tmp_path: Path) -> None:
    """A zip given as py_files is importable in the tasks."""
    zipped = tmp_path / "l0gc_probe_pkg.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("l0gc_probe_pkg/__init__.py", "ANSWER = 42\n")
    with spark_session(py_files=[str(zipped)]) as session:

        def probe(_rows: Any) -> Any:
            import l0gc_probe_pkg  # type: ignore[import-not-found]  # noqa: PLC0415

            yield l0gc_probe_pkg.ANSWER

        found = session.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()
    assert found == [42]


def test_task_slots_are_the_local_threads(spark: Any) -> None:
    """The fixture's local[2] runs two tasks at once."""
    assert task_slots(spark) == 2
