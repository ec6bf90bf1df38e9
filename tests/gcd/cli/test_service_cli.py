"""Services need an etcd endpoint, and `gcd sweep --paused-ok` for scheduled runs.

`gcd daemon`, `gcd sweep` (without --safe-epoch) and `watermark serve` refuse to start
without any etcd setting (exit 2 naming --etcd / L0GC_ETCD) instead of waiting on
127.0.0.1:2379; the admin commands keep that default. `--paused-ok` (L0GC_PAUSED_OK)
turns a paused round into exit 0 and nothing else.

Named by behaviour, not module: `gcd daemon`, `gcd sweep` and `watermark serve` alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.cli.main import main
from gcd.cli.sweep import exit_code
from gcd.observe.report import RoundSummary
from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0gc.contract.kv import Put
from l0gc.errors import ConfigError
from l0gc.etcd.settings import DEFAULT_ENDPOINT, EtcdSettings, add_etcd_arguments, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.clirun import run_cli

REPO = Path(__file__).resolve().parents[3]
LAYOUT = KeyLayout.default("level_zero/data")


def _bare_env(tmp_path: Path) -> dict[str, str]:
    """The test's environment without any L0GC_* setting, HOME in a temp dir (no config)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("L0GC_")}
    env["HOME"] = str(tmp_path)
    return env


@pytest.mark.parametrize(
    "argv",
    [
        ["gcd", "daemon", "--bucket", "b", "--http-host", "127.0.0.1", "--http-port", "0"],
        ["gcd", "sweep", "--bucket", "b", "--json"],
        ["watermark", "serve", "--http-host", "127.0.0.1", "--http-port", "0"],
    ],
    ids=["gcd-daemon", "gcd-sweep", "watermark-serve"],
)
def test_services_without_any_etcd_setting_exit_2_naming_it(
    argv: list[str], tmp_path: Path
) -> None:
    """No --etcd, no L0GC_ETCD, no config: exit 2 within seconds, naming both settings."""
    done = run_cli(*argv, env=_bare_env(tmp_path), cwd=tmp_path)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "--etcd" in done.stderr
    assert "L0GC_ETCD" in done.stderr


def test_sweep_with_safe_epoch_needs_no_etcd(capsys: pytest.CaptureFixture[str]) -> None:
    """`gcd sweep --safe-epoch N` still runs without etcd: only the usage error is gone."""
    code = main(["sweep", "--safe-epoch", "1", "--batch-size", "0"])
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "--batch-size" in err
    assert "L0GC_ETCD" not in err


def test_admin_commands_keep_the_loopback_default() -> None:
    """Without `required`, no setting means 127.0.0.1:2379; with it, ConfigError naming both."""
    parser = argparse.ArgumentParser()
    add_etcd_arguments(parser)
    ns = parser.parse_args([])
    assert EtcdSettings.from_args(ns, {}).endpoints == (DEFAULT_ENDPOINT,)
    with pytest.raises(ConfigError, match=r"--etcd .*L0GC_ETCD"):
        EtcdSettings.from_args(ns, {}, required=True)
    given = EtcdSettings.from_args(ns, {"L0GC_ETCD": "etcd-0:2379"}, required=True)
    assert given.endpoints == ("etcd-0:2379",)


@pytest.mark.parametrize(
    ("reason", "paused_ok", "expected"),
    [
        ("paused: migration", False, exitcodes.BLOCKED),
        ("paused: migration", True, exitcodes.OK),
        ("safe epoch undefined: t/broken", True, exitcodes.BLOCKED),
        (None, True, exitcodes.OK),
    ],
)
def test_paused_ok_only_changes_a_paused_round(
    reason: str | None, paused_ok: bool, expected: int
) -> None:
    """exit_code: a pause is 0 with paused_ok, any other block stays 3."""
    assert exit_code(RoundSummary(blocked_reason=reason), paused_ok=paused_ok) == expected


def _prepare(etcd: LocalEtcd, namespace: str, *, paused: bool, malformed: bool) -> None:
    async def setup() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(1)
            await store.register_partition("t/0")
            if malformed:
                await kv.txn([], [Put(store.partition_key("t/broken"), b"not json")])
            if paused:
                await store.set_paused("migration")
        finally:
            await kv.close()

    asyncio.run(setup())


@pytest.mark.integration
@pytest.mark.parametrize("how", ["flag", "env"])
def test_paused_ok_sweep_exits_0_and_deletes_nothing(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    how: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paused namespace with --paused-ok (or L0GC_PAUSED_OK=true): exit 0, nothing deleted."""
    _prepare(etcd_server, namespace, paused=True, malformed=False)
    old = datetime.now(UTC) - timedelta(hours=2)
    s3_server.seed(bucket, [LAYOUT.format(1, 0, "g")], last_modified=old)
    before = s3_server.keys(bucket)
    argv = [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        "us-east-1",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--grace",
        "1m",
        "--json",
    ]
    if how == "flag":
        argv.append("--paused-ok")
    else:
        monkeypatch.setenv("L0GC_PAUSED_OK", "true")
    code = main(argv)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == exitcodes.OK
    assert summary["blocked_reason"] == "paused: migration"
    assert s3_server.keys(bucket) == before


@pytest.mark.integration
def test_paused_ok_still_exits_3_when_blocked_otherwise(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not paused but blocked (a malformed record): --paused-ok changes nothing, exit 3."""
    _prepare(etcd_server, namespace, paused=False, malformed=True)
    code = main(
        [
            "sweep",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
            "--json",
            "--paused-ok",
        ]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == exitcodes.BLOCKED
    assert not str(summary["blocked_reason"]).startswith("paused")
