"""The `watermark` command against a real etcd: admin commands and `serve` as a subprocess."""

from __future__ import annotations

import argparse
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

from l0gc import exitcodes
from l0gc.contract.kv import Put
from l0gc.contract.record import PartitionRecord
from l0gc.errors import ConfigError
from l0gc.etcd.settings import ETCD_OPTIONS, EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0gc.options import CommandParser
from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.clirun import run_cli
from tests.serving import new_serve
from tests.waiting import wait_until
from watermark.cli.main import (
    COMMAND_OPTIONS,
    build_parser,
    main,
    parse,
)

pytestmark = pytest.mark.integration


def environment(etcd: LocalEtcd, namespace: str) -> dict[str, str]:
    """This process's environment pointed at the test etcd and namespace."""
    return {**os.environ, "L0GC_ETCD": etcd.endpoint, "L0GC_NAMESPACE": namespace}


def watermark(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m watermark ARGS` and capture its output."""
    return run_cli("watermark", *args, env=env)


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON document a successful `--json` command printed."""
    assert result.returncode == exitcodes.OK, result.stderr
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
    """An unregistered partition or a lost CAS exit 1, an unreachable etcd exits 4 (as for
    every gcd command); each says why."""
    env = environment(etcd_server, namespace)
    missing = watermark(env, "partition", "show", "ghost")
    assert missing.returncode == exitcodes.PARTIAL_FAILURE
    assert "'ghost' is not registered" in missing.stderr
    watermark(env, "epoch", "advance")
    conflict = watermark(env, "epoch", "advance", "--expected", "99", "--json")
    assert conflict.returncode == exitcodes.PARTIAL_FAILURE
    assert json.loads(conflict.stdout)["error"] == "EpochConflict"
    unreachable = watermark(
        {**env, "L0GC_ETCD": f"127.0.0.1:{free_port()}"}, "epoch", "get", "--etcd-timeout", "1"
    )
    assert unreachable.returncode == exitcodes.ETCD_UNREACHABLE
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
    assert listed.returncode == exitcodes.OK, listed.stderr
    assert "\x1b" not in listed.stdout
    assert "evil\\x1b[2J  M(p)=6" in listed.stdout
    assert "owner  MALFORMED: partition 'owner': field 'owner'" in listed.stdout
    assert "\\x1b[31mred" in listed.stdout


def test_partition_text_shows_no_python_reprs(etcd_server: LocalEtcd, namespace: str) -> None:
    """A registered, never-owned partition reads `window=empty owner=none`, not [] / None."""
    env = environment(etcd_server, namespace)
    assert watermark(env, "epoch", "advance").returncode == exitcodes.OK
    registered = watermark(env, "partition", "register", "orders/0")
    assert registered.returncode == exitcodes.OK, registered.stderr
    assert "window=empty  created_epoch=1  owner=none  owner_epoch=0" in registered.stdout
    assert "None" not in registered.stdout
    assert "[]" not in registered.stdout


def test_the_admin_commands_start_without_the_http_server() -> None:
    """`watermark epoch ...` and `partition ...` parse and run without importing aiohttp or
    the publisher runner (half the start-up CPU of every admin command); `serve` gets
    them when it runs."""
    probe = (
        "import sys; import watermark.cli.main as m; "
        "m.parse(['epoch', 'get', '--etcd', '127.0.0.1:1']); "
        "m.parse(['partition', 'repair', 'p', '--etcd', '127.0.0.1:1']); "
        "print(sorted(n for n in sys.modules if n == 'aiohttp' or n.startswith("
        "('watermark.api.front', 'watermark.api.http_server', "
        "'watermark.service.runner'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_usage_errors_exit_2() -> None:
    """Unknown commands, bad option values and bad settings are usage errors (exit 2)."""
    assert main(["bogus"]) == exitcodes.USAGE
    assert main(["serve", "--http-port", "eighty"]) == exitcodes.USAGE
    assert main(["epoch"]) == exitcodes.USAGE
    assert main(["--help"]) == exitcodes.OK
    bad_namespace = watermark({**os.environ, "L0GC_NAMESPACE": "no-slash"}, "epoch", "get")
    assert bad_namespace.returncode == exitcodes.USAGE
    assert "namespace" in bad_namespace.stderr


# -- options: the same system as gcd (l0gc.options) ----------------------------------

ETCD = {"L0GC_ETCD": "etcd-0:2379"}


def test_serve_takes_durations_like_gcd() -> None:
    """`serve` takes 10s, 1.5, 500ms and 1m wherever it takes a duration."""
    invocation = parse(
        [
            "serve",
            "--tick-interval",
            "10s",
            "--publish-interval",
            "500ms",
            "--hold-ttl",
            "1.5",
            "--fence-timeout",
            "2s",
            "--drain-timeout",
            "1m",
            "--ticker-lease-ttl",
            "15s",
            "--http-read-timeout",
            "250ms",
            "--etcd-timeout",
            "3s",
        ],
        ETCD,
    )
    args = invocation.args
    assert (args.tick_interval, args.publish_interval, args.hold_ttl) == (10.0, 0.5, 1.5)
    assert (args.fence_timeout, args.drain_timeout, args.ticker_lease_ttl) == (2.0, 60.0, 15)
    assert invocation.http is not None
    assert invocation.http.limits.read_timeout_s == 0.25
    assert invocation.etcd.timeout_s == 3.0


def test_a_bad_env_value_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """L0GC_TICK_INTERVAL=abc: exit 2, the variable and the value named, no function name."""
    monkeypatch.setenv("L0GC_ETCD", "127.0.0.1:1")
    monkeypatch.setenv("L0GC_TICK_INTERVAL", "abc")
    assert main(["serve"]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "env L0GC_TICK_INTERVAL: invalid value 'abc': expected seconds or a number" in err
    assert "_non_negative" not in err
    assert "function" not in err
    monkeypatch.delenv("L0GC_TICK_INTERVAL")
    assert main(["serve", "--publish-interval", "0"]) == exitcodes.USAGE
    assert "flag --publish-interval: invalid value '0': expected a duration > 0" in (
        capsys.readouterr().err
    )
    assert main(["epoch", "get", "--json", "--etcd-timeout", "soon"]) == exitcodes.USAGE
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"] == "ConfigError"
    assert "flag --etcd-timeout: invalid value 'soon'" in doc["message"]


def test_config_file_keys_and_precedence(tmp_path: Path) -> None:
    """--config / L0GC_CONFIG: keys are flag names; flag beats env beats config beats default."""
    config = tmp_path / "watermark.toml"
    config.write_text(
        'etcd = ["etcd-0:2379", "etcd-1:2379"]\nnamespace = "/l0gc/prod"\n'
        'etcd_timeout = "2s"\ntick_interval = "30s"\npublish_interval = "3s"\n'
        'partitions = ["orders/0-1", "audit"]\nregister = true\nhold_ttl = "1m"\n'
    )
    env = {"L0GC_CONFIG": str(config), "L0GC_PUBLISH_INTERVAL": "2s", "L0GC_HOLD_TTL": "45s"}
    invocation = parse(["serve", "--hold-ttl", "20s"], env)
    args = invocation.args
    assert args.hold_ttl == 20.0  # flag
    assert args.publish_interval == 2.0  # env
    assert args.tick_interval == 30.0  # config
    assert args.fence_timeout == 5.0  # default
    assert args.partitions == ("orders/0", "orders/1", "audit")
    assert args.register is True
    assert invocation.etcd.endpoints == ("etcd-0:2379", "etcd-1:2379")
    assert (invocation.etcd.namespace, invocation.etcd.timeout_s) == ("/l0gc/prod", 2.0)
    # The same file serves the admin commands: serve's keys are ignored there.
    assert parse(["epoch", "get", "--config", str(config)], {}).etcd.namespace == "/l0gc/prod"


def test_config_file_errors_name_the_key(tmp_path: Path) -> None:
    """An unknown key (with the closest one) or a bad value in the file is a usage error."""
    config = tmp_path / "watermark.toml"
    config.write_text("tick_intervall = 10\n")
    with pytest.raises(
        ConfigError,
        match=r"unknown key 'tick_intervall' \(did you mean "
        r"'tick_interval'\?\)",
    ):
        parse(["serve", "--config", str(config)], ETCD)
    config.write_text('tick_interval = "often"\n')
    with pytest.raises(
        ConfigError, match=f"config key tick_interval in {config}: invalid value 'often'"
    ):
        parse(["serve", "--config", str(config)], ETCD)


def test_serve_needs_an_etcd_endpoint_from_flag_env_or_config(tmp_path: Path) -> None:
    """No --etcd, L0GC_ETCD or config `etcd`: exit 2 naming both; the config file suffices."""
    with pytest.raises(ConfigError, match=r"--etcd .*L0GC_ETCD"):
        parse(["serve"], {})
    config = tmp_path / "watermark.toml"
    config.write_text('etcd = "etcd-0:2379"\n')
    assert parse(["serve", "--config", str(config)], {}).etcd.endpoints == ("etcd-0:2379",)
    assert parse(["epoch", "get"], {}).etcd.endpoints == ("127.0.0.1:2379",)


def leaf_parsers() -> dict[str, CommandParser]:
    """Every runnable `watermark` subcommand's parser, by command ("epoch get", ...)."""
    found: dict[str, CommandParser] = {}

    def walk(parser: CommandParser, prefix: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[prefix] = parser
            return
        for name, child in subs[0].choices.items():
            if name not in ("namespace", "completion"):  # gcd's command; no options
                walk(child, f"{prefix} {name}".strip())

    walk(build_parser(), "")
    return found


def test_every_flag_has_an_env_var_a_config_key_and_a_shown_default() -> None:
    """Walking the parser: every flag is a resolved Option whose help names its env var and,
    unless it is a switch, its default."""
    leaves = leaf_parsers()
    assert set(leaves) == set(COMMAND_OPTIONS)
    for command, parser in leaves.items():
        declared = {o.dest: o for o in (*COMMAND_OPTIONS[command], *ETCD_OPTIONS)}
        for action in parser._actions:
            if not action.option_strings or action.dest in ("help", "config"):
                continue
            assert action.dest in declared, f"watermark {command} {action.option_strings[0]}"
            option = declared[action.dest]
            assert f"env {option.env}" in str(action.help), option.flag
            if not option.switch:
                assert "default" in str(action.help) or "required" in str(action.help), option.flag


@pytest.mark.parametrize(
    ("argv", "variable", "dest"),
    [
        (["serve"], "L0GC_REGISTER", "register"),
        (["serve"], "L0GC_NO_IDLE_ADVANCE", "no_idle_advance"),
        (["serve"], "L0GC_INSECURE_NO_AUTH", "insecure_no_auth"),
        (["serve"], "L0GC_JSON", "json"),
        (["partition", "list"], "L0GC_JSON", "json"),
    ],
)
def test_switches_have_env_vars(argv: list[str], variable: str, dest: str) -> None:
    """The switches that had no variable (--register, --no-idle-advance, --json) now do."""
    assert getattr(parse(argv, {**ETCD, variable: "true"}).args, dest) is True
    assert getattr(parse(argv, {**ETCD, variable: "0"}).args, dest) is False


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --help` shows the defaults the old help left out, and the env vars."""
    assert main(["serve", "--help"]) == exitcodes.OK
    out = " ".join(capsys.readouterr().out.split())
    shown = [
        "deadline of a fence whose request gives none (default 5s; env L0GC_FENCE_TIMEOUT)",
        "(default 30s; env L0GC_HOLD_TTL)",
        "(default 10s; env L0GC_TICKER_LEASE_TTL)",
        "(default 5s; env L0GC_DRAIN_TIMEOUT)",
        "(default 127.0.0.1; env L0GC_HTTP_HOST)",
    ]
    assert [text for text in shown if text not in out] == []


def test_a_mistyped_flag_is_one_line_with_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`serve --tick-intervall 10s`: exit 2, one line with the suggestion and the usage line."""
    assert main(["serve", "--tick-intervall", "10s"]) == exitcodes.USAGE
    assert capsys.readouterr().err.splitlines() == [
        "watermark serve: unknown option --tick-intervall; did you mean --tick-interval?",
        "usage: watermark serve [options]; `watermark serve --help` lists them",
    ]
    assert main(["partition", "show"]) == exitcodes.USAGE
    assert len(capsys.readouterr().err.splitlines()) == 2


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client session."""
    async with aiohttp.ClientSession() as session:
        yield session


async def post(session: aiohttp.ClientSession, url: str, body: Any = None) -> Any:
    """POST JSON and return the JSON answer, which must be 200."""
    async with session.post(url, json=body) as response:
        doc = await response.json()
        assert response.status == 200, doc
        return doc


async def test_serve_fences_over_http_and_publishes_on_sigterm(
    etcd_server: LocalEtcd, namespace: str, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """`watermark serve`: ready, fence+commit+reconciled over HTTP, SIGTERM -> 0, final publish."""
    env = environment(etcd_server, namespace)
    log = tmp_path / "serve.log"
    serve = new_serve(
        None,
        None,
        log,
        "--register",
        "--publish-interval",
        "3600",
        "--no-idle-advance",
        partitions=("orders/0",),
        owner="serve-test",
        env=env,
    ).start()
    base = serve.url
    try:
        await asyncio.to_thread(serve.wait_ready, 30)
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
        code = await asyncio.to_thread(serve.stop, 30)
    assert code == exitcodes.OK, log.read_text()
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
    log = tmp_path / "serve.log"
    serve = new_serve(None, None, log, "--tick-interval", "0.2", env=env).start()
    base = serve.url
    try:
        await asyncio.to_thread(serve.wait_ready, 30)
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
        code = await asyncio.to_thread(serve.stop, 30)
    assert code == exitcodes.OK, log.read_text()


def test_serve_refuses_unsafe_http_settings_with_exit_2(tmp_path: Path) -> None:
    """A non-loopback bind without auth, an unclear L0GC_INSECURE_NO_AUTH, a malformed
    token file (named by line, never echoing the token) and a missing TLS file stop
    `serve` before it starts (exit 2)."""
    env = {**os.environ, "L0GC_ETCD": f"127.0.0.1:{free_port()}", "L0GC_NAMESPACE": "/l0gc/t"}
    exposed = watermark(env, "serve", "--http-host", "0.0.0.0")  # refused before binding
    assert exposed.returncode == exitcodes.USAGE, exposed.stderr
    assert "--auth-token-file" in exposed.stderr
    assert "--insecure-no-auth" in exposed.stderr
    unclear = watermark(
        {**env, "L0GC_INSECURE_NO_AUTH": "maybe"}, "serve", "--http-host", "0.0.0.0"
    )
    assert unclear.returncode == exitcodes.USAGE, unclear.stderr
    assert "env L0GC_INSECURE_NO_AUTH: invalid value 'maybe'" in unclear.stderr
    secret = "s3cret-token-0123456789abcdef"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# callers\nwriter:{secret}\nboss:{secret}x\n")
    tokens.chmod(0o600)
    bad_file = watermark(env, "serve", "--auth-token-file", str(tokens))
    assert bad_file.returncode == exitcodes.USAGE, bad_file.stderr
    assert "line 3: unknown role" in bad_file.stderr
    assert secret not in bad_file.stderr
    missing = tmp_path / "missing.pem"
    no_cert = watermark(
        {**env, "L0GC_TLS_CERT_FILE": str(missing), "L0GC_TLS_KEY_FILE": str(missing)}, "serve"
    )
    assert no_cert.returncode == exitcodes.USAGE, no_cert.stderr
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
    tokens.chmod(0o600)
    log = tmp_path / "serve.log"
    serve = new_serve(
        None,
        None,
        log,
        "--register",
        "--auth-token-file",
        str(tokens),
        partitions=("orders/0",),
        env=env,
    ).start()
    listing = f"{serve.url}/v1/partitions"
    try:
        await asyncio.to_thread(serve.wait_ready, 30)
        assert await get_status(http, listing, old) == 200
        assert await get_status(http, listing, new) == 401
        tokens.write_text(f"# rotated\nwriter:{new}\n")
        serve.signal(signal.SIGHUP)

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
        serve.signal(signal.SIGHUP)
        await wait_until(
            lambda: "watermark.auth_reload_failed" in log.read_text(),
            timeout_s=30,
            what="the failed reload to be logged",
        )
        assert await get_status(http, listing, new) == 200
        serve.signal(signal.SIGINT)
        code = await asyncio.to_thread(serve.wait_exit, 30)
    finally:
        if serve.alive:
            await asyncio.to_thread(serve.stop)
    text = log.read_text()
    assert code == exitcodes.INTERRUPTED, text
    assert "watermark serve: interrupted (Ctrl-C); stopped cleanly" in text
    assert "error: interrupted" not in text  # as gcd says it: not an error
    assert "line 2: not a token" in text
    assert "watermark.publisher_stopped" in text
    assert old not in text
    assert new not in text


def test_minus_zero_is_refused_as_an_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    """`epoch advance --expected -0` exits 2 naming the value (it was taken as 0)."""
    with pytest.raises(ConfigError, match=r"--expected: invalid value '-0'.*write 0, not -0"):
        parse(["epoch", "advance", "--expected", "-0", "--etcd", "127.0.0.1:1"])
    assert main(["epoch", "advance", "--expected", "-0", "--etcd", "127.0.0.1:1"]) == 2
    assert "write 0, not -0" in capsys.readouterr().err
