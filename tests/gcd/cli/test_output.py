"""What the gcd CLI shows people: the sweep's progress line on a terminal ends with the
round's real totals, a summary for people on stdout without --json, a two-line usage
error with the closest flag, and the exit codes in `gcd --help`."""

from __future__ import annotations

import errno
import json
import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.cli.main import main
from gcd.cli.sweep import interrupted_document, text_summary
from gcd.observe.report import RoundSummary
from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0lab.testing.local_servers import LocalS3, free_port
from tests.waiting import wait_until_sync
from watermark.__main__ import main as watermark_main

REPO = Path(__file__).resolve().parents[3]
LAYOUT = KeyLayout.default("level_zero/data")
OLD = datetime.now(UTC) - timedelta(hours=2)


def run_with_tty_stderr(argv: list[str]) -> tuple[int, str, str]:
    """`python -m gcd ARGV` with stderr on a pseudo-terminal: exit code, stdout, stderr."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "gcd", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=REPO,
    ) as proc:
        os.close(follower)
        chunks = []
        try:
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError as exc:  # EIO: the child closed the terminal (it exited)
                    if exc.errno != errno.EIO:
                        raise
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(leader)
        out, _ = proc.communicate(timeout=60)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


@pytest.mark.integration
def test_sweep_on_a_terminal_ends_with_the_real_totals_and_prints_a_summary(
    s3_server: LocalS3, bucket: str
) -> None:
    """On a TTY the last progress line shows what the round did (not zeros), and stdout
    carries a summary for people saying how many objects were deleted."""
    garbage = [LAYOUT.format(p, e, "g") for p in (1, 2) for e in range(1, 6)]
    s3_server.seed(bucket, [*garbage, LAYOUT.format(3, 9, "live")], last_modified=OLD)
    code, out, err = run_with_tty_stderr(
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
        ]
    )
    assert code == exitcodes.OK, err
    final = err.rsplit("\r\x1b[2K", 1)[-1].splitlines()[0]
    assert final.startswith("listed 11  eligible 10  deleted 10 (10 B)"), repr(err[-2000:])
    assert out.startswith("gcd sweep: deleted 10 objects (10 B)\n")
    assert "  listed     11 objects; eligible 10\n" in out
    assert (
        "  kept       1 live (epoch > M; keys skip-ahead did not list are not counted), "
        "0 too young (grace period), 0 unparsable\n"
    ) in out
    assert s3_server.keys(bucket) == {LAYOUT.format(3, 9, "live")}
    assert "sweep.round_started" not in err  # issue 27: info logs would tear the line apart


def test_text_summary_says_what_happened() -> None:
    """Blocked, dry-run and interrupted rounds each say so in the first line."""
    blocked = text_summary(RoundSummary(safe_epoch=None, blocked_reason="paused: upgrade"))
    assert blocked.splitlines()[0] == "gcd sweep: paused, nothing deleted: paused: upgrade"
    assert "listed" not in blocked
    assert blocked.splitlines()[1].startswith(
        "  M          not applied (paused: `gcd status` shows the M etcd holds)"
    )
    dry = text_summary(RoundSummary(safe_epoch=4, cluster_epoch=6, dry_run=True, eligible=3))
    assert dry.splitlines()[0] == "gcd sweep: dry run: would delete 3 objects, deleted nothing"
    assert "  M          4 (cluster epoch 6)" in dry
    stopped = text_summary(
        RoundSummary(safe_epoch=4, deleted=2, deleted_bytes=2048), interrupted_by="SIGINT"
    )
    assert stopped.startswith("gcd sweep: interrupted by SIGINT after deleting 2 objects (2.0 KiB)")
    # issue 55: with an undo window, hidden objects are said to be hidden, not deleted
    hidden = text_summary(
        RoundSummary(
            safe_epoch=4, deleted=66, markers_written=64, versions_reclaimed=2, deleted_bytes=2048
        )
    )
    assert hidden.splitlines()[0] == (
        "gcd sweep: hid 64 objects behind delete markers (their bytes are kept for the undo "
        "window: `gcd restore` brings them back); freed 2 versions and markers (2.0 KiB)"
    )
    assert "of them 64 only hidden (a delete marker written, no byte freed)" in hidden


def test_interrupted_document_keeps_the_summary_behind_version_error_signal() -> None:
    """--json after a signal: version, error, signal first, then every summary field."""
    summary = RoundSummary(safe_epoch=4, deleted=2)
    document = interrupted_document(summary, "SIGTERM")
    assert list(document)[:3] == ["version", "error", "signal"]
    assert document["error"] == "interrupted"
    assert {k: v for k, v in document.items() if k not in {"error", "signal"}} == (
        summary.to_dict()
    )


def test_a_mistyped_flag_gets_one_line_with_the_closest_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gcd sweep --dry-rn`: exit 2, the did-you-mean line and the short usage line only."""
    assert main(["sweep", "--dry-rn"]) == exitcodes.USAGE
    assert capsys.readouterr().err.splitlines() == [
        "gcd sweep: unknown option --dry-rn; did you mean --dry-run?",
        "usage: gcd sweep [options]; `gcd sweep --help` lists them",
    ]
    assert main(["swep"]) == exitcodes.USAGE
    assert "unknown command 'swep'; did you mean sweep?" in capsys.readouterr().err


