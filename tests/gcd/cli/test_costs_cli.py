"""What GC costs and saves: the round's JSON and `gcd status` apply the same price table
(real etcd and moto), and the pure parts (`gcd.rules.prices`, `gcd.rules.usage`).

Named by behaviour, not module: one price table in the round's JSON, `gcd status` and gcd.rules."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gcd.cli.main import main
from gcd.rules.layout import KeyLayout
from gcd.rules.prices import DEFAULT_PRICES, prices_for, round_cost
from gcd.rules.usage import HOURS, Usage, day_cost
from l0gc.errors import ConfigError
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync
from tests.gcd.cli.test_status import setup as setup_partitions

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
GIB = 1024**3


@pytest.mark.integration
def test_status_cost_lines_are_the_rounds_requests_times_the_table(
    etcd_server: LocalEtcd,
    s3_server: LocalS3,
    bucket: str,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two rounds (the second with its own LIST price): status sums their requests and
    bytes of the day and prices each at its table, as the rounds' JSON did."""
    setup_partitions(etcd_server, namespace, {"a/0": 5}, cluster=8)
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(
        bucket,
        [LAYOUT.format(p, e, "x") for p in (1, 2) for e in (2, 3)],
        last_modified=old,
        body=b"y" * 1000,
    )
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    common = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--root",
        ROOT,
        *etcd,
        "--shard-ttl",
        "1s",
        "--json",
        "--log-level",
        "warning",
    ]
    capsys.readouterr()
    assert main(["sweep", *common]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert first["deleted"] == 4
    price = DEFAULT_PRICES["s3"]
    assert first["cost"]["requests"] == {
        "list": first["list_requests"],
        "delete": first["delete_requests"],
    }
    assert first["cost"]["requests_usd"] == pytest.approx(
        first["list_requests"] * price.list_per_1000 / 1000
    )
    assert first["cost"]["reclaimed_usd_per_month"] == pytest.approx(
        first["deleted_bytes"] / GIB * price.storage_gb_month
    )
    assert first["cost"]["lists_per_deleted"] == pytest.approx(first["list_requests"] / 4)
    s3_server.seed(bucket, [LAYOUT.format(3, 4, "x")], last_modified=old, body=b"z" * 500)
    assert main(["sweep", *common, "--price-list", "1.5"]) == 0
    second = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert second["cost"]["prices"]["list_per_1000"] == 1.5
    assert main(["status", *etcd, "--json"]) == 0
    costs = json.loads(capsys.readouterr().out)["costs"]
    lists = first["list_requests"] + second["list_requests"]
    assert costs["requests"] == {
        "list": lists,
        "delete": first["delete_requests"] + second["delete_requests"],
    }
    assert costs["deleted"] == 5
    assert costs["deleted_bytes"] == first["deleted_bytes"] + second["deleted_bytes"] == 4500
    assert costs["requests_usd"] == pytest.approx(
        first["cost"]["requests_usd"] + second["cost"]["requests_usd"]
    )
    assert costs["reclaimed_usd_per_month"] == pytest.approx(4500 / GIB * price.storage_gb_month)
    assert main(["status", *etcd]) == 0
    text = capsys.readouterr().out
    assert f"requests/day   {lists} LIST, 2 DeleteObjects = $" in text
    assert "reclaimed/day  5 objects" in text


def test_prices_override_and_refuse_bad_values() -> None:
    """An override replaces one price and says so; a negative or unknown one is refused."""
    table = prices_for("gcs", list_per_1000=0.01)
    gcs = DEFAULT_PRICES["gcs"]
    assert (table.list_per_1000, table.storage_gb_month) == (0.01, gcs.storage_gb_month)
    assert "overridden: list_per_1000" in table.source
    with pytest.raises(ConfigError, match="must be a finite number >= 0"):
        prices_for("s3", storage_gb_month=-1.0)
    with pytest.raises(ConfigError, match="no price table"):
        prices_for("tape")
    cost = round_cost(2000, 10, 0, GIB, DEFAULT_PRICES["s3"])
    assert cost.requests_usd == pytest.approx(0.01)
    assert cost.lists_per_deleted is None
    assert cost.reclaimed_usd_per_month == DEFAULT_PRICES["s3"].storage_gb_month


def test_usage_keeps_a_day_of_hours() -> None:
    """Hours older than a day are dropped and not summed; the record round-trips."""
    usage = Usage(DEFAULT_PRICES["s3"])
    usage.add(100, (10, 1, 5, 50))
    usage.add(100 + HOURS - 1, (1, 0, 1, 1))
    assert usage.day(100 + HOURS - 1)[:4] == [11, 1, 6, 51]
    assert usage.day(100 + HOURS)[:4] == [1, 0, 1, 1]
    assert usage.day(100 + HOURS - 1)[4] == pytest.approx(11 * 0.005 / 1000)
    usage.add(100 + HOURS, (1, 1, 1, 1))
    assert 100 not in usage.hours
    again = Usage.decode(usage.encode(), "k")
    assert again.hours == usage.hours
    assert again.prices.list_per_1000 == usage.prices.list_per_1000
    cost = day_cost({"a": again}, (100 + HOURS) * 3600.0)
    assert cost is not None
    assert cost.list_requests == 2
    assert day_cost({}, 0.0) is None
