"""Docs that run: every console session of README.md and docs/*.md, against real servers.

Each session (a ```console block, or a block whose commands start with `$ `) runs in one
bash, command by command, in a fresh directory, against a real etcd (LocalEtcd) and a
real S3-compatible server (moto's LocalS3) started for the test run, and each command's
output (stdout and stderr as a terminal shows them, minus log records) must match what
the doc shows. How a doc writes a session, marks one as illustrative only, names the
state it starts from, and which values may differ from the shown ones (tokens, times,
durations, ports, revisions, `~N`, `...`) is in docs/conventions.md and the docstring of
tests/docsessions.py, which extracts the sessions and matches the outputs.

What the harness provides, so that the documented commands run as written:
- environment: `L0GC_ETCD` (the local etcd), `L0GC_NAMESPACE` (a fresh namespace),
  `L0GC_HTTP_PORT` (a free port for `watermark serve`), AWS test credentials and
  `AWS_ENDPOINT_URL_S3` (the local S3 server, so that l0gc itself sees AWS: no
  `--endpoint-url`), `PATH` with this interpreter's `gcd` and `watermark`, `TZ=UTC`;
- a fresh bucket per session, created empty;
- the substitution table `doc_names`: the production names the docs use, replaced in
  commands by the local ones (and the local ones by the doc's in outputs). Nothing
  else of a command is rewritten, except tokens an earlier output showed (replaced by
  the real value in that output's place).
- `<!-- session setup: NAME -->`: the state `SETUPS[NAME]` writes before the session.

Log records (the JSON lines structlog writes on stderr when it is not a terminal) are
left out of the comparison: a terminal shows them in another format, and docs do not
show them. A read-only command (`READ_ONLY`) whose output does not match yet is run
again until it does or `SETTLE_S` passed: docs show states a server reaches on its own
("one publish interval later", "ready").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from l0gc.contract.kv import Put
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd, LocalS3, free_port
from tests.docsessions import (
    DocFormatError,
    Mismatch,
    Session,
    Step,
    extract_sessions,
    match_output,
    numbered,
    sessions_of,
    substitute,
)
from tests.waiting import wait_until_sync

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
VENV_BIN = Path(sys.executable).parent  # where `gcd` and `watermark` are installed
COMMAND_TIMEOUT_S = 60.0  # a bound on a hang, not on speed: a loaded machine is slow
# How long a read-only command may take to show the documented state: a server started in
# the step before may need many seconds on a loaded machine, and each try is a new process.
SETTLE_S = 60.0
READ_ONLY = re.compile(
    r"^(?:gcd status|watermark (?:partition (?:show|list)|epoch get|namespace show))\b"
    r"[^;&>]*$"
    r"|^curl\b(?!.*\s(?:-X\s*(?!GET\b)|-d\b|--data))[^;&>]*$"
)
"""Commands without side effects, which may be re-run until they show the documented state."""
_counter = itertools.count()
JOURNAL_DIR = "/var/lib/l0gc/journal"
"""The sweepers' deletion journal as the docs name it; a directory of the session here."""


@dataclass(frozen=True, slots=True)
class Local:
    """The servers and names of one session."""

    etcd: str
    s3_url: str
    namespace: str
    bucket: str
    publisher_port: int
    journal_dir: str = "journal"


def doc_names(local: Local) -> dict[str, str]:
    """The substitution table: a name the docs use -> the local one (commands only)."""
    return {
        "etcd-0:2379": local.etcd,
        "/l0gc/prod": local.namespace,
        "my-l0-bucket": local.bucket,
        "127.0.0.1:8080": f"127.0.0.1:{local.publisher_port}",
        JOURNAL_DIR: local.journal_dir,
    }


def shown_names(local: Local) -> dict[str, str]:
    """The reverse for outputs: a local name -> the doc's (ports are variable anyway)."""
    return {
        local.namespace: "/l0gc/prod",
        local.bucket: "my-l0-bucket",
        local.journal_dir: JOURNAL_DIR,
    }


# -- the shell ------------------------------------------------------------------------------


