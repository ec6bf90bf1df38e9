"""The `watermark` command against a real etcd: admin commands and `serve` as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gcd.local_servers import LocalEtcd, free_port
from tests.waiting import wait_until
from watermark.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main
from watermark.etcd_config import EtcdSettings, open_kv
from watermark.kv import Put
from watermark.record import PartitionRecord
from watermark.store import WatermarkStore

pytestmark = pytest.mark.integration


def environment(etcd: LocalEtcd, namespace: str) -> dict[str, str]:
    """This process's environment pointed at the test etcd and namespace."""
    return {**os.environ, "L0GC_ETCD": etcd.endpoint, "L0GC_NAMESPACE": namespace}


def watermark(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m watermark ARGS` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "watermark", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON document a successful `--json` command printed."""
    assert result.returncode == EXIT_OK, result.stderr
    return json.loads(result.stdout)


def test_partition_register_json_creates_the_record(etcd_server: LocalEtcd, namespace: str) -> None:
    """`partition register p0 --json` registers p0 at M(p) = epoch - 1 and says so in JSON."""
    env = environment(etcd_server, namespace)
    doc = json_of(watermark(env, "partition", "register", "p0", "--json"))
    assert doc["version"] == 1
    (record,) = doc["partitions"]
    assert record["partition"] == "p0"
    assert record["watermark"] == record["created_epoch"] - 1
    shown = json_of(watermark(env, "partition", "show", "p0", "--json"))
    assert shown["watermark"] == record["watermark"]
    listed = json_of(watermark(env, "partition", "list", "--json"))
    assert [p["partition"] for p in listed["partitions"]] == ["p0"]


def test_epoch_advance_json_moves_the_epoch_by_one(etcd_server: LocalEtcd, namespace: str) -> None:
    """`epoch advance --json` creates then advances the epoch by exactly one each time."""
    env = environment(etcd_server, namespace)
    first = json_of(watermark(env, "epoch", "advance", "--json"))
    second = json_of(watermark(env, "epoch", "advance", "--json"))
    assert first["version"] == 1
    assert second["epoch"] == first["epoch"] + 1
    assert json_of(watermark(env, "epoch", "get", "--json"))["epoch"] == second["epoch"]
    assert watermark(env, "epoch", "get").stdout == f"{second['epoch']}\n"


def test_failures_exit_1_with_a_clear_message(etcd_server: LocalEtcd, namespace: str) -> None:
    """An unregistered partition, a lost CAS or an unreachable etcd exit 1 and say why."""
    env = environment(etcd_server, namespace)
    missing = watermark(env, "partition", "show", "ghost")
    assert missing.returncode == EXIT_FAILURE
    assert "'ghost' is not registered" in missing.stderr
    watermark(env, "epoch", "advance")
    conflict = watermark(env, "epoch", "advance", "--expected", "99", "--json")
    assert conflict.returncode == EXIT_FAILURE
    assert json.loads(conflict.stdout)["error"] == "EpochConflict"
    unreachable = watermark(
        {**env, "L0GC_ETCD": f"127.0.0.1:{free_port()}"}, "epoch", "get", "--etcd-timeout", "1"
    )
    assert unreachable.returncode == EXIT_FAILURE
    assert "unavailable" in unreachable.stderr


def test_partition_list_escapes_names_owners_and_errors_from_etcd(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """`partition list` prints a name or an error holding terminal escapes escaped."""
    good = PartitionRecord("evil\x1b[2J", 6, 1, owner="pub", owner_epoch=1).encode()
    bad = b'{"version": 1, "watermark": 6, "created_epoch": 1, "owner": "\\u001b[31mred"}'

    async def put() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        try:
            prefix = WatermarkStore(kv, namespace).partitions_prefix
            await kv.txn([], [Put(prefix + "evil\x1b[2J", good), Put(prefix + "owner", bad)])
        finally:
            await kv.close()

    asyncio.run(put())
    listed = watermark(environment(etcd_server, namespace), "partition", "list")
    assert listed.returncode == EXIT_OK, listed.stderr
    assert "\x1b" not in listed.stdout
    assert "evil\\x1b[2J  M(p)=6" in listed.stdout
    assert "owner  MALFORMED: partition 'owner': field 'owner'" in listed.stdout
    assert "\\x1b[31mred" in listed.stdout


def test_usage_errors_exit_2() -> None:
    """Unknown commands, bad option values and bad settings are usage errors (exit 2)."""
    assert main(["bogus"]) == EXIT_USAGE
    assert main(["serve", "--http-port", "eighty"]) == EXIT_USAGE
    assert main(["epoch"]) == EXIT_USAGE
    assert main(["--help"]) == EXIT_OK
    bad_namespace = watermark({**os.environ, "L0GC_NAMESPACE": "no-slash"}, "epoch", "get")
    assert bad_namespace.returncode == EXIT_USAGE
    assert "namespace" in bad_namespace.stderr


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client session."""
    async with aiohttp.ClientSession() as session:
        yield session


async def wait_ready(session: aiohttp.ClientSession, base: str, process: Any) -> None:
    """Poll /readyz until it answers 200 (deadline 30 s); fail early if the process died."""

    async def ready() -> bool:
        assert process.returncode is None, "watermark serve exited early"
        async with session.get(f"{base}/readyz") as response:
            return response.status == 200

    await wait_until(
        ready,
        timeout_s=30,
        what=f"{base}/readyz to answer 200",
        ignore=(aiohttp.ClientConnectionError,),
    )


async def post(session: aiohttp.ClientSession, url: str, body: Any = None) -> Any:
    """POST JSON and return the JSON answer, which must be 200."""
    async with session.post(url, json=body) as response:
        doc = await response.json()
        assert response.status == 200, doc
        return doc


async def start_serve(env: dict[str, str], log: Path, *args: str) -> Any:
    """Start `python -m watermark serve ARGS` with its logs in `log`."""
    with log.open("wb") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "watermark", "serve", "--http-host", "127.0.0.1", *args,
            env=env, stdout=subprocess.DEVNULL, stderr=sink,
        )


async def stop_by_pid(process: Any, log: Path) -> int:
    """SIGTERM the process by its PID and return its exit code."""
    os.kill(process.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(30):
            return int(await process.wait())
    except TimeoutError:
        os.kill(process.pid, signal.SIGKILL)
        await process.wait()
        pytest.fail(f"watermark serve ignored SIGTERM; log:\n{log.read_text()}")


async def test_serve_fences_over_http_and_publishes_on_sigterm(
    etcd_server: LocalEtcd, namespace: str, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """`watermark serve`: ready, fence+commit+reconciled over HTTP, SIGTERM -> 0, final publish."""
    env = environment(etcd_server, namespace)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    process = await start_serve(
        env, log, "--http-port", str(port), "--partitions", "orders/0", "--register",
        "--publish-interval", "3600", "--owner-id", "serve-test", "--no-idle-advance",
    )
    try:
        await wait_ready(http, base, process)
        fence = f"{base}/v1/partitions/orders%2F0/fence"
        first = await post(http, fence, {"epoch": 1, "timeout_s": 5})
        await post(http, f"{base}/v1/fences/{first['token']}/commit", {"offset": 0})
        json_of(watermark(env, "epoch", "advance", "--json"))  # a fence above it is refused
        second = await post(http, fence, {"epoch": 2, "timeout_s": 5})
        assert second["window"] == [1, 2]
        await post(http, f"{base}/v1/fences/{second['token']}/commit", {"offset": 1})
        state = await post(http, f"{base}/v1/partitions/orders%2F0/reconciled", {"offset": 1})
        assert state["watermark"] == 0
        before = json_of(watermark(env, "partition", "show", "orders/0", "--json"))
        assert before["tracker"]["last_applied_offset"] is None  # only the start-up publish
    finally:
        code = await stop_by_pid(process, log)
    assert code == EXIT_OK, log.read_text()
    record = json_of(watermark(env, "partition", "show", "orders/0", "--json"))
    assert record["owner"] == "serve-test"
    assert record["window"] == [1, 2]
    assert record["tracker"]["last_applied_offset"] == 1
    assert record["tracker"]["reconciled_offset"] == 1
    assert "watermark.publisher_stopped" in log.read_text()


async def test_serve_with_ticker_advances_the_epoch_and_resigns(
    etcd_server: LocalEtcd, namespace: str, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """With --tick-interval the service leads the ticker, advances the epoch, exits 0."""
    env = environment(etcd_server, namespace)
    start = json_of(watermark(env, "epoch", "advance", "--json"))["epoch"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    process = await start_serve(env, log, "--http-port", str(port), "--tick-interval", "0.2")
    try:
        await wait_ready(http, base, process)
        await wait_until(
            lambda: json_of(watermark(env, "epoch", "get", "--json"))["epoch"] >= start + 2,
            timeout_s=30,
            what=f"the ticker to advance the epoch to {start + 2}",
            detail=lambda: log.read_text()[-3000:],
        )
        async with http.get(f"{base}/metrics") as response:
            text = await response.text()
        assert "l0gc_watermark_ticker_leader 1.0" in text
    finally:
        code = await stop_by_pid(process, log)
    assert code == EXIT_OK, log.read_text()


def test_serve_refuses_unsafe_http_settings_with_exit_2(tmp_path: Path) -> None:
    """A non-loopback bind without auth, an unclear L0GC_INSECURE_NO_AUTH, a malformed
    token file (named by line, never echoing the token) and a missing TLS file stop
    `serve` before it starts (exit 2)."""
    env = {**os.environ, "L0GC_ETCD": f"127.0.0.1:{free_port()}", "L0GC_NAMESPACE": "/l0gc/t"}
    exposed = watermark(env, "serve", "--http-host", "0.0.0.0")  # refused before binding
    assert exposed.returncode == EXIT_USAGE, exposed.stderr
    assert "--auth-token-file" in exposed.stderr
    assert "--insecure-no-auth" in exposed.stderr
    unclear = watermark(
        {**env, "L0GC_INSECURE_NO_AUTH": "maybe"}, "serve", "--http-host", "0.0.0.0"
    )
    assert unclear.returncode == EXIT_USAGE, unclear.stderr
    assert "env L0GC_INSECURE_NO_AUTH: invalid value 'maybe'" in unclear.stderr
    secret = "s3cret-token-0123456789abcdef"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# callers\nwriter:{secret}\nboss:{secret}x\n")
    bad_file = watermark(env, "serve", "--auth-token-file", str(tokens))
    assert bad_file.returncode == EXIT_USAGE, bad_file.stderr
    assert "line 3: unknown role" in bad_file.stderr
    assert secret not in bad_file.stderr
    missing = tmp_path / "missing.pem"
    no_cert = watermark(
        {**env, "L0GC_TLS_CERT_FILE": str(missing), "L0GC_TLS_KEY_FILE": str(missing)}, "serve"
    )
    assert no_cert.returncode == EXIT_USAGE, no_cert.stderr
    assert f"--tls-cert-file {missing}" in no_cert.stderr


async def get_status(session: aiohttp.ClientSession, url: str, token: str) -> int:
    """The status of GET `url` with bearer `token`."""
    async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as response:
        return response.status


async def test_serve_reloads_its_tokens_on_sighup_and_exits_130_on_sigint(
    etcd_server: LocalEtcd, namespace: str, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """SIGHUP swaps in the token file's new tokens; a bad file on reload keeps the old ones
    and logs why (never a token); SIGINT stops cleanly (final publish) and exits 130."""
    env = environment(etcd_server, namespace)
    old, new = "old-writer-token-0123456789", "new-writer-token-0123456789"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"writer:{old}\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    listing = f"{base}/v1/partitions"
    log = tmp_path / "serve.log"
    process = await start_serve(
        env, log, "--http-port", str(port), "--partitions", "orders/0", "--register",
        "--auth-token-file", str(tokens),
    )
    try:
        await wait_ready(http, base, process)
        assert await get_status(http, listing, old) == 200
        assert await get_status(http, listing, new) == 401
        tokens.write_text(f"# rotated\nwriter:{new}\n")
        os.kill(process.pid, signal.SIGHUP)

        async def new_accepted() -> bool:
            return await get_status(http, listing, new) == 200

        await wait_until(
            new_accepted,
            timeout_s=30,
            what="the new token to be accepted after SIGHUP",
            detail=lambda: log.read_text()[-3000:],
        )
        assert await get_status(http, listing, old) == 401
        tokens.write_text(f"writer:{new}\nwriter {old}\n")
        os.kill(process.pid, signal.SIGHUP)
        await wait_until(
            lambda: "watermark.auth_reload_failed" in log.read_text(),
            timeout_s=30,
            what="the failed reload to be logged",
        )
        assert await get_status(http, listing, new) == 200
        os.kill(process.pid, signal.SIGINT)
        async with asyncio.timeout(30):
            code = await process.wait()
    finally:
        if process.returncode is None:
            await stop_by_pid(process, log)
    text = log.read_text()
    assert code == EXIT_INTERRUPTED, text
    assert "line 2: not a token" in text
    assert "watermark.publisher_stopped" in text
    assert old not in text
    assert new not in text
