"""`gcd namespace bind|show`, `gcd sweep` and `gcd daemon` with --storage gcs, as an
operator runs them (subprocesses), against the GCS emulator and a real etcd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from gcd.cli.main import main
from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.clirun import run_cli
from tests.gcd.cli.test_sweep_cli import prepare_etcd
from tests.gcd.service.test_daemon import metric
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration

ROOT = "level_zero/data"
LAYOUT = KeyLayout.default(ROOT)
CLAIM = f"{ROOT}/.l0gc-claim.json"
KEPT = {LAYOUT.format(1, 9, "live"), LAYOUT.format(500, 9, "live"), f"{ROOT}/junk"}


@pytest.fixture
def gcs(gcs_server: LocalGcs, gcs_bucket: str) -> list[str]:
    """The test's bucket with 4 garbage, 2 live objects and one stray; the storage flags
    that reach it (the emulator takes no credentials)."""
    gcs_server.seed(gcs_bucket, [LAYOUT.format(p, e, "g") for p in (1, 500) for e in (1, 5)])
    gcs_server.seed(gcs_bucket, sorted(KEPT))
    return [
        "--storage",
        "gcs",
        "--bucket",
        gcs_bucket,
        "--endpoint-url",
        gcs_server.endpoint_url,
        "--gcs-anonymous",
    ]


def gcd(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m gcd ARGV`."""
    return run_cli("gcd", *argv, env=env, timeout_s=120)


def bucket_of(flags: list[str]) -> str:
    return flags[flags.index("--bucket") + 1]


def test_bind_then_sweep_a_gcs_bucket(
    gcs: list[str],
    gcs_server: LocalGcs,
    etcd_server: LocalEtcd,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Unbound: exit 3, naming the bind command. That command binds the namespace to
    the bucket (kind gcs, claim object written); another namespace binding the same root
    is refused (exit 3: the claim names the first); a dry run deletes nothing, a sweep
    exactly the garbage; `namespace show` finds it consistent. A bucket that does not
    exist: exit 2 in one line, nothing deleted."""
    prepare_etcd(etcd_server, namespace, bound_to=None)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    unbound = gcd("sweep", *gcs, *etcd, "--grace", "0s", "--json")
    assert unbound.returncode == exitcodes.BLOCKED, unbound.stderr
    suggested = json.loads(unbound.stdout.splitlines()[-1])["blocked_reason"].split("`")[1]
    assert suggested.startswith("watermark namespace bind --storage gcs --bucket "), suggested
    bound = subprocess.run(
        [sys.executable, "-m", *suggested.split(), "--gcs-anonymous", *etcd, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bound.returncode == 0, bound.stderr
    target = json.loads(bound.stdout)["binding"]["target"]
    assert (target["kind"], target["bucket"]) == ("gcs", bucket_of(gcs))
    other_ns = ["--etcd", etcd_server.endpoint, "--namespace", f"{namespace}-other"]
    assert main(["namespace", "bind", *gcs, *other_ns, "--json"]) == exitcodes.BLOCKED
    problem = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["problem"]
    assert "already claimed" in problem
    assert namespace in problem
    dry = gcd("sweep", *gcs, *etcd, "--grace", "0s", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout.splitlines()[-1])["eligible"] == 4
    assert len(gcs_server.keys(bucket_of(gcs))) == 8  # 4 garbage, 2 live, junk, the claim
    other = list(gcs)
    other[other.index("--bucket") + 1] = "no-such-bucket"
    missing = gcd("sweep", *other, *etcd, "--grace", "0s")
    assert missing.returncode == exitcodes.USAGE
    assert "GCS bucket 'no-such-bucket'" in missing.stderr
    assert "does not exist" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    swept = gcd("sweep", *gcs, *etcd, "--grace", "0s", "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout.splitlines()[-1])["deleted"] == 4
    assert gcs_server.keys(bucket_of(gcs)) == KEPT | {CLAIM}
    shown = gcd("namespace", "show", "--gcs-anonymous", *etcd, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["consistent"] is True


def test_no_credentials_exit_2_in_one_line(gcs: list[str], tmp_path: Path) -> None:
    """No key file, no GOOGLE_APPLICATION_CREDENTIALS, no gcloud ADC file and no metadata
    server (here a closed loopback port): exit 2 in one line naming the ways to give
    credentials, before any listing."""
    flags = [flag for flag in gcs if flag != "--gcs-anonymous"]
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
    env.update(
        HOME=str(tmp_path),
        CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
        GCE_METADATA_HOST=f"127.0.0.1:{free_port()}",
    )
    done = gcd("sweep", *flags, "--safe-epoch", "5", "--grace", "0s", env=env)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "no Google credentials" in done.stderr
    assert "GOOGLE_APPLICATION_CREDENTIALS" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--bucket", "b", "--gcs-anonymous"],
            "--gcs-anonymous is for Google Cloud Storage: add --storage gcs",
        ),
        (["--storage", "gcs"], "--storage gcs needs --bucket NAME"),
        (
            ["--storage", "gcs", "--bucket", "bkt", "--container", "x"],
            "--container is for Azure Blob Storage: add --storage azure",
        ),
        (["--storage", "gcs", "--bucket", "gs://bkt"], "is not a GCS bucket name"),
        (["--storage", "ftp", "--bucket", "bkt"], "choose s3, azure or gcs"),
    ],
)
def test_gcs_flags_that_cannot_work_exit_2(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mixed or incomplete GCS flags: exit 2 naming the flag and the fix (in process:
    the same `gcd.cli.main.main` as `python -m gcd`)."""
    assert main(["sweep", *flags, "--etcd", "127.0.0.1:1", "--namespace", "/x"]) == 2
    assert message in capsys.readouterr().err


def test_spark_on_gcs_refuses_an_undo_window_without_a_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spark-sweep --storage gcs runs (tests/gcd/spark/test_gcs.py); as on S3, an undo
    window without --journal-prefix is refused plainly (exit 2) before any Spark or GCS
    work."""
    code = main(
        [
            "spark-sweep",
            "--storage",
            "gcs",
            "--bucket",
            "bkt",
            "--list",
            "--undo-window",
            "1h",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "--undo-window 3600s needs --journal-prefix" in err


def test_the_daemon_sweeps_a_gcs_bucket_and_stops_on_sigterm(
    gcs: list[str],
    gcs_server: LocalGcs,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
) -> None:
    """`gcd daemon --storage gcs`: deletes the garbage (metrics say so), keeps the live
    and unparsable objects, deletes what becomes garbage later, exits 0 on SIGTERM."""
    prepare_etcd(etcd_server, namespace, bound_to=None)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    assert gcd("namespace", "bind", *gcs, *etcd).returncode == 0
    port = free_port()
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gcd",
                "daemon",
                *gcs,
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

    try:
        wait_until_sync(
            deleted(4),
            timeout_s=60,
            what="the first garbage deleted",
            ignore=(OSError,),
            detail=lambda: log_path.read_text()[-3000:],
        )
        assert gcs_server.keys(bucket_of(gcs)) == KEPT | {CLAIM}
        gcs_server.seed(bucket_of(gcs), [LAYOUT.format(77, 2, "later")])
        wait_until_sync(
            deleted(5),
            timeout_s=60,
            what="the later garbage deleted",
            ignore=(OSError,),
            detail=lambda: log_path.read_text()[-3000:],
        )
        assert gcs_server.keys(bucket_of(gcs)) == KEPT | {CLAIM}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
