"""What `gcd` loads before it runs a command, and the cyclic collector around start-up
(issue 56; bench/startup.py measures the CPU).

- `gcd --help` and `gcd --version` import `gcd.cli.main` and the kernel's exit codes:
  no asyncio, no argparse, no command's module, no SDK; a ceiling on the module count.
- `gcd sweep --help` imports its options, not the sweep runtime (`RUN_IMPORTS`), the S3
  client, etcd's client (gRPC), Spark or Azure; a ceiling on the module count.
- An empty round bound through etcd: a ceiling on the module count (the S3 and etcd
  clients included), nothing of Spark, Azure, Google's SDK or the daemon's server.
- Start-up runs with the collector off and is frozen after; an in-process caller of
  `main` gets the collector back as it was, nothing left frozen, whatever the command
  did (ran, printed its help, failed on usage, raised); `load_frozen` freezes what it
  imports only while `main` runs a command.

Ceilings, not timings: each has a margin over today's count (noted beside it) so a new
dependency of a dependency does not fail them, while an eager import of a subcommand,
an SDK or the S3 stack does.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.cli import main as main_module
from gcd.cli.main import SUBCOMMANDS, Subcommand, freeze_opened, load_frozen, main
from l0gc import exitcodes
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.binding import bind_sync

REPO = Path(__file__).parents[3]
ROOT = "level_zero/data"

_COUNT = """
import sys
from gcd.cli.main import main
code = main(sys.argv[1:])
print("EXIT", code, "MODULES", len(sys.modules), "LOADED", sorted(sys.modules), file=sys.stderr)
"""

HEAVY = (
    "aiobotocore",
    "botocore",
    "boto3",
    "aiohttp",
    "aetcd",
    "grpc",
    "google",
    "azure",
    "pyspark",
    "py4j",
)


def _loaded(argv: list[str]) -> tuple[int, list[str]]:
    """(exit code, modules loaded) of `gcd ARGV` run in a child process."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    err = subprocess.run(
        [sys.executable, "-c", _COUNT, *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    ).stderr
    line = next(x for x in err.splitlines() if x.startswith("EXIT "))
    head, _, names = line.partition(" LOADED ")
    return int(head.split()[1]), json.loads(names.replace("'", '"'))


def _of(names: list[str], packages: tuple[str, ...]) -> list[str]:
    return [n for n in names if n in packages or n.startswith(tuple(p + "." for p in packages))]


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["help"]])
def test_gcd_help_imports_no_command_nor_sdk(argv: list[str]) -> None:
    """`gcd --help` loads ~94 modules (a bare interpreter ~70): the ceiling is 120."""
    code, names = _loaded(argv)
    assert code == exitcodes.OK
    assert not _of(names, HEAVY)
    assert not _of(names, ("asyncio", "argparse", "structlog", "msgspec", "prometheus_client"))
    assert [n for n in names if n.startswith("gcd.")] == ["gcd.cli", "gcd.cli.main"]
    assert len(names) <= 120, len(names)


def test_gcd_sweep_help_imports_its_options_not_the_runtime_nor_the_clients() -> None:
    """`gcd sweep --help` loads ~350 modules (its options; not its `RUN_IMPORTS`, the
    sweep runtime with its journal and Prometheus metrics): the ceiling is 420."""
    code, names = _loaded(["sweep", "--help"])
    assert code == exitcodes.OK
    assert not _of(names, HEAVY)
    assert not _of(names, ("gcd.cli.spark", "gcd.cli.demo", "gcd.spark", "gcd.service"))
    assert not _of(names, ("gcd.sweep", "gcd.journal", "prometheus_client"))
    assert len(names) <= 420, len(names)


@pytest.mark.integration
def test_an_empty_bound_round_stays_under_its_module_ceiling(
    etcd_server: LocalEtcd, s3_server: LocalS3, bucket: str, namespace: str
) -> None:
    """An empty round (M through the binding in etcd, one live key, nothing deleted)
    loads ~825 modules, the S3 client and etcd's among them: the ceiling is 920."""
    import asyncio  # noqa: PLC0415

    from l0gc.etcd.settings import EtcdSettings, open_kv  # noqa: PLC0415
    from l0gc.etcd.store import WatermarkStore  # noqa: PLC0415

    async def register() -> None:  # cluster epoch 8, one partition at M(p) = 7
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(8)
            await store.register_partition("t/0")
        finally:
            await kv.close()

    asyncio.run(register())
    live = f"{ROOT}/001/000000000000000009/live"
    s3_server.seed(bucket, [live], last_modified=datetime.now(UTC) - timedelta(hours=2))
    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket, ROOT)
    code, names = _loaded(
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
        ]
    )
    assert code == exitcodes.OK
    assert _of(names, ("aiobotocore", "aetcd"))  # the round did open both clients
    assert not _of(names, ("azure", "google.cloud", "pyspark", "gcd.spark", "aiohttp.web"))
    assert not _of(names, ("gcd.journal.anchor", "gcd.journal.search"))  # no journal given
    assert len(names) <= 920, len(names)
    assert live in s3_server.keys(bucket)  # kept: its epoch is above M


