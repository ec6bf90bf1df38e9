"""`gcd namespace bind`, `gcd sweep` and `gcd daemon` with --storage azure, as an operator
runs them (subprocesses), against Azurite and a real etcd."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient

from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0lab.testing.local_azurite import LocalAzurite
from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.clirun import run_cli
from tests.gcd.cli.test_sweep_cli import prepare_etcd
from tests.gcd.service.test_daemon import metric
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)


@pytest.fixture
def azure(azurite_server: LocalAzurite, tmp_path: Path, namespace: str) -> Iterator[list[str]]:
    """A fresh container (named after the test's namespace) with garbage and live blobs;
    the storage flags that reach it (connection string in a file)."""
    name = "az-" + "".join(c for c in namespace.lower() if c.isalnum())[-40:]
    conn = azurite_server.write_connection_string(tmp_path / "conn")
    service = BlobServiceClient.from_connection_string(azurite_server.connection_string)
    container = service.create_container(name)
    for key in [LAYOUT.format(p, e, "g") for p in (1, 500) for e in (1, 5)]:
        container.upload_blob(key, b"x")
    for key in [LAYOUT.format(p, 9, "live") for p in (1, 500)] + [f"{ROOT}/junk"]:
        container.upload_blob(key, b"x")
    yield [
        "--storage",
        "azure",
        "--account-url",
        azurite_server.account_url,
        "--container",
        name,
        "--azure-connection-string-file",
        str(conn),
    ]
    container.delete_container()


def gcd(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m gcd ARGV`."""
    return run_cli("gcd", *argv, timeout_s=120)


def left(azurite: LocalAzurite, flags: list[str]) -> set[str]:
    """Blob names left in the fixture's container."""
    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = service.get_container_client(flags[flags.index("--container") + 1])
    return {blob.name for blob in container.list_blobs()}


def test_bind_then_sweep_an_azure_container(
    azure: list[str], azurite_server: LocalAzurite, etcd_server: LocalEtcd, namespace: str
) -> None:
    """The namespace is bound to the container (claim blob written), then a sweep deletes
    exactly the garbage; a dry run before deletes nothing."""
    prepare_etcd(etcd_server, namespace, bound_to=None)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    bound = gcd("namespace", "bind", *azure, *etcd, "--json")
    assert bound.returncode == 0, bound.stderr
    assert json.loads(bound.stdout)["binding"]["target"]["kind"] == "azure"
    dry = gcd("sweep", *azure, *etcd, "--grace", "0s", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout.splitlines()[-1])["eligible"] == 4
    assert len(left(azurite_server, azure)) == 8  # 4 garbage, 2 live, junk, the claim
    swept = gcd("sweep", *azure, *etcd, "--grace", "0s", "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout.splitlines()[-1])["deleted"] == 4
    assert left(azurite_server, azure) == {
        LAYOUT.format(1, 9, "live"),
        LAYOUT.format(500, 9, "live"),
        f"{ROOT}/junk",
        f"{ROOT}/.l0gc-claim.json",
    }
    shown = gcd("namespace", "show", *azure[-2:], *etcd, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["consistent"] is True


def test_an_unbound_or_other_container_deletes_nothing(
    azure: list[str], azurite_server: LocalAzurite, etcd_server: LocalEtcd, namespace: str
) -> None:
    """Unbound: exit 3. Bound to this container but pointed at another one: exit 3 (or
    2 if that container does not exist); nothing deleted either way."""
    prepare_etcd(etcd_server, namespace, bound_to=None)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    unbound = gcd("sweep", *azure, *etcd, "--grace", "0s", "--json")
    assert unbound.returncode == exitcodes.BLOCKED, unbound.stderr
    suggested = json.loads(unbound.stdout.splitlines()[-1])["blocked_reason"].split("`")[1]
    assert suggested.startswith("watermark namespace bind --storage azure "), suggested
    credentials = azure[azure.index("--azure-connection-string-file") :]
    bound = subprocess.run(
        [sys.executable, "-m", *suggested.split(), *credentials, *etcd],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bound.returncode == 0, bound.stderr  # the command it suggests binds this container
    other = list(azure)
    other[other.index("--container") + 1] = "no-such-container"
    missing = gcd("sweep", *other, *etcd, "--grace", "0s")
    assert missing.returncode == exitcodes.USAGE
    assert "does not exist" in missing.stderr
    assert len(left(azurite_server, azure)) == 8


URL = ["--account-url", "https://a.blob.core.windows.net"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--storage", "azure", *URL, "--container", "l0gc", "--bucket", "b"],
            "--bucket is for S3",
        ),
        (
            ["--bucket", "b", "--container", "x"],
            "--container is for Azure Blob Storage: add --storage azure",
        ),
        (["--storage", "ftp", "--bucket", "b"], "--storage 'ftp': choose s3, azure or gcs"),
        (["--storage", "azure", "--container", "l0gc"], "needs --account-url URL and --container"),
        (
            ["--storage", "azure", "--account-url", "acct", "--container", "l0gc"],
            "must start with https://",
        ),
        (["--storage", "azure", *URL, "--container", "L0"], "is not a container name"),
    ],
)
def test_storage_flags_that_cannot_work_exit_2(flags: list[str], message: str) -> None:
    """Mixed or incomplete storage flags: exit 2 naming the flag and the fix."""
    done = gcd("sweep", *flags, "--etcd", "127.0.0.1:1", "--namespace", "/x")
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert message in done.stderr


def test_a_sas_token_in_the_account_url_is_never_echoed() -> None:
    """Issue 51 (5): a SAS signature in --account-url was echoed in error messages. Now
    every query value is REDACTED in what the command prints (here: a plain-http URL
    without a connection string, which used to crash with a traceback)."""
    secret = "sv=2024-08-04&sig=SeCrEtSiGnAtUrE%3D"
    done = gcd(
        "sweep",
        "--storage",
        "azure",
        "--account-url",
        f"http://127.0.0.1:1/?{secret}",
        "--container",
        "l0gc",
        "--etcd",
        "127.0.0.1:1",
        "--namespace",
        "/x",
    )
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "SeCrEtSiGnAtUrE" not in done.stderr + done.stdout
    assert "?sv=REDACTED&sig=REDACTED is plain http" in done.stderr
    assert "Traceback" not in done.stderr


def test_spark_on_azure_needs_the_container_flags(tmp_path: Path) -> None:
    """spark-sweep --storage azure names the container by --account-url and --container
    (`tests/gcd/spark/test_azure.py` sweeps one): --bucket is refused, saying what to give."""
    done = gcd(
        "spark-sweep",
        "--storage",
        "azure",
        "--bucket",
        "b",
        "--list",
        "--output",
        str(tmp_path / "out"),
    )
    assert done.returncode == exitcodes.USAGE
    assert "--bucket is for S3; with --storage azure give --account-url and --container" in (
        done.stderr
    )


def test_the_daemon_sweeps_an_azure_container_and_stops_on_sigterm(
    azure: list[str],
    azurite_server: LocalAzurite,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
) -> None:
    """`gcd daemon --storage azure`: deletes the garbage (metrics say so), keeps the live
    and unparsable blobs, deletes what becomes garbage later, and exits 0 on SIGTERM."""
    prepare_etcd(etcd_server, namespace, bound_to=None)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    assert gcd("namespace", "bind", *azure, *etcd).returncode == 0
    port = free_port()
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gcd",
                "daemon",
                *azure,
                *etcd,
                "--grace",
                "0s",
                "--interval",
                "0.05s",
                "--idle-interval",
                "0.1s",
                "--max-interval",
                "1s",
                "--full-pass-interval",
                "0.3s",
                "--http-host",
                "127.0.0.1",
                "--http-port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def deleted(count: int) -> Callable[[], bool]:
        def check() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
            return metric(text, "l0gc_sweeper_deleted_objects_total") >= count

        return check

    kept = {
        LAYOUT.format(1, 9, "live"),
        LAYOUT.format(500, 9, "live"),
        f"{ROOT}/junk",
        f"{ROOT}/.l0gc-claim.json",
    }
    try:
        wait_until_sync(
            deleted(4),
            timeout_s=60,
            what="the first garbage deleted",
            ignore=(OSError,),
            detail=lambda: log_path.read_text()[-3000:],
        )
        assert left(azurite_server, azure) == kept
        later = LAYOUT.format(77, 2, "later")
        service = BlobServiceClient.from_connection_string(azurite_server.connection_string)
        service.get_container_client(azure[azure.index("--container") + 1]).upload_blob(later, b"x")
        wait_until_sync(
            deleted(5),
            timeout_s=60,
            what="the later garbage deleted",
            ignore=(OSError,),
            detail=lambda: log_path.read_text()[-3000:],
        )
        assert left(azurite_server, azure) == kept
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_connection_string_for_another_account_exits_2(
    azure: list[str], azurite_server: LocalAzurite, etcd_server: LocalEtcd, namespace: str
) -> None:
    """--account-url names one account, the connection string file another: the binding
    would name the first while the client deletes in the second, so nothing starts."""
    prepare_etcd(etcd_server, namespace, bound_to=None)
    other = list(azure)
    other[other.index("--account-url") + 1] = "http://127.0.0.1:1/otheraccount"
    done = gcd(
        "namespace", "bind", *other, "--etcd", etcd_server.endpoint, "--namespace", namespace
    )
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "not --account-url http://127.0.0.1:1/otheraccount" in done.stderr
    swept = gcd("sweep", *other, "--etcd", etcd_server.endpoint, "--namespace", namespace)
    assert swept.returncode == exitcodes.USAGE, swept.stderr
    assert len(left(azurite_server, azure)) == 7  # nothing deleted, no claim written
