"""`gcd spark-report` on a bucket with known contents: exact counts and bytes per epoch
and prefix, garbage (eligible + in grace) vs live, unparsable keys, and the cost; it
takes no delete options, and its line on stdout gives sizes in binary units."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gcd.cli.main import main
from gcd.cli.spark import summary_line
from gcd.rules.layout import KeyLayout
from gcd.spark.pipeline import JobConfig
from gcd.spark.report import monthly_cost
from gcd.storage.s3.settings import S3Settings
from l0gc import exitcodes
from l0lab.testing.local_servers import LocalS3

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def key(prefix: int, epoch: int, name: str) -> str:
    """A key of the default layout."""
    return f"level_zero/data/{prefix:03d}/{epoch:018d}/{name}"


def seed_known(s3_server: LocalS3, bucket: str) -> None:
    """Epochs 1-2 garbage (M = 2; one epoch-2 object young), 3-4 live, 2 unparsable, 1 outside."""
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, {key(10, 1, f"a{i}"): b"x" * 100 for i in range(3)}, last_modified=old)
    s3_server.seed(bucket, {key(20, 2, f"b{i}"): b"x" * 1000 for i in range(2)}, last_modified=old)
    s3_server.seed(bucket, {key(20, 2, "young"): b"x" * 10})
    s3_server.seed(bucket, {key(30, 3, "c"): b"x" * 5000}, last_modified=old)
    s3_server.seed(bucket, {key(30, 4, f"d{i}"): b"x" * 7 for i in range(4)}, last_modified=old)
    unparsable = {"level_zero/data/10/x": b"u" * 50, "level_zero/data/abc/1/y": b"u" * 50}
    s3_server.seed(bucket, unparsable, last_modified=old)
    s3_server.seed(bucket, {"tmp/outside": b"o" * 9}, last_modified=old)


def test_monthly_cost_is_bytes_in_gib_times_price() -> None:
    """1 GiB at 0.023 USD per GB-month costs 0.023; half a GiB half of it."""
    assert monthly_cost(2**30, 0.023) == pytest.approx(0.023)
    assert monthly_cost(2**29, 0.05) == pytest.approx(0.025)


async def test_report_numbers_match_the_bucket(
    spark: Any,
    s3_server: LocalS3,
    bucket: str,
    inventory: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Totals, per-epoch and per-prefix tables and the cost are exact; chart and files exist;
    one line on stdout with sizes in binary units."""
    seed_known(s3_server, bucket)
    out = tmp_path / "report"
    argv = [
        "spark-report",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--inventory",
        str(inventory("CSV")),
        "--output",
        str(out),
        "--safe-epoch",
        "2",
        "--price-per-gb-month",
        "0.05",
    ]
    assert await asyncio.to_thread(main, argv) == exitcodes.OK
    line = capsys.readouterr().out
    assert line.startswith("spark-report: M=2 objects=13 (7.3 KiB) garbage=6 (2.3 KiB: ")
    assert "deletable now 2.2 KiB, too young 10 B" in line
    report = json.loads((out / "report.json").read_text())
    expected = {
        "version": 1,
        "source": "inventory",
        "safe_epoch": 2,
        "blocked_reason": None,
        "objects": 13,
        "bytes": 7438,
        "garbage_objects": 6,
        "garbage_bytes": 2310,
        "eligible_objects": 5,
        "eligible_bytes": 2300,
        "in_grace_objects": 1,
        "in_grace_bytes": 10,
        "live_objects": 5,
        "live_bytes": 5028,
        "unparsable_objects": 2,
        "unparsable_bytes": 100,
        "unparsable_sample": ["level_zero/data/10/x", "level_zero/data/abc/1/y"],
        "outside_root_objects": 1,
        "outside_root_bytes": 9,
        "epochs": 4,
        "min_epoch": 1,
        "max_epoch": 4,
        "prefixes": 3,
        "price_per_gb_month": 0.05,
        "list_requests_full_listing": 1,
        "list_requests_sweep": 2,
        "price_per_1000_list_requests": 0.005,
    }
    assert {name: report[name] for name in expected} == expected
    assert report["garbage_monthly_cost_usd"] == pytest.approx(2310 / 2**30 * 0.05)
    assert 7200 <= report["oldest_garbage_age_s"] < 7200 + 300

    epochs = pd.read_csv(out / "by_epoch.csv")
    assert epochs["epoch"].tolist() == [1, 2, 3, 4]
    assert epochs["objects"].tolist() == [3, 3, 1, 4]
    assert epochs["bytes"].tolist() == [300, 2010, 5000, 28]
    assert epochs["status"].tolist() == ["garbage", "garbage", "live", "live"]
    assert epochs["eligible_objects"].tolist() == [3, 2, 0, 0]
    assert epochs["in_grace_bytes"].tolist() == [0, 10, 0, 0]
    assert epochs["live_objects"].tolist() == [0, 0, 1, 4]
    assert pd.read_parquet(out / "by_epoch.parquet")["bytes"].tolist() == [300, 2010, 5000, 28]

    prefixes = pd.read_parquet(out / "by_prefix.parquet")
    assert prefixes["prefix"].tolist() == ["010", "020", "030"]
    csv_lines = (out / "by_prefix.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in csv_lines[1:]] == ["010", "020", "030"]
    assert prefixes["objects"].tolist() == [3, 3, 5]
    assert prefixes["garbage_bytes"].tolist() == [300, 2010, 0]
    assert (prefixes["min_epoch"].tolist(), prefixes["max_epoch"].tolist()) == (
        [1, 2, 3],
        [1, 2, 4],
    )
    assert prefixes["oldest_age_s"].between(7200, 7500).all()
    assert prefixes["oldest_garbage_age_s"].isna().tolist() == [False, False, True]
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "flag",
    [
        "--dry-run",
        "--batch-size=5",
        "--max-deletes-per-second=9",
        "--decisions-uri=x",
        "--delete-concurrency=2",
    ],
)
def test_report_refuses_delete_options(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spark-report deletes nothing, so a delete option is a usage error, not ignored."""
    argv = ["spark-report", "--bucket", "b", "--list", "--output", str(tmp_path), flag]
    assert main(argv) == exitcodes.USAGE
    name = flag.split("=", maxsplit=1)[0]
    assert capsys.readouterr().err.startswith(f"gcd spark-report: unknown option {name}")
    assert main(["spark-sweep", "--help"]) == exitcodes.OK
    assert name in capsys.readouterr().out  # spark-sweep still takes it


def _job(command: str, *, dry_run: bool = False) -> JobConfig:
    return JobConfig(
        command=command,
        storage=S3Settings("b"),
        layout=KeyLayout.default(),
        inventory="m.json",
        inventory_root=None,
        list_tasks=1,
        output=Path("out"),
        decisions_uri="out/decisions",
        dry_run=dry_run,
        master=None,
        grace_s=600,
        batch_size=1000,
        max_deletes_per_second=None,
        delete_concurrency=1,
        price_per_gb_month=0.023,
        safe_epoch=None,
        json=False,
    )


def test_the_line_for_people_gives_sizes_in_binary_units() -> None:
    """spark-sweep's and spark-report's stdout line: KiB/MiB/GiB, never raw byte counts."""
    sweep = {
        "safe_epoch": 7,
        "listed": 12,
        "eligible": 5,
        "deleted": 5,
        "deleted_bytes": 3 * 2**30,
        "would_delete": 0,
        "would_delete_bytes": 0,
        "errors": 0,
        "unparsable": 1,
    }
    line = summary_line(_job("spark-sweep"), sweep)
    assert "deleted=5 (3.0 GiB)" in line
    dry = {**sweep, "deleted": 0, "deleted_bytes": 0, "would_delete": 5, "would_delete_bytes": 1536}
    assert "would delete=5 (1.5 KiB)" in summary_line(_job("spark-sweep", dry_run=True), dry)
    report = {
        "safe_epoch": 7,
        "objects": 3,
        "bytes": 5 * 2**20,
        "garbage_objects": 2,
        "garbage_bytes": 2**20,
        "eligible_bytes": 2**19,
        "in_grace_bytes": 2**19,
        "garbage_monthly_cost_usd": 0.5,
    }
    line = summary_line(_job("spark-report"), report)
    assert "objects=3 (5.0 MiB) garbage=2 (1.0 MiB: deletable now 512.0 KiB" in line
    assert "bytes" not in line


def test_the_line_for_people_names_nested_roots() -> None:
    """A sweep that kept another namespace's root says which, on its one line."""
    sweep = {
        "safe_epoch": 7,
        "listed": 12,
        "eligible": 5,
        "deleted": 5,
        "deleted_bytes": 5,
        "would_delete": 0,
        "would_delete_bytes": 0,
        "errors": 0,
        "unparsable": 0,
        "nested_roots": ["level_zero/data/417"],
    }
    line = summary_line(_job("spark-sweep"), sweep)
    assert line.endswith("; kept under other namespaces' roots: level_zero/data/417")
    plain = summary_line(_job("spark-sweep"), {**sweep, "nested_roots": []})
    assert "other namespaces" not in plain
