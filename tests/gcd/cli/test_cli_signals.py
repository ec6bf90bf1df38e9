"""Ctrl-C and SIGTERM, run as an operator runs them: `gcd sweep` and `gcd daemon` as
processes, the signal sent by PID once they are ready.

- `gcd sweep --json` + SIGINT mid-round: exit 130, one line on stderr, and a JSON
  document with "error": "interrupted" plus the summary of what the round did.
- `gcd daemon`: SIGINT is a clean stop that exits 130; SIGTERM (how Kubernetes stops a
  pod) is a clean stop that exits 0.
- Ctrl-C that reaches `gcd.cli.main` itself: exit 130, one line, and with --json the
  JSON error document (never an empty "error:" line).

Named by behaviour, not module: one signal contract of `gcd sweep` and `gcd daemon` as processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.cli.main import SUBCOMMANDS, Subcommand, main
from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0lab.testing.local_servers import LocalS3, free_port
from tests.waiting import wait_until_sync

REPO = Path(__file__).resolve().parents[3]
LAYOUT = KeyLayout.default("level_zero/data")
OLD = datetime.now(UTC) - timedelta(hours=2)


@contextlib.contextmanager
def start(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m gcd ARGV` with stdout piped and stderr (the logs) in `log`; killed by
    its PID if the test leaves the block with it still running."""
    with log.open("wb") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gcd", *argv],
            stdout=subprocess.PIPE,
            stderr=handle,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
        )
    with proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)


def stopped(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Wait for the process to end (bounded); its exit code and stdout."""
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out.decode()


@pytest.mark.integration
def test_sweep_json_ctrl_c_mid_round_exits_130_with_the_partial_summary(
    s3_server: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """SIGINT while deleting: requests in flight finish, exit 130, one stderr line, and
    {"version", "error": "interrupted", "signal": "SIGINT", ...summary} on stdout."""
    garbage = [LAYOUT.format(p, 1, f"g{i}") for p in (1, 2) for i in range(50)]
    s3_server.seed(bucket, garbage, last_modified=OLD)
    log = tmp_path / "sweep.log"
    with start(
        [
            "sweep",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--safe-epoch",
            "5",
            "--grace",
            "1m",
            "--json",
            "--batch-size",
            "1",
            "--concurrency",
            "1",
            "--max-deletes-per-second",
            "4",
        ],
        log,
    ) as proc:
        wait_until_sync(
            lambda: b"sweep.round_started" in log.read_bytes() or proc.poll() is not None,
            timeout_s=60,
            what="the round to start",
            detail=lambda: log.read_text()[-3000:],
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        code, out = stopped(proc)
    assert code == exitcodes.INTERRUPTED, log.read_text()[-3000:]
    document = json.loads(out)
    assert list(document)[:3] == ["version", "error", "signal"]
    assert (document["version"], document["error"], document["signal"]) == (
        1,
        "interrupted",
        "SIGINT",
    )
    assert document["deleted"] < len(garbage)
    assert len(s3_server.keys(bucket)) == len(garbage) - document["deleted"]
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("gcd sweep:")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("gcd sweep: interrupted by SIGINT")


def ready(port: int) -> bool:
    """True once the daemon's /readyz answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except urllib.error.HTTPError:
        return False


@pytest.mark.integration
@pytest.mark.parametrize(
    ("signum", "expected"),
    [(signal.SIGINT, exitcodes.INTERRUPTED), (signal.SIGTERM, exitcodes.OK)],
    ids=["SIGINT", "SIGTERM"],
)
def test_daemon_ctrl_c_exits_130_and_sigterm_exits_0(
    s3_server: LocalS3, bucket: str, tmp_path: Path, signum: signal.Signals, expected: int
) -> None:
    """Both signals stop the daemon cleanly; Ctrl-C exits 130 with one line saying so,
    SIGTERM (Kubernetes' stop) exits 0 without it."""
    s3_server.create_bucket(bucket)
    port = free_port()
    log = tmp_path / "daemon.log"
    with start(
        [
            "daemon",
            "--bucket",
            bucket,
            "--endpoint-url",
            s3_server.endpoint_url,
            "--region",
            "us-east-1",
            "--safe-epoch",
            "5",
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(port),
        ],
        log,
    ) as proc:

        def up() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return ready(port)

        wait_until_sync(
            up,
            timeout_s=60,
            what="/readyz 200",
            ignore=(OSError,),
            detail=lambda: log.read_text()[-3000:],
        )
        proc.send_signal(signum)
        code, _ = stopped(proc)
    text = log.read_text()
    assert code == expected, text[-3000:]
    assert "daemon.stopped" in text
    said = [ln for ln in text.splitlines() if ln.startswith("gcd daemon:")]
    if signum is signal.SIGINT:
        assert len(said) == 1
        assert said[0].startswith("gcd daemon: interrupted (Ctrl-C): stopped cleanly")
    else:
        assert said == []


class _Interrupted:
    """A stand-in subcommand whose run is interrupted before it handles anything."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true")

    @staticmethod
    def run(_args: argparse.Namespace) -> int:
        raise KeyboardInterrupt


@pytest.mark.parametrize("as_json", [True, False])
def test_ctrl_c_reaching_main_exits_130_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """A KeyboardInterrupt out of a command: exit 130, "interrupted" on stderr (not an
    empty error line) and, with --json, {"version": 1, "error": "interrupted"}."""
    monkeypatch.setitem(sys.modules, "tests_gcd_interrupted_command", _Interrupted)
    monkeypatch.setitem(
        SUBCOMMANDS, "interrupted", Subcommand("tests_gcd_interrupted_command", "test only")
    )
    argv = ["interrupted", *(["--json"] if as_json else [])]
    assert main(argv) == exitcodes.INTERRUPTED
    captured = capsys.readouterr()
    assert captured.err == "gcd interrupted: interrupted (Ctrl-C); stopped at once\n"
    if as_json:
        assert json.loads(captured.out) == {"version": 1, "error": "interrupted"}
    else:
        assert captured.out == ""
