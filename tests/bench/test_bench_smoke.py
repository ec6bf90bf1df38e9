"""Smoke test of the benchmark harness: every benchmark runs at toy size and reports.

Benchmarks are not tests: nothing here checks a timing, only that each benchmark runs
end to end (servers, subprocesses, sides) and returns a well-formed report.
"""

from __future__ import annotations

import importlib
import json
import math

import pytest

from bench import BENCHMARKS
from bench.common import Report, Scale

pytestmark = [pytest.mark.deep, pytest.mark.integration]

# The Spark benchmark belongs to the Spark work and needs a ~15 s SparkSession;
# throughput has a test of its own below (it also checks both servers).
_SMOKED = [name for name in BENCHMARKS if name not in {"spark", "throughput"}]


def _check(report: Report, name: str) -> None:
    assert report.name == name
    assert report.scale is Scale.TOY
    assert report.tables, "a report has at least one table"
    for table in report.tables:
        assert table.rows
        assert all(len(row) == len(table.columns) for row in table.rows)
        for row in table.rows:
            for cell in row:
                if isinstance(cell, float):
                    assert math.isfinite(cell)
                    assert cell >= 0
    assert report.goals
    assert all(isinstance(goal.met, bool) for goal in report.goals)
    assert report.to_markdown().startswith("### ")
    json.dumps(report.to_dict(), default=str)


@pytest.mark.parametrize("name", _SMOKED)
def test_benchmark_runs_at_toy_size(name: str) -> None:
    """Each benchmark runs once at toy size and returns a well-formed report."""
    module = importlib.import_module(BENCHMARKS[name])
    _check(module.run(Scale.TOY, 1), name)


def test_throughput_is_measured_on_both_real_s3_servers() -> None:
    """The throughput report has one table per server, moto and SeaweedFS, each with a
    server CPU per key for every side."""
    report = importlib.import_module(BENCHMARKS["throughput"]).run(Scale.TOY, 1)
    _check(report, "throughput")
    assert [t.title.split(":")[0] for t in report.tables] == ["moto", "seaweedfs"]
    for table in report.tables:
        column = table.columns.index("server CPU us/key")
        assert all(float(row[column]) > 0 for row in table.rows), table.title


def test_the_spark_journal_batch_cost_runs_on_rclone() -> None:
    """`bench.spark_journal --batch-cost` (the journal alone, on `rclone serve s3
    :memory:` from the pinned bench extra) measures a journal write and a delete."""
    from bench.spark_journal import batch_cost  # noqa: PLC0415 - a script's module

    measured = batch_cost(batches=8)
    assert set(measured) == {"journal_wall_ms", "journal_cpu_ms", "delete_wall_ms"}
    assert all(value > 0 for value in measured.values())


def test_the_references_benchmark_runs_at_toy_size() -> None:
    """`bench.references` (a script's module, `python -m bench.references`) measures its
    three figures at toy size: batched commits with and without keys, memory per held
    entry, and the record's size, with one record read back from etcd."""
    from bench.references import NAME, run  # noqa: PLC0415 - a script's module

    report = run(Scale.TOY, 1)
    _check(report, NAME)
    throughput, memory, record = report.tables
    assert [row[0] for row in throughput.rows] == [
        "no objects",
        "1 key per entry",
        "4 keys per entry",
        "4 keys per batch (named once)",
    ]
    assert all(row[2] > 0 for row in memory.rows if isinstance(row[2], float))
    assert any(str(row[0]).startswith("as the publisher stored it") for row in record.rows)
