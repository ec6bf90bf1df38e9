"""`gcd demo`: its ground-truth ledger and views (pure), and whole runs as subprocesses
(on moto, SeaweedFS and Azurite). Each whole run is marked `slow` (CI runs them, `make
test-fast` skips them); each is a configuration of its own (storage, signal), so none
can share another's run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient

from l0gc import exitcodes
from l0lab.demo.verify import DemoSummary, exit_code, problems, text_report
from l0lab.demo.view import Snapshot, progress_fields, render
from l0lab.demo.workload import CommitLog, horizon
from l0lab.testing.local_azurite import LocalAzurite
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalEtcd
from tests.clirun import run_cli

# -- the workload's pure parts ---------------------------------------------------------


def test_horizon_trails_by_the_lag_and_freezes_during_a_stall() -> None:
    """Lifted-through time is now - lag, held at stall start - lag during a stall."""
    assert horizon(10.0, 3.0, None) == 7.0
    assert horizon(12.0, 3.0, (10.0, 20.0)) == 7.0
    assert horizon(20.0, 3.0, (10.0, 20.0)) == 17.0


def test_commit_log_reports_the_highest_offset_lifted() -> None:
    """Entries committed at or before the horizon are dropped; the last offset is returned."""
    log = CommitLog()
    log.pending.extend([(1.0, 0), (2.0, 1), (3.0, 2)])
    assert log.lifted_through(0.5) is None
    assert log.lifted_through(2.0) == 1
    assert list(log.pending) == [(3.0, 2)]


# -- views and the summary ------------------------------------------------------------


def snapshot(**changes: Any) -> Snapshot:
    """A snapshot with plausible values."""
    values: dict[str, Any] = {
        "phase": "writing",
        "elapsed_s": 12.0,
        "duration_s": 60.0,
        "cluster_epoch": 9,
        "safe_epoch": 4,
        "pinned_by": ("orders/3",),
        "pinned_watermark": 4,
        "blocked_reason": None,
        "written": 300,
        "live": 40,
        "garbage": 60,
        "deleted": 200,
        "orphans": 2,
        "live_lost": 0,
        "list_requests": 30,
        "delete_requests": 3,
        "deletes_per_s": 21.5,
        "stalled_partition": "orders/3",
    }
    values.update(changes)
    return Snapshot(**values)


def test_live_view_names_the_pinning_partition_and_why() -> None:
    """The view shows epoch, M, lag, who pins M (and that its reconciler stalls), requests."""
    lines = render(snapshot())
    text = "\n".join(lines)
    assert "cluster epoch      9   global M      4   lag   5 epochs" in text
    assert "pinned by orders/3 (M(p) = 4)  <- its reconciler is stalled" in text
    assert "LIST     30   DELETE      3" in text
    assert "live objects lost  0  (ok)" in text
    assert progress_fields(snapshot())["lag"] == 5


def test_live_view_shows_losses_and_blocked_state() -> None:
    """A loss is shouted; an undefined M says it is blocked."""
    text = "\n".join(render(snapshot(live_lost=2, safe_epoch=None, blocked_reason="x")))
    assert "!! LIVE OBJECTS LOST" in text
    assert "BLOCKED: x" in text


def test_exit_code_and_problems() -> None:
    """Exit 0 only when nothing was lost and something was deleted; 130 when interrupted."""
    good = DemoSummary(ok=True, deleted=10)
    assert exit_code(good) == 0
    assert problems(DemoSummary(deleted=0), 60.0) == ["nothing was deleted in a 60 s run"]
    assert problems(DemoSummary(deleted=0), 5.0) == []
    assert exit_code(DemoSummary(live_lost=1, interrupted=True)) == 1
    assert exit_code(DemoSummary(interrupted=True)) == 130
    assert "l0gc demo: OK" in text_report(good)


def test_the_report_explains_orphans_and_why_read_back_objects_are_gone_too() -> None:
    """Everything deleted and yet N read back is no contradiction: the report says the
    read-back objects were unreconciled when the writers stopped and became garbage after,
    and what an orphan is (issue 42's first-day reading)."""
    done = text_report(
        DemoSummary(
            ok=True,
            objects_written=20,
            partitions=2,
            orphans=3,
            deleted=20,
            live_at_stop=5,
            live_verified=5,
        )
    )
    assert (
        "wrote     20 objects to 2 partitions, 3 of them orphans (uploads whose fence was "
        "refused: never committed, garbage at once)"
    ) in done
    assert (
        "verified  when the writers stopped, 5 objects were still referenced (not yet "
        "reconciled): 5 read back (HEAD); live objects lost: 0. The reconciler then caught "
        "up, so they became garbage too and were deleted with the rest\n"
    ) in done
    left = text_report(
        DemoSummary(ok=True, deleted=15, live_at_stop=5, live_verified=5, garbage_remaining=5)
    )
    assert "so they became garbage too\n" in left


# -- whole runs ------------------------------------------------------------------------


def running(pid: int, name: bytes, url: str) -> bool:
    """True while the process with this PID has `name` and `url`'s port in its command
    line. The port too: once the demo's child has exited its PID is free, and on a busy
    machine it soon names another test's server of the same kind, not ours to kill."""
    port = url.rstrip("/").rsplit(":", 1)[1].split("/", 1)[0].encode()
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return name in cmdline and port in cmdline


def assert_gone(pid: int, endpoint: str) -> None:
    """The demo's etcd child must be gone; if not, stop it (it is ours) and fail."""
    if running(pid, b"etcd", endpoint):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the demo left its etcd (pid {pid}, {endpoint}) running")


def demo(*args: str, own_group: bool = False) -> subprocess.Popen[str]:
    """Start `python -m gcd demo ARGS --json` (its servers are its own), optionally as the
    leader of a process group of its own, like a foreground job in a terminal."""
    return subprocess.Popen(
        [sys.executable, "-m", "gcd", "demo", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_group,
    )


def events(log: str, event: str) -> list[dict[str, Any]]:
    """The demo's JSON log lines (its stderr) of `event`, in order."""
    docs = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [doc for doc in docs if doc.get("event") == event]


def wait_for_event(
    proc: subprocess.Popen[str], event: str, timeout_s: float = 120
) -> dict[str, Any]:
    """Read the demo's JSON log lines until `event` appears; return that line."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            pytest.fail(f"the demo exited before logging {event}")
        if line.startswith("{"):
            doc: dict[str, Any] = json.loads(line)
            if doc.get("event") == event:
                return doc
    pytest.fail(f"no {event} within {timeout_s} s")


@pytest.mark.integration
@pytest.mark.slow
def test_a_short_demo_collects_garbage_and_loses_nothing() -> None:
    """An 8 s demo deletes garbage, loses no live object, and stops its etcd."""
    done = run_cli("gcd", "demo", "--duration", "8", "--json", timeout_s=120)
    summary = json.loads(done.stdout)
    assert_gone(summary["etcd_pid"], summary["etcd"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary["version"] == 1
    assert summary["ok"] is True
    assert summary["deleted"] > 0
    assert summary["live_lost"] == 0
    assert summary["live_verified"] == summary["live_at_stop"] > 0
    for field in (
        "garbage_remaining",
        "safe_epoch",
        "cluster_epoch",
        "objects_written",
        "list_requests",
        "delete_requests",
        "duration_s",
    ):
        assert isinstance(summary[field], int | float), field
    assert summary["deleted"] <= summary["objects_written"]
    assert '"event": "demo.progress"' in done.stderr


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_demo_cleanly(signum: signal.Signals) -> None:
    """SIGINT/SIGTERM mid-run: it drains, verifies, reports, exits 130, leaves no etcd.
    The writing phase ended early, by the signal: draining began less than the 120 s of
    writing asked for after the demo started (its own clock; the whole run may take as
    long as a loaded machine needs)."""
    proc = demo("--duration", "120")
    try:
        started = wait_for_event(proc, "demo.servers_started")
        wait_for_event(proc, "demo.progress")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_gone(started["etcd_pid"], started["etcd"])
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["interrupted"] is True
    assert summary["live_lost"] == 0
    phases = {doc["phase"]: doc["elapsed_s"] for doc in events(err, "demo.phase")}
    assert phases["draining"] < 120, phases


@pytest.mark.integration
@pytest.mark.slow
def test_a_second_signal_aborts_and_still_stops_etcd() -> None:
    """Two Ctrl-Cs: no summary, exit 130, and the etcd child is stopped all the same."""
    proc = demo("--duration", "120")
    try:
        started = wait_for_event(proc, "demo.servers_started")
        wait_for_event(proc, "demo.progress")
        proc.send_signal(signal.SIGINT)
        wait_for_event(proc, "demo.stopping")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_gone(started["etcd_pid"], started["etcd"])
    assert proc.returncode == 130
    assert out == ""
    assert "aborted" in err


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_in_a_terminal_reaches_etcd_too_and_still_ends_cleanly() -> None:
    """A terminal's Ctrl-C signals the whole group (demo and its etcd): still exit 130,
    a summary that verified the referenced objects, and no etcd left behind."""
    proc = demo("--duration", "120", own_group=True)
    try:
        started = wait_for_event(proc, "demo.servers_started")
        wait_for_event(proc, "demo.progress")
        os.killpg(proc.pid, signal.SIGINT)  # the group the demo leads: it and its etcd
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_gone(started["etcd_pid"], started["etcd"])
    assert proc.returncode == 130, err[-3000:]
    summary = json.loads(out)
    assert summary["interrupted"] is True
    assert summary["live_lost"] == 0
    assert summary["live_verified"] == summary["live_at_stop"]


@pytest.mark.deep  # the demo on the other stores: the everyday tier runs it on moto
@pytest.mark.integration
@pytest.mark.slow
def test_the_demo_runs_against_seaweedfs(seaweedfs_server: LocalSeaweedFS) -> None:
    """`gcd demo --endpoint-url` on a real S3 server (SeaweedFS): garbage deleted, no live
    object lost, every live object read back from the server."""
    done = run_cli(
        "gcd",
        "demo",
        "--duration",
        "8",
        "--json",
        "--endpoint-url",
        seaweedfs_server.endpoint_url,
        "--bucket",
        "l0gc-demo-sw",
        timeout_s=120,
    )
    summary = json.loads(done.stdout)
    assert_gone(summary["etcd_pid"], summary["etcd"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary["ok"] is True
    assert summary["deleted"] > 0
    assert summary["live_lost"] == 0
    assert summary["live_verified"] == summary["live_at_stop"] > 0


# -- on Azure Blob Storage -------------------------------------------------------------


def logged(stderr: str, event: str) -> dict[str, Any]:
    """The demo's JSON log line of `event` (the first one)."""
    for line in stderr.splitlines():
        if line.startswith("{"):
            doc: dict[str, Any] = json.loads(line)
            if doc.get("event") == event:
                return doc
    pytest.fail(f"the demo did not log {event}")


@pytest.fixture
def container(azurite_server: LocalAzurite, namespace: str) -> Iterator[str]:
    """A container name of this test's own on the session's Azurite (the demo creates it);
    deleted afterwards."""
    name = "demo-" + "".join(c for c in namespace.lower() if c.isalnum())[-40:]
    yield name
    service = BlobServiceClient.from_connection_string(azurite_server.connection_string)
    with contextlib.suppress(ResourceNotFoundError):
        service.delete_container(name)


@pytest.mark.deep
@pytest.mark.integration
@pytest.mark.slow
def test_the_demo_runs_on_an_azure_account(
    azurite_server: LocalAzurite,
    etcd_server: LocalEtcd,
    namespace: str,
    container: str,
    tmp_path: Path,
) -> None:
    """`gcd demo --storage azure --account-url ...` (Azurite, connection string in a file):
    garbage deleted, no live blob lost, every live blob read back; the container holds
    nothing under the demo's root at the end but the namespace's claim; and the namespace
    is bound exactly as `gcd namespace bind --storage azure` binds it."""
    connection = azurite_server.write_connection_string(tmp_path / "connection-string")
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    azure = [
        "--storage",
        "azure",
        "--account-url",
        azurite_server.account_url,
        "--container",
        container,
        "--azure-connection-string-file",
        str(connection),
    ]
    done = run_cli("gcd", "demo", "--duration", "8", "--json", *etcd, *azure, timeout_s=120)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["ok"] is True
    assert (summary["storage"], summary["bucket"]) == ("azure", container)
    assert summary["endpoint_url"] == azurite_server.account_url
    assert summary["deleted"] > 0
    assert summary["live_lost"] == 0
    assert summary["garbage_remaining"] == 0
    assert summary["live_verified"] == summary["live_at_stop"] > 0
    service = BlobServiceClient.from_connection_string(azurite_server.connection_string)
    root = summary["root"]
    left = [b.name for b in service.get_container_client(container).list_blobs(root + "/")]
    assert left == [f"{root}/.l0gc-claim.json"]
    bind = run_cli("gcd", "namespace", "bind", *azure, "--root", root, *etcd, "--json")
    assert bind.returncode == 0, bind.stderr[-3000:]
    bound = json.loads(bind.stdout)
    assert bound["changed"] is False  # the demo's binding is this one already
    assert bound["binding"]["target"]["kind"] == "azure"


@pytest.mark.deep
@pytest.mark.integration
@pytest.mark.slow
def test_the_demo_starts_and_stops_its_own_azurite(etcd_server: LocalEtcd, namespace: str) -> None:
    """`gcd demo --storage azure` with no account: it runs on an Azurite of its own, verifies
    (0 lost, 0 garbage left), and the Azurite process is gone when it exits."""
    done = run_cli(
        "gcd",
        "demo",
        "--duration",
        "8",
        "--json",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--storage",
        "azure",
        timeout_s=120,
    )
    started = logged(done.stderr, "demo.servers_started")
    if running(started["azurite_pid"], b"azurite", started["endpoint_url"]):
        os.kill(started["azurite_pid"], signal.SIGKILL)
        pytest.fail(f"the demo left its Azurite (pid {started['azurite_pid']}) running")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["ok"] is True
    assert summary["storage"] == "azure"
    assert summary["endpoint_url"].endswith("/devstoreaccount1")
    assert (summary["deleted"] > 0, summary["live_lost"], summary["garbage_remaining"]) == (
        True,
        0,
        0,
    )


@pytest.mark.integration
@pytest.mark.slow
def test_the_demo_runs_on_its_own_gcs_emulator(etcd_server: LocalEtcd, namespace: str) -> None:
    """`gcd demo --storage gcs` with no endpoint: it runs on a GCS emulator of its own
    (the sweeper deleting through JSON batches), verifies (0 lost, 0 garbage left), and
    the emulator process is gone when it exits."""
    done = run_cli(
        "gcd",
        "demo",
        "--duration",
        "8",
        "--json",
        "--etcd",
        etcd_server.endpoint,
        "--namespace",
        namespace,
        "--storage",
        "gcs",
        timeout_s=120,
    )
    started = logged(done.stderr, "demo.servers_started")
    if running(started["gcs_emulator_pid"], b"gcs_emulator", started["endpoint_url"]):
        os.kill(started["gcs_emulator_pid"], signal.SIGKILL)
        pytest.fail(f"the demo left its emulator (pid {started['gcs_emulator_pid']}) running")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert (summary["ok"], summary["storage"], summary["bucket"]) == (True, "gcs", "l0gc-demo")
    assert summary["endpoint_url"].startswith("http://127.0.0.1:")
    assert (summary["deleted"] > 0, summary["live_lost"], summary["garbage_remaining"]) == (
        True,
        0,
        0,
    )
    assert summary["live_verified"] == summary["live_at_stop"] > 0


AZURE_URL = ["--account-url", "https://acct.blob.core.windows.net"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--storage", "azure", "--endpoint-url", "http://127.0.0.1:9000"],
            "--endpoint-url is for S3",
        ),
        (
            ["--storage", "azure", *AZURE_URL, "--container", "l0gc", "--bucket", "b"],
            "--bucket is for S3",
        ),
        (["--storage", "azure", "--region", "eu-west-1"], "--region is for S3"),
        (["--container", "l0gc"], "--container is for Azure Blob Storage: add --storage azure"),
        (["--storage", "azure", *AZURE_URL], "needs --account-url URL and --container NAME"),
        (
            ["--storage", "azure", "--azure-connection-string-file", "conn"],
            "--azure-connection-string-file needs --account-url",
        ),
        (["--storage", "ftp"], "--storage 'ftp': choose s3, azure or gcs"),
        (["--storage", "gcs", "--gcs-anonymous"], "--gcs-anonymous need --endpoint-url"),
    ],
)
def test_storage_flags_that_do_not_fit_exit_2(flags: list[str], message: str) -> None:
    """Mixed or incomplete storage flags: exit 2 naming the flag, before any server starts."""
    done = run_cli("gcd", "demo", "--json", *flags)
    assert done.returncode == exitcodes.USAGE, done.stderr[-3000:]
    assert message in done.stderr
    assert "demo.servers_started" not in done.stderr
    error = json.loads(done.stdout)  # --json: the failure as one JSON document (issue 27)
    assert (error["error"], error["exit_code"]) == ("usage", exitcodes.USAGE)