# -- the collector around start-up -------------------------------------------------


class _Probe:
    """A command module: records the collector's state while it runs."""

    seen: dict[str, object] = {}  # noqa: RUF012 - one probe at a time

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--fail", action="store_true")

    @staticmethod
    async def run(args: argparse.Namespace) -> int:
        seen = _Probe.seen
        seen["enabled"] = gc.isenabled()
        seen["frozen_at_start"] = gc.get_freeze_count()
        sys.modules.pop("tests_gcd_startup_loaded", None)
        load_frozen("tests_gcd_startup_loaded", "tests_gcd_startup_missing")
        seen["frozen_after_load"] = gc.get_freeze_count()
        seen["enabled_after_load"] = gc.isenabled()
        opened = [[] for _ in range(1000)]  # what opening the store would load
        freeze_opened()
        seen["frozen_after_open"] = gc.get_freeze_count()
        del opened
        if args.fail:
            raise RuntimeError("a bug in the command")
        return exitcodes.OK


class _SyncProbe:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        pass

    @staticmethod
    def run(_args: argparse.Namespace) -> int:
        _Probe.seen["sync_enabled"] = gc.isenabled()
        return exitcodes.OK


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, object]]:
    (tmp_path / "tests_gcd_startup_loaded.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "tests_gcd_startup_probe", _Probe)
    monkeypatch.setitem(sys.modules, "tests_gcd_startup_sync", _SyncProbe)
    monkeypatch.setitem(SUBCOMMANDS, "probe", Subcommand("tests_gcd_startup_probe", "test"))
    monkeypatch.setitem(SUBCOMMANDS, "syncprobe", Subcommand("tests_gcd_startup_sync", "test"))
    _Probe.seen = {}
    yield _Probe.seen
    sys.modules.pop("tests_gcd_startup_loaded", None)


def test_a_command_runs_frozen_and_the_caller_gets_the_collector_back(
    probes: dict[str, object],
) -> None:
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert main(["probe"]) == exitcodes.OK
    assert probes["enabled"] is True  # on while the command runs
    frozen_at_start = probes["frozen_at_start"]
    assert isinstance(frozen_at_start, int)
    assert frozen_at_start > 0
    frozen_after = probes["frozen_after_load"]
    assert isinstance(frozen_after, int)
    assert frozen_after >= frozen_at_start
    assert probes["enabled_after_load"] is True
    frozen_opened = probes["frozen_after_open"]
    assert isinstance(frozen_opened, int)
    assert frozen_opened >= frozen_after + 1000
    assert "tests_gcd_startup_loaded" in sys.modules  # imported; the missing one ignored
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize(
    "argv", [["probe", "--help"], ["probe", "--no-such-flag"], ["syncprobe"], ["nosuch"]]
)
def test_help_usage_errors_and_sync_commands_leave_the_collector_as_it_was(
    probes: dict[str, object], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    main(argv)
    capsys.readouterr()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    if argv == ["syncprobe"]:
        assert probes["sync_enabled"] is True


def test_a_command_that_raises_leaves_the_collector_as_it_was(
    probes: dict[str, object],
) -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        main(["probe", "--fail"])
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_caller_that_turned_the_collector_off_keeps_it_off(
    probes: dict[str, object],
) -> None:
    gc.disable()
    try:
        assert main(["probe"]) == exitcodes.OK
        assert probes["enabled"] is False
        assert probes["enabled_after_load"] is False
        assert not gc.isenabled()
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_outside_a_run_nothing_is_frozen(
    probes: dict[str, object],
) -> None:
    assert not main_module._running
    load_frozen("tests_gcd_startup_loaded", "tests_gcd_startup_missing")
    freeze_opened()
    assert "tests_gcd_startup_loaded" in sys.modules
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
