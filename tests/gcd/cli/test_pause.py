"""`gcd pause` / `gcd resume` against a real etcd, seen through `gcd status` and the sweepers."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd
from tests.clirun import Cli, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture
def etcd_env(etcd_server: LocalEtcd, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """L0GC_ETCD / L0GC_NAMESPACE point at the test's namespace, with a cluster epoch."""

    async def init() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        try:
            await WatermarkStore(kv, namespace).init_cluster_epoch(4)
        finally:
            await kv.close()

    asyncio.run(init())
    monkeypatch.setenv("L0GC_ETCD", etcd_server.endpoint)
    monkeypatch.setenv("L0GC_NAMESPACE", namespace)
    return namespace


def test_pause_and_resume_round_trip_is_visible_to_status(etcd_env: str, cli: Cli) -> None:
    """pause sets the marker with its reason; status shows it; resume clears it."""
    run = cli("gcd", "pause", "--reason", "bucket migration", "--json")
    code, paused = run.code, json.loads(run.out)
    assert code == 0
    assert paused == {
        "version": 1,
        "namespace": etcd_env,
        "paused": True,
        "reason": "bucket migration",
        "was_paused": False,
        "previous_reason": None,
    }
    run = cli("gcd", "status", "--json")
    code, status = run.code, json.loads(run.out)
    assert code == 0
    assert status["paused"] is True
    assert status["paused_reason"] == "bucket migration"
    assert isinstance(status["paused_at"], float)
    run = cli("gcd", "resume", "--json")
    code, resumed = run.code, json.loads(run.out)
    assert code == 0
    assert resumed["was_paused"] is True
    assert resumed["previous_reason"] == "bucket migration"
    assert json.loads(cli("gcd", "status", "--json").out)["paused"] is False
    run = cli("gcd", "resume", "--json")
    code, again = run.code, json.loads(run.out)
    assert code == 0
    assert again["was_paused"] is False


def test_pausing_twice_replaces_the_reason_and_reports_the_old_one(etcd_env: str, cli: Cli) -> None:
    """A second pause keeps GC paused with the new reason and names the previous one."""
    json.loads(cli("gcd", "pause", "--reason", "first", "--json").out)
    run = cli("gcd", "pause", "--reason", "second", "--json")
    code, second = run.code, json.loads(run.out)
    assert code == 0
    assert second["previous_reason"] == "first"
    assert json.loads(cli("gcd", "status", "--json").out)["paused_reason"] == "second"


def test_pause_without_reason_names_who_paused(etcd_env: str, cli: Cli) -> None:
    """The default reason says it was `gcd pause` and by which user@host."""
    run = cli("gcd", "pause", "--json")
    code, doc = run.code, json.loads(run.out)
    assert code == 0
    assert str(doc["reason"]).startswith("paused with gcd pause by ")
    assert "@" in str(doc["reason"])


def test_resume_takes_no_reason(etcd_env: str, cli: Cli) -> None:
    """--reason belongs to pause only: resume refuses it as a usage error."""
    run = cli("gcd", "resume", "--reason", "x")
    assert run.code == 2
    assert "--reason" in run.err


def test_pause_as_a_subprocess_prints_text(etcd_env: str) -> None:
    """`python -m gcd pause` tells a person what happened and how to undo it, and mixes no
    log line into that; `--log-level info` adds the audit line on stderr."""
    done = run_cli("gcd", "pause", "--reason", "drill", env=os.environ)
    assert done.returncode == 0, done.stderr
    assert f"GC paused for {etcd_env}: drill" in done.stdout
    assert "gcd resume" in done.stdout
    assert done.stderr == ""
    audited = run_cli("gcd", "pause", "--reason", "drill", "--log-level", "info", env=os.environ)
    assert '"gc.paused"' in audited.stderr  # the audit trail, as a JSON log line


def test_pause_text_escapes_reasons_from_etcd(
    etcd_env: str, etcd_server: LocalEtcd, cli: Cli
) -> None:
    """A previous reason with terminal escapes, or an unreadable marker, is printed escaped."""

    async def put_marker(raw: bytes) -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=etcd_env))
        try:
            await kv.txn([], [Put(WatermarkStore(kv, etcd_env).paused_key, raw)])
        finally:
            await kv.close()

    asyncio.run(put_marker(json.dumps({"reason": "\x1b[31mred\x07", "at": 1}).encode()))
    run = cli("gcd", "pause", "--reason", "new\x1b[0m")
    assert run.code == 0
    out = run.out
    assert "\x1b" not in out
    assert "\x07" not in out
    assert f"GC paused for {etcd_env}: new\\x1b[0m" in out
    assert "(it was already paused: '\\x1b[31mred\\x07'; the reason is replaced)" in out
    asyncio.run(put_marker(b"[" * 50_000))
    run = cli("gcd", "resume")
    assert run.code == 0
    out = run.out
    assert "was paused: unreadable pause marker (it is nested more than 4 levels deep" in out