def test_help_lists_every_exit_code_including_130(capsys: pytest.CaptureFixture[str]) -> None:
    """`gcd --help` names 0, 1, 2, 3 and 130 (interrupted), and the daemon's SIGTERM 0."""
    assert main(["--help"]) == exitcodes.OK
    text = " ".join(capsys.readouterr().out.split())
    for words in ("0 ok", "1 partial failure", "2 usage error", "3 blocked", "130 interrupted"):
        assert words in text
    assert "exits 0 on SIGTERM" in text


def test_help_shows_examples_and_both_commands_print_their_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27: `--help` of the main commands ends with examples; `gcd --version` and
    `watermark --version` exit 0 with the same version."""
    for command in ("sweep", "daemon", "status", "pause", "journal", "dev", "completion"):
        assert main([command, "--help"]) == exitcodes.OK
        out = capsys.readouterr().out
        assert "\nexamples:\n" in out
        assert f"  gcd {command} " in out or command in ("dev", "completion")
    assert main(["--version"]) == exitcodes.OK
    version = capsys.readouterr().out.split()[-1]
    assert watermark_main(["--version"]) == exitcodes.OK
    assert capsys.readouterr().out == f"watermark {version}\n"


def test_completion_script_completes_commands_actions_and_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gcd completion bash` and `watermark completion bash` are scripts bash sources
    together; they complete each command's commands, actions and flags (generated from
    the real parsers)."""
    assert main(["completion", "bash"]) == exitcodes.OK
    assert watermark_main(["completion", "bash"]) == exitcodes.OK
    script = capsys.readouterr().out
    probe = (
        script
        + """
for line in "gcd sw" "gcd sweep --dry-r" "watermark partition re" "watermark epoch advance --exp" \
            "gcd namespace b" "gcd completion z" "watermark --ver" "watermark comp"; do
    COMP_WORDS=($line); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _l0gc_${COMP_WORDS[0]}_complete
    echo "${COMPREPLY[*]}"
done
for words in "gcd sweep --storage g" "gcd status --log-level w" "watermark serve --log-level ''"; do
    eval "COMP_WORDS=($words)"; COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    _l0gc_${COMP_WORDS[0]}_complete
    echo "${COMPREPLY[*]}"
done
complete -p gcd watermark
"""
    )
    done = subprocess.run(["bash", "-c", probe], check=True, capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "sweep",
        "--dry-run",
        "register repair",
        "--expected",
        "bind",
        "zsh",
        "--version",
        "completion",
        "gcs",
        "warning",
        "debug info warning error",
        "complete -o default -F _l0gc_gcd_complete gcd",
        "complete -o default -F _l0gc_watermark_complete watermark",
    ]


def test_fish_completion_completes_commands_flags_and_flag_values(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """`gcd completion fish` is a script fish sources: commands and actions by path,
    flags, and the values of flags that take one of a list (storage kinds, log levels).
    fish comes with the test set-up (scripts/install-prometheus.sh)."""
    fish = shutil.which("fish")
    assert fish, "fish not on PATH: scripts/install-prometheus.sh installs it for the tests"
    assert main(["completion", "fish"]) == exitcodes.OK
    assert watermark_main(["completion", "fish"]) == exitcodes.OK
    script = tmp_path / "l0gc.fish"
    script.write_text(capsys.readouterr().out)
    lines = [
        "gcd sw",
        "gcd sweep --dry-r",
        "gcd sweep --storage ",
        "gcd status --log-level w",
        "watermark partition re",
        "gcd namespace b",
        "gcd completion f",
    ]
    probe = f"source {script}\n" + "".join(
        f"complete -C {shlex.quote(line)} | string replace -r '\\t.*' '' | string join ' '\n"
        for line in lines
    )
    done = subprocess.run(
        [fish, "--no-config", "-c", probe], capture_output=True, text=True, check=False, timeout=60
    )
    assert not done.stderr, done.stderr
    assert done.stdout.splitlines() == [
        "sweep",
        "--dry-run",
        "azure gcs s3",
        "warning",
        "register repair",
        "bind",
        "fish",
    ]


def test_json_usage_errors_print_a_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27: with --json even a usage error prints one JSON document on stdout."""
    assert main(["status", "--json", "--bogus"]) == exitcodes.USAGE
    document = json.loads(capsys.readouterr().out)
    assert (document["error"], document["exit_code"]) == ("usage", exitcodes.USAGE)


@pytest.mark.integration
def test_dev_etcd_serves_the_guides_and_stops_with_its_etcd(tmp_path: Path) -> None:
    """Issue 27: `gcd dev etcd` starts the pinned etcd on loopback, says what to export,
    answers the admin commands, and on SIGTERM stops its etcd (by PID) and exits 0."""
    port = free_port()
    out = tmp_path / "dev.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gcd", "dev", "etcd", "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        wait_until_sync(
            lambda: "export L0GC_ETCD=" in out.read_text(),
            timeout_s=30,
            what="gcd dev etcd ready",
            detail=out.read_text,
        )
        text = out.read_text()
        assert f"  export L0GC_ETCD=127.0.0.1:{port} L0GC_NAMESPACE=/l0gc/prod\n" in text
        etcd_pid = int(text.split("(pid ", 1)[1].split(",", 1)[0])
        etcd = ["--etcd", f"127.0.0.1:{port}", "--namespace", "/l0gc/dev"]
        assert watermark_main(["epoch", "advance", *etcd]) == exitcodes.OK
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == exitcodes.OK
        assert out.read_text().endswith("etcd stopped\n")
        with pytest.raises(ProcessLookupError):
            os.kill(etcd_pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
