"""The running Spark job's record (`l0gc.contract.spark_job`): it round-trips, and a
record that is not one is refused with the reason, never half read."""

from __future__ import annotations

import pytest

from l0gc.contract.spark_job import SparkJob, spark_job_key

JOB = SparkJob("host-1-abc", "spark-sweep", 1_795_305_600.5, 200.0, "app-1", 3, 40)


def test_a_record_round_trips_and_reads_as_one_line() -> None:
    assert SparkJob.decode(JOB.encode()) == JOB
    assert spark_job_key("/l0gc/prod") == "/l0gc/prod/jobs/spark"
    assert JOB.describe() == (
        "spark-sweep (job host-1-abc, application app-1, rate 200 keys/s, tasks 3/40)"
    )
    starting = SparkJob("host-1-abc", "spark-sweep", 1.0)
    assert SparkJob.decode(starting.encode()) == starting
    assert "application not started yet, rate unlimited)" in starting.describe()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"version": 2, "job_id": "a", "command": "c", "started_at": 1}', "version 1"),
        (b'{"version": 1, "command": "c", "started_at": 1}', "job_id"),
        (b'{"version": 1, "job_id": "a", "command": "c", "started_at": true}', "started_at"),
        (
            b'{"version": 1, "job_id": "a", "command": "c", "started_at": 1, "tasks": -1}',
            "tasks",
        ),
        (
            b'{"version": 1, "job_id": "' + b"x" * 300 + b'", "command": "c", "started_at": 1}',
            "job_id",
        ),
        (b"[1]", "version 1"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_a_record_that_is_not_one_is_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        SparkJob.decode(raw)
