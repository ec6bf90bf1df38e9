"""What running on a cluster needs from the options, checked without a Spark session:
job-wide delete limits split between the delete tasks, task slots of local masters,
the decisions URI a cluster can share, and --conf / --py-files reaching the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcd.cli.main import main
from gcd.cli.options import resolve
from gcd.cli.spark import add_arguments, parse_run
from gcd.spark.delete import DeleteSettings
from gcd.spark.pipeline import decisions_uri_problem
from gcd.spark.session import check_py_files, local_task_slots, parse_conf
from gcd.storage.s3.executor import S3Target
from l0gc import exitcodes
from l0gc.errors import ConfigError
from l0gc.options import CommandParser

TARGET = S3Target("bucket")


def test_job_limits_are_split_equally_between_delete_tasks() -> None:
    """Four tasks of a 200/s, 8-in-flight job get 50/s and 2 requests each; never 0."""
    each = DeleteSettings.for_job(
        TARGET, tasks=4, dry_run=False, max_deletes_per_second=200.0, delete_concurrency=8
    )
    assert (each.deletes_per_second, each.threads) == (50.0, 2)
    many = DeleteSettings.for_job(TARGET, tasks=16, delete_concurrency=8)
    assert (many.deletes_per_second, many.threads) == (None, 1)
    with pytest.raises(ConfigError, match="delete tasks 0"):
        DeleteSettings.for_job(TARGET, tasks=0)


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[*]", 6),
        ("local[2,4]", 2),
        ("local-cluster[2,3,1024]", 6),
        ("spark://127.0.0.1:7077", None),
        ("yarn", None),
    ],
)
def test_local_task_slots_read_the_master(master: str, slots: int | None) -> None:
    """Local masters say their task threads (local[*] = the CPUs); cluster masters do not."""
    assert local_task_slots(master, cpu_count=6) == slots


def test_a_plain_decisions_path_is_refused_only_off_a_local_master() -> None:
    """A path on the driver's disk is fine for local[*] and refused for spark://, a shared
    URI is fine everywhere."""
    assert decisions_uri_problem("local[2]", "/out/decisions") is None
    assert decisions_uri_problem("spark://h:7077", "hdfs:///l0gc/d") is None
    assert decisions_uri_problem("yarn", "file:///mnt/shared/d") is None
    problem = decisions_uri_problem("spark://h:7077", "/out/decisions")
    assert problem is not None
    assert "'/out/decisions'" in problem
    assert "hdfs://" in problem


def test_sweep_on_a_cluster_master_without_a_shared_decisions_uri_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--master spark://...` with the default DIR/decisions exits 2 before any Spark work
    and says what to give; a report (no decisions) is not refused for it."""
    code = main(
        [
            "spark-sweep",
            "--bucket",
            "b",
            "--list",
            "--safe-epoch",
            "3",
            "--master",
            "spark://127.0.0.1:1",
            "--output",
            str(tmp_path),
        ]
    )
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "is a path on this machine" in err
    assert "--decisions-uri hdfs://" in err


def parsed(argv: list[str], environ: dict[str, str] | None = None) -> object:
    """The JobConfig of `gcd spark-sweep argv` (flags > env > config > defaults)."""
    parser = CommandParser(prog="gcd spark-sweep")
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.command = "spark-sweep"
    resolve(args, parser.options, environ=environ or {})
    return parse_run(args)


BASE = ["--bucket", "b", "--list", "--output", "out"]


def test_conf_flags_env_and_config_table_reach_the_job(tmp_path: Path) -> None:
    """Repeated --conf flags, L0GC_CONF lines and a [conf] table all become the job's
    session settings; --py-files and --delete-tasks come through too."""
    zipped = tmp_path / "l0gc-spark.zip"
    zipped.write_bytes(b"PK")
    job = parsed(
        [
            *BASE,
            "--conf",
            "spark.executor.memory=2g",
            "--conf",
            "spark.pyspark.python=/opt/py/bin/python",
            "--py-files",
            str(zipped),
            "--delete-tasks",
            "3",
        ]
    )
    assert job.conf == {  # type: ignore[attr-defined]
        "spark.executor.memory": "2g",
        "spark.pyspark.python": "/opt/py/bin/python",
    }
    assert job.py_files == (str(zipped),)  # type: ignore[attr-defined]
    assert job.delete_tasks == 3  # type: ignore[attr-defined]
    from_env = parsed(BASE, {"L0GC_CONF": "spark.a.b=1\nspark.c=x=y\n"})
    assert from_env.conf == {"spark.a.b": "1", "spark.c": "x=y"}  # type: ignore[attr-defined]
    config = tmp_path / "gcd.toml"
    config.write_text('[conf]\n"spark.executor.cores" = 2\n"spark.eventLog.enabled" = true\n')
    from_file = parsed([*BASE, "--config", str(config)])
    assert from_file.conf == {  # type: ignore[attr-defined]
        "spark.executor.cores": "2",
        "spark.eventLog.enabled": "true",
    }


def test_bad_conf_and_py_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    """A setting without '=' or outside spark.*, a wheel, or a missing zip is refused."""
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_conf(["spark.executor.memory"])
    with pytest.raises(ValueError, match="not a Spark setting"):
        parse_conf(["executor.memory=2g"])
    with pytest.raises(ConfigError, match="flag --conf: invalid value"):
        parsed([*BASE, "--conf", "memory=2g"])
    wheel = tmp_path / "l0gc-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    with pytest.raises(ConfigError, match="not a wheel"):
        check_py_files([str(wheel)])
    with pytest.raises(ConfigError, match="does not exist"):
        check_py_files([str(tmp_path / "missing.zip")])
    check_py_files(["hdfs:///libs/l0gc-spark.zip"])  # remote: Spark fetches it