class Shell:
    """One bash for a whole session: variables, the directory and files carry over."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self._marker = f"__l0gc_docs_{uuid.uuid4().hex}__"
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def run(self, command: str, timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[str, int]:
        """(merged stdout and stderr, exit status) of one command; stdin is /dev/null."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        # The status is printed with the end marker, then restored, so `echo $?` works.
        script = (
            f"{{ {command}\n}} </dev/null 2>&1\n__l0gc_status=$?\n"
            f"printf '\\n{self._marker} %s\\n' \"$__l0gc_status\"\n"
            "__l0gc_restore() { return $1; }; __l0gc_restore $__l0gc_status\n"
        )
        self.process.stdin.write(script.encode())
        self.process.stdin.flush()
        buffer = b""
        end = re.compile(rb"\n" + self._marker.encode() + rb" (\d+)\n")
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while (found := end.search(buffer)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise AssertionError(
                    f"command did not finish in {timeout_s} s: {command}\n"
                    f"output so far:\n{buffer.decode(errors='replace')}"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"the shell exited during: {command}\n{buffer.decode()}")
                buffer += chunk
        return buffer[: found.start()].decode(errors="replace"), int(found.group(1))

    def close(self) -> None:
        """End the shell: EOF on its input; if a command still runs, it and bash by PID."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            for child in _children(self.process.pid):
                _stop(child)
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _children(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class Background:
    """A server a session started `# in another terminal:`; its log is kept for failures."""

    command: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """SIGTERM by PID, as a reader's Ctrl-C/kill would; SIGKILL if it does not stop."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def tail(self) -> str:
        """The end of its log."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.command} (exit {self.process.poll()}):\n{text[-3000:]}"


# -- running a session ----------------------------------------------------------------------


@dataclass
class Harness:
    """Runs one session's steps in its shell and compares each output."""

    session: Session
    local: Local
    s3: LocalS3
    cwd: Path
    env: dict[str, str]
    shell: Shell
    tokens: dict[str, str] = field(default_factory=dict)
    background: list[Background] = field(default_factory=list)
    settle_s: float = SETTLE_S

    def prepare(self, command: str) -> str:
        """A documented command as it runs here: doc names and shown tokens replaced."""
        return substitute(command, {**doc_names(self.local), **self.tokens})

    def quiet(self, command: str) -> str:
        """Run a setup command; it must succeed."""
        output, status = self.shell.run(command)
        assert status == 0, f"setup command failed ({status}): {command}\n{output}"
        return output

    def etcd_put(self, values: dict[str, str]) -> None:
        """Write raw values under the session's namespace (keys relative to it)."""

        async def put() -> None:
            settings = EtcdSettings(endpoints=(self.local.etcd,), namespace=self.local.namespace)
            kv = await open_kv(settings)
            try:
                ops = [Put(self.local.namespace + key, v.encode()) for key, v in values.items()]
                result = await kv.txn([], ops)
                assert result.succeeded
            finally:
                await kv.close()

        asyncio.run(put())

    def real_lines(self, output: str) -> list[str]:
        """Output as compared: log records dropped, local names shown as the doc's."""
        text = substitute(output, shown_names(self.local))
        return [line for line in text.splitlines() if not _is_log_record(line)]

    def step(self, step: Step) -> None:
        """Run one step; fail with a readable report when the output does not match."""
        command = self.prepare(step.command)
        if step.background:
            self.start_background(command)
            return
        attempt = self.attempt(step, command)
        if not isinstance(attempt[0], dict) and READ_ONLY.match(command) and self.settle_s > 0:
            last = [attempt]

            def settled() -> bool:
                last[0] = self.attempt(step, command)
                return isinstance(last[0][0], dict)

            with contextlib.suppress(AssertionError):  # reported below, with the output
                wait_until_sync(settled, timeout_s=self.settle_s, what=f"the output of {command}")
            attempt = last[0]
        result, real, status = attempt
        if isinstance(result, Mismatch):
            raise AssertionError(self.report(step, command, real, status, result))
        self.tokens.update(result)

    def attempt(self, step: Step, command: str) -> tuple[dict[str, str] | Mismatch, list[str], int]:
        """Run the command once: (token bindings or mismatch, real lines, exit status)."""
        output, status = self.shell.run(command)
        real = self.real_lines(output)
        return match_output(step.expected, real, self.tokens), real, status

    def report(self, step: Step, command: str, real: list[str], status: int, why: Mismatch) -> str:
        """The failure message: where, the command, shown vs real output, and why."""
        shown_at = self.session.doc
        lines = [
            f"{shown_at}:{step.line}: the output of this command no longer matches the doc",
            f"$ {step.command}",
            f"  (ran as: {command}; exit status {status})",
            "shown in the doc:",
            *numbered(step.expected),
            "real output:",
            *numbered(real),
            f"first difference at shown line {why.expected_line}: {why.reason}",
        ]
        lines.extend(background.tail() for background in self.background)
        return "\n".join(lines)

    def start_background(self, command: str) -> None:
        """Start a server `# in another terminal:` and keep its PID to stop it."""
        log = self.cwd.parent / f"background-{len(self.background)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-c", f"exec {command}"],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(Background(command, process, log))

    def close(self) -> None:
        """Stop every background server, then the shell."""
        for background in reversed(self.background):
            background.stop()
        self.shell.close()


