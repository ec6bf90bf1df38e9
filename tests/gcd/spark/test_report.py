"""`gcd spark-report` on a bucket with known contents: exact counts and bytes per epoch
and prefix, garbage (eligible + in grace) vs live, unparsable keys, and the cost."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gcd.cli import exitcodes
from gcd.cli.main import main
from gcd.local_servers import LocalS3
from gcd.spark.report import monthly_cost

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
    spark: Any, s3_server: LocalS3, bucket: str, inventory: Callable[..., Path], tmp_path: Path
) -> None:
    """Totals, per-epoch and per-prefix tables and the cost are exact; chart and files exist."""
    seed_known(s3_server, bucket)
    out = tmp_path / "report"
    argv = [
        "spark-report", "--bucket", bucket, "--endpoint-url", s3_server.endpoint_url,
        "--inventory", str(inventory("CSV")), "--output", str(out), "--safe-epoch", "2",
        "--price-per-gb-month", "0.05", "--json",
    ]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == exitcodes.OK
    report = json.loads((out / "report.json").read_text())
    expected = {
        "version": 1, "source": "inventory", "safe_epoch": 2, "blocked_reason": None,
        "objects": 13, "bytes": 7438,
        "garbage_objects": 6, "garbage_bytes": 2310,
        "eligible_objects": 5, "eligible_bytes": 2300,
        "in_grace_objects": 1, "in_grace_bytes": 10,
        "live_objects": 5, "live_bytes": 5028,
        "unparsable_objects": 2, "unparsable_bytes": 100,
        "unparsable_sample": ["level_zero/data/10/x", "level_zero/data/abc/1/y"],
        "outside_root_objects": 1, "outside_root_bytes": 9,
        "epochs": 4, "min_epoch": 1, "max_epoch": 4, "prefixes": 3,
        "price_per_gb_month": 0.05,
    }  # fmt: skip
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
    assert pd.read_parquet(out / "by_epoch.parquet")["bytes"].tolist() == [300, 2010, 5000, 28]

    prefixes = pd.read_parquet(out / "by_prefix.parquet")
    assert prefixes["prefix"].tolist() == [10, 20, 30]
    assert prefixes["objects"].tolist() == [3, 3, 5]
    assert prefixes["garbage_bytes"].tolist() == [300, 2010, 0]
    assert (prefixes["min_epoch"].tolist(), prefixes["max_epoch"].tolist()) == (
        [1, 2, 3], [1, 2, 4],
    )  # fmt: skip
    assert prefixes["oldest_age_s"].between(7200, 7500).all()
    assert prefixes["oldest_garbage_age_s"].isna().tolist() == [False, False, True]
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "by_prefix.csv").exists()