def _is_log_record(line: str) -> bool:
    if not (line.startswith("{") and '"event"' in line and '"level"' in line):
        return False
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and {"event", "level", "timestamp"} <= set(record)


def session_env(local: Local, home: Path) -> dict[str, str]:
    """A clean environment: nothing of the developer's L0GC_*/AWS_* settings leaks in.
    PYTHONPATH is kept: the commands then import the tree under test (a worktree), not
    whatever the venv's editable install points at."""
    kept = {name: os.environ[name] for name in ("PYTHONPATH",) if os.environ.get(name)}
    return kept | {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",  # stdout and stderr interleave as on a terminal
        "L0GC_ETCD": local.etcd,
        "L0GC_NAMESPACE": local.namespace,
        "L0GC_HTTP_PORT": str(local.publisher_port),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": local.s3_url,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


# -- setups: the states sessions start from ------------------------------------------------


def _record(
    partition: str,
    watermark: int | None,
    window: list[int],
    owner: str,
    owner_epoch: int,
    age_s: float,
) -> str:
    record: dict[str, object] = {
        "version": 1,
        "partition": partition,
        "created_epoch": 1,
        "window": window,
        "owner": owner,
        "owner_epoch": owner_epoch,
        "tracker": None,
        "updated_at": time.time() - age_s,
    }
    if watermark is not None:
        record["watermark"] = watermark
    return json.dumps(record)


def setup_pinned(harness: Harness) -> None:
    """Cluster epoch 1042; orders/0, orders/1 up to date, orders/2 pinning M at 1021 for 2h;
    the namespace bound to its bucket (`watermark namespace bind`)."""
    harness.etcd_put(
        {
            "/epoch": "1042",
            "/partitions/orders/0": _record("orders/0", 1039, [1040, 1041], "broker-1", 3, 1.2),
            "/partitions/orders/1": _record("orders/1", 1040, [1041, 1042], "broker-2", 5, 1.2),
            "/partitions/orders/2": _record("orders/2", 1021, [1022, 1023], "broker-2", 5, 7200),
        }
    )
    harness.quiet(harness.prepare("watermark namespace bind --bucket my-l0-bucket"))


def setup_malformed(harness: Harness) -> None:
    """`pinned`, plus orders/7, a record without a watermark (written by hand)."""
    setup_pinned(harness)
    harness.etcd_put(
        {"/partitions/orders/7": _record("orders/7", None, [1030, 1031], "broker-3", 2, 60)}
    )


def setup_unbound_garbage(harness: Harness) -> None:
    """Cluster epoch 5, orders/0 at M(p) 3, not bound; in the bucket two objects of each
    epoch 1-5 (prefixes 000 and 001), an hour old (past the default grace of 10m)."""
    harness.etcd_put(
        {
            "/epoch": "5",
            "/partitions/orders/0": _record("orders/0", 3, [4, 5], "broker-1", 1, 1.0),
        }
    )
    keys = [f"level_zero/data/{p:03d}/{e:018d}/{uuid.uuid4()}" for e in range(1, 6) for p in (0, 1)]
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    harness.s3.seed(harness.local.bucket, keys, last_modified=an_hour_ago)


def setup_pinned_objects(harness: Harness) -> None:
    """`pinned`, plus in the bucket, an hour old: level_zero/data/007/...1015/seg-b (below
    M), level_zero/data/007/...1030/seg-a (above), and other/notes.txt (outside the root)."""
    setup_pinned(harness)
    keys = [
        "level_zero/data/007/000000000000001015/seg-b",
        "level_zero/data/007/000000000000001030/seg-a",
        "other/notes.txt",
    ]
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    harness.s3.seed(harness.local.bucket, keys, last_modified=an_hour_ago)


def setup_wrong_m(harness: Harness) -> None:
    """A versioned bucket and a wrong M(p) already acted on: cluster epoch 1042, orders/0
    and orders/1 at 1041, orders/2 published 1040 (its objects of epochs 1025 and 1031
    are live: its true M(p) is 1024), bound; an hour-old object of each of epochs 1025,
    1031 (live, hidden by the sweep below) and 1041 (above M); then one round of `gcd
    sweep --undo-window 1h --journal-dir /var/lib/l0gc/journal` hid the two live ones."""
    bucket = harness.local.bucket
    harness.s3.set_versioning(bucket, enabled=True)
    harness.etcd_put(
        {
            "/epoch": "1042",
            "/partitions/orders/0": _record("orders/0", 1041, [1042, 1042], "broker-1", 3, 1.2),
            "/partitions/orders/1": _record("orders/1", 1041, [1042, 1042], "broker-2", 5, 1.2),
            "/partitions/orders/2": _record("orders/2", 1040, [1041, 1042], "broker-2", 5, 1.2),
        }
    )
    harness.quiet(harness.prepare("watermark namespace bind --bucket my-l0-bucket"))
    objects = {
        f"level_zero/data/{p:03d}/{e:018d}/part-{i}.parquet": f"rows of {e}".encode()
        for i, (p, e) in enumerate([(7, 1025), (112, 1031), (300, 1041)])
    }
    harness.s3.seed(bucket, objects, last_modified=datetime.now(UTC) - timedelta(hours=1))
    harness.quiet(
        harness.prepare(
            f"gcd sweep --bucket my-l0-bucket --undo-window 1h --journal-dir {JOURNAL_DIR}"
        )
    )


SETUPS: dict[str, Callable[[Harness], None]] = {
    "pinned": setup_pinned,
    "pinned-objects": setup_pinned_objects,
    "malformed": setup_malformed,
    "unbound-garbage": setup_unbound_garbage,
    "wrong-m": setup_wrong_m,
}

SESSIONS = sessions_of(DOCS, ROOT)
RUNNABLE = [session for session in SESSIONS if session.not_run is None]


@pytest.fixture
def harness(
    request: pytest.FixtureRequest, etcd_server: LocalEtcd, s3_server: LocalS3, tmp_path: Path
) -> Iterator[Harness]:
    """A fresh namespace, bucket, directory and shell for one session; all stopped after."""
    session: Session = request.param
    index = next(_counter)
    cwd, home = tmp_path / "session", tmp_path / "home"  # logs stay out of the session's dir
    local = Local(
        etcd=etcd_server.endpoint,
        s3_url=s3_server.endpoint_url,
        namespace=f"/l0gc-docs/{index}-{uuid.uuid4().hex[:8]}",
        bucket=f"l0gc-docs-{index}-{uuid.uuid4().hex[:8]}",
        publisher_port=free_port(),
        journal_dir=str(cwd / "journal"),
    )
    s3_server.create_bucket(local.bucket)
    cwd.mkdir()
    home.mkdir()
    env = session_env(local, home)
    running = Harness(session, local, s3_server, cwd, env, Shell(cwd, env))
    try:
        if session.setup is not None:
            SETUPS[session.setup](running)
        yield running
    finally:
        running.close()
        s3_server.delete_bucket_contents(local.bucket)


@pytest.mark.integration
@pytest.mark.parametrize("harness", RUNNABLE, ids=[s.name for s in RUNNABLE], indirect=True)
def test_console_session_runs_as_documented(harness: Harness) -> None:
    """Every command of the session gives the output the doc shows (modulo tokens, times)."""
    for step in harness.session.steps:
        harness.step(step)


# -- the sessions themselves are well formed -----------------------------------------------


def test_the_docs_have_runnable_sessions() -> None:
    """The harness finds the known sessions (an extraction bug would silently run nothing)."""
    names = {session.doc for session in RUNNABLE}
    assert {"docs/integration.md", "docs/operations.md"} <= names
    assert sum(len(session.steps) for session in RUNNABLE) >= 25
    assert any(s.setup == "pinned" and s.steps[0].command == "gcd status" for s in RUNNABLE), (
        "test_a_drifted_doc_fails needs the `gcd status` session of docs/operations.md"
    )


def test_every_prompt_in_the_docs_is_in_a_session() -> None:
    """A `$ ` line outside any session (say in a ```text block) would silently not run."""
    prompts = set()
    for path in DOCS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("$ "):
                prompts.add(f"{path.relative_to(ROOT)}:{number}")
    covered = {
        f"{session.doc}:{step.line}"
        for session in SESSIONS
        for step in session.steps
        if not step.background
    }
    assert prompts - covered == set(), "write these in a ```console block (docs/conventions.md)"


def test_every_setup_named_by_a_doc_exists() -> None:
    """A `<!-- session setup: NAME -->` names a state the harness knows how to write."""
    for session in SESSIONS:
        assert session.setup is None or session.setup in SETUPS, (
            f"{session.name}: unknown session setup {session.setup!r}; known: {sorted(SETUPS)}"
        )


def test_sessions_not_run_are_few_and_give_reasons() -> None:
    """Illustrative-only sessions are the exception, each with its reason."""
    skipped = [session for session in SESSIONS if session.not_run is not None]
    assert len(skipped) <= len(SESSIONS) // 4
    assert all(len(session.not_run or "") >= 10 for session in skipped)


@pytest.mark.integration
@pytest.mark.parametrize(
    "harness",
    [s for s in RUNNABLE if s.setup == "pinned" and s.steps[0].command == "gcd status"][:1],
    ids=["operations.md gcd status"],
    indirect=True,
)
def test_a_drifted_doc_fails(harness: Harness) -> None:
    """The same session with one shown number changed (1042 -> 1043) fails, naming the line."""
    step = harness.session.steps[0]
    drifted = tuple(line.replace("1042", "1043") for line in step.expected)
    assert drifted != step.expected
    harness.settle_s = 0  # the state is written before the session: nothing to wait for
    with pytest.raises(AssertionError, match=r"first difference at shown line 1: real line is"):
        harness.step(Step(step.line, step.command, drifted))


# -- the extraction and matching rules (tests/docsessions.py) ------------------------------

_EXAMPLE = """\
Text.

<!-- session setup: pinned -->
```console
# narration at the top
$ gcd status \\
    --all
line one

line three
# not narration: output right after output

# narration after a blank line
# in another terminal: watermark serve --partitions p
$ true
```

```sh
gcd sweep --bucket b   # a listing, not a session
```

<!-- not run: needs a Kubernetes cluster -->
```console
$ kubectl get pods
NAME  READY
```
"""


def test_extraction_reads_commands_outputs_narration_and_markers() -> None:
    """Commands (with continuations), outputs, narration, background steps and markers."""
    first, second = extract_sessions(_EXAMPLE, "x.md")
    assert (first.name, first.setup, first.not_run) == ("x.md:4", "pinned", None)
    status, serve, true = first.steps
    assert status == Step(
        6,
        "gcd status \\\n    --all",
        (
            "line one",
            "",
            "line three",
            "# not narration: output right after output",
        ),
    )
    assert serve == Step(14, "watermark serve --partitions p", background=True)
    assert true == Step(15, "true")
    assert second.not_run == "needs a Kubernetes cluster"
    assert second.steps == (Step(24, "kubectl get pods", ("NAME  READY",)),)


@pytest.mark.parametrize(
    ("marker", "error"),
    [
        ("<!-- not run -->", "a reason is required"),
        ("<!-- session: pinned -->", "neither"),
        ("<!-- not-run: needs a Kubernetes cluster -->", "neither"),
        ("<!-- setup: pinned -->", "neither"),
    ],
)
def test_a_marker_against_the_conventions_is_refused(marker: str, error: str) -> None:
    """A marker without a reason, or misspelt, is an error rather than silently ignored."""
    with pytest.raises(DocFormatError, match=error):
        extract_sessions(f"{marker}\n```console\n$ true\n```\n", "x.md")


def test_output_before_any_command_is_refused() -> None:
    """A console block that shows output before its first command is an error."""
    with pytest.raises(DocFormatError, match=r"x.md:1: line 2 is output before any"):
        extract_sessions("```console\noutput\n$ true\n```\n", "x.md")


def test_a_changed_value_does_not_match() -> None:
    """Anything not variable must be equal: a number, a word, a missing or an extra line."""
    shown = ["cluster epoch  1042", "gc             running"]
    assert match_output(shown, shown) == {}
    changed = match_output(shown, ["cluster epoch  1043", "gc             running"])
    assert changed == Mismatch(0, "real line is 'cluster epoch  1043'")
    assert isinstance(match_output(shown, [shown[0], "gc             paused"]), Mismatch)
    assert isinstance(match_output(shown, shown[:1]), Mismatch)
    assert isinstance(match_output(shown, [*shown, "binding        not bound"]), Mismatch)


@pytest.mark.parametrize(
    ("shown", "real"),
    [
        ("namespace /l0gc/prod  (etcd revision 884213)", "namespace /l0gc/prod  (etcd revision 3)"),
        ("updated 2h ago", "updated 0.3s ago"),
        (
            "PAUSED since 2026-11-22T02:44:38Z (25m ago)",
            "PAUSED since 2026-11-23T20:26:53Z (0s ago)",
        ),
        ('"updated_at": 1795464615.7171478}', '"updated_at": 1795465656.424306}'),
        ('"expires_in_s": 29.999957546999894,', '"expires_in_s": 30,'),
        ("http://127.0.0.1:8080/metrics", "http://127.0.0.1:41234/metrics"),
        ("binding    99a105ae7add85fc (etcd", "binding    0123456789012345 (etcd"),
        ("id 0b8e6d1c-5f0e-4c1b-9d7e-2a3b4c5d6e7f", "id 11111111-2222-4333-8444-555555555555"),
        ("deleted 10 objects (~38.3 deletes/s)", "deleted 10 objects (1200 deletes/s)"),
        ('{... "window": [1, 3], ...}', '{"partition": "p", "window": [1, 3], "dirty": true}'),
    ],
)
def test_variable_values_match_any_value_of_their_kind(shown: str, real: str) -> None:
    """Revisions, ages, times, durations, ports, ids, `~N` and `...` match other values."""
    assert match_output([shown], [real]) == (
        {}
        if "~" in shown or "..." in shown
        else {
            **({shown.split()[1]: real.split()[1]} if shown.startswith("binding") else {}),
            **({shown.split()[1]: real.split()[1]} if shown.startswith("id ") else {}),
        }
    )


def test_the_variable_kinds_do_not_swallow_fixed_values() -> None:
    """Epochs, counts, key epochs and `~`-less rates stay exact."""
    for shown, real in [
        ("global M       1021  (lag 21 epochs)", "global M       1021  (lag 22 epochs)"),
        ("level_zero/data/417/000000000000012345/x", "level_zero/data/417/000000000000012346/x"),
        ("deleted 10 objects (38.3 deletes/s)", "deleted 10 objects (12.0 deletes/s)"),
        ('"deadline": 1795464646.128, "epoch": 3', '"deadline": 1795464646.128, "epoch": 4'),
    ]:
        assert isinstance(match_output([shown], [real]), Mismatch), shown


def test_elided_lines_match_any_number_of_lines() -> None:
    """A `...` line stands for zero or more lines, and what follows it must still match."""
    shown = ["HTTP/1.1 404 Not Found", "...", '{"error": "unknown_fence"}']
    real = ["HTTP/1.1 404 Not Found", "Content-Type: x", "", '{"error": "unknown_fence"}']
    assert match_output(shown, real) == {}
    assert match_output(shown, [real[0], real[3]]) == {}
    assert isinstance(match_output(shown, [*real[:3], '{"error": "fence_expired"}']), Mismatch)


def test_a_shown_token_binds_to_the_real_one_and_must_stay_the_same() -> None:
    """A token captured from one output is the same real value wherever it is shown again."""
    shown = ['{"token": "NqiQDUe_pq7DPh3Hn_-7mHAP", "epoch": 1}']
    bound = match_output(shown, ['{"token": "AAAAbbbbCCCC_ddd-1234567", "epoch": 1}'])
    assert bound == {"NqiQDUe_pq7DPh3Hn_-7mHAP": "AAAAbbbbCCCC_ddd-1234567"}
    again = ['{"token": "NqiQDUe_pq7DPh3Hn_-7mHAP"}']
    assert match_output(again, ['{"token": "AAAAbbbbCCCC_ddd-1234567"}'], bound) == {}
    other = match_output(again, ['{"token": "ZZZZbbbbCCCC_ddd-1234567"}'], bound)
    assert isinstance(other, Mismatch)


def test_commands_get_the_local_names_and_the_real_tokens() -> None:
    """Only the substitution table's names and shown tokens are replaced in a command."""
    local = Local("127.0.0.1:2400", "http://127.0.0.1:9", "/l0gc-docs/1", "l0gc-docs-1", 5555)
    table = {**doc_names(local), "NqiQDUe_pq7DPh3Hn_-7mHAP": "REAL"}
    command = (
        "gcd sweep --bucket my-l0-bucket --etcd etcd-0:2379 --namespace /l0gc/prod && "
        "curl http://127.0.0.1:8080/v1/fences/NqiQDUe_pq7DPh3Hn_-7mHAP/commit --etcd etcd-1:2379"
    )
    assert substitute(command, table) == (
        "gcd sweep --bucket l0gc-docs-1 --etcd 127.0.0.1:2400 --namespace /l0gc-docs/1 && "
        "curl http://127.0.0.1:5555/v1/fences/REAL/commit --etcd etcd-1:2379"
    )


@pytest.mark.parametrize(
    ("command", "read_only"),
    [
        ("gcd status", True),
        ("gcd status | grep -A1 '^gc '", True),
        ("watermark partition show orders/0 --json", True),
        ("curl -s http://127.0.0.1:8080/readyz", True),
        ("curl -s -X POST http://127.0.0.1:8080/v1/fences/x/commit", False),
        ("curl -s http://127.0.0.1:8080/v1/x -d '{}'", False),
        ("gcd pause --reason x", False),
        ("watermark epoch advance --json", False),
        ("gcd status > out.txt", False),
    ],
)
def test_only_commands_without_side_effects_are_re_run(command: str, read_only: bool) -> None:
    """Re-running until the documented state shows is limited to read-only commands."""
    assert bool(READ_ONLY.match(command)) is read_only


def test_log_records_are_told_apart_from_output() -> None:
    """structlog's JSON lines are dropped; JSON output of a command is kept."""
    log = '{"event": "gc.paused", "level": "warning", "timestamp": "2026-11-23T20:26:53Z"}'
    assert _is_log_record(log)
    assert not _is_log_record('{"epoch": 1, "previous": 0, "version": 1}')
    assert not _is_log_record('{"event": "x", "level": "y"')  # not JSON: shown as is


# -- README claims about the CLIs that no session shows ------------------------------------

_NUMBER_WORDS = {
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
}


def _flags_without_env() -> set[tuple[str, str]]:
    """(command, flag) of every flag docs/cli-reference.md (generated) lists without env."""
    found: set[tuple[str, str]] = set()
    command = ""
    for line in (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            command = line[4:].strip()
        elif (row := re.match(r"\| `(--[\w-]+)`[^|]*\| - \|", line)) is not None:
            found.add((command, row.group(1)))
    return found


def test_readme_counts_the_simulation_variants() -> None:
    """README says how many deliberately broken variants `gcd simulate --variant` has."""
    from l0lab.sim.variants import BROKEN  # noqa: PLC0415 - only this test needs the simulator

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(r"runs one of (\w+) deliberately broken builds", readme)
    assert said is not None, "README no longer says how many broken variants there are"
    assert _NUMBER_WORDS.get(said.group(1)) == len(BROKEN), (said.group(0), BROKEN)


def _named_with(command: str, flag: str, text: str) -> bool:
    """A watermark flag named anywhere, or a gcd flag named with its command (`--key` ...
    of `gcd restore`)."""
    if command.startswith("watermark"):
        return f"`{flag}`" in text
    return re.search(rf"`{flag}`[^;]*?`{re.escape(command)}`", text) is not None


def test_readme_names_every_flag_without_an_environment_variable() -> None:
    """README's exceptions to "every flag has an environment variable" are exactly those."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(
        r"Every flag has an environment variable \(.*?\), except (.*?) \(the ref", readme
    )
    assert said is not None, "README no longer says which flags have environment variables"
    named = set(re.findall(r"`([^`]+)`", said.group(1)))
    whole_commands = {name for name in named if not name.startswith("-")} - {"watermark"}
    flags = {name for name in named if name.startswith("--")}
    missing = _flags_without_env()
    unnamed = {
        (command, flag)
        for command, flag in missing
        if command not in whole_commands and not (_named_with(command, flag, said.group(1)))
    }
    assert unnamed == set(), "README: add these to the flags without an environment variable"
    stale = flags - {flag for command, flag in missing if command.startswith(("watermark", "gcd"))}
    assert stale == set(), "README names flags without an environment variable that have one"
    assert whole_commands <= {command for command, _ in missing}
