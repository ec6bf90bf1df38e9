"""What every benchmark shares: scales, the report record, statistics, servers, keys.

A benchmark module exposes `NAME`, `TITLE` and `run(scale, runs) -> Report`. A report
is a few tables (each row one side of a comparison, with its median over the runs and
the ratio to the baselines), the goals with their measured values, and notes saying
how the figures were obtained and what bounds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from l0lab.testing.local_servers import LocalS3

__all__ = [
    "PYTHON",
    "REPO",
    "ROOT",
    "Goal",
    "Report",
    "Scale",
    "Table",
    "child_env",
    "fmt",
    "garbage_keys",
    "machine",
    "median",
    "quiet_s3",
    "run_child",
]

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
ROOT = "level_zero/data"
OLD = datetime.now(UTC) - timedelta(hours=2)
"""LastModified of every seeded object: well past the default 10 min grace period."""


class Scale(enum.Enum):
    """How big a benchmark runs: TOY for the smoke test, QUICK for --quick, FULL."""

    TOY = "toy"
    QUICK = "quick"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class Goal:
    """A target from the issue and whether the measured value meets it."""

    description: str
    measured: str
    target: str
    met: bool


@dataclass(frozen=True, slots=True)
class Table:
    """One comparison: named columns, one row per side."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def to_markdown(self) -> str:
        """The table in GitHub Markdown."""
        lines = [
            f"**{self.title}**",
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "---|" * len(self.columns),
        ]
        lines += ["| " + " | ".join(fmt(cell) for cell in row) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass(slots=True)
class Report:
    """What one benchmark measured."""

    name: str
    title: str
    scale: Scale
    runs: int
    tables: list[Table] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    """Every individual run, for the JSON output."""

    def to_markdown(self) -> str:
        """The whole report in Markdown."""
        parts = [
            f"### {self.title}",
            "",
            f"scale `{self.scale.value}`, runs per side: {self.runs}",
            "",
        ]
        for table in self.tables:
            parts += [table.to_markdown(), ""]
        if self.goals:
            parts += ["| goal | measured | target | met |", "|---|---|---|---|"]
            parts += [
                f"| {g.description} | {g.measured} | {g.target} | {'met' if g.met else 'MISSED'} |"
                for g in self.goals
            ]
            parts.append("")
        parts += [f"- {note}" for note in self.notes]
        return "\n".join(parts).rstrip() + "\n"

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "name": self.name,
            "title": self.title,
            "scale": self.scale.value,
            "runs": self.runs,
            "tables": [
                {"title": t.title, "columns": list(t.columns), "rows": [list(r) for r in t.rows]}
                for t in self.tables
            ],
            "goals": [
                {
                    "description": g.description,
                    "measured": g.measured,
                    "target": g.target,
                    "met": g.met,
                }
                for g in self.goals
            ],
            "notes": self.notes,
            "raw": self.raw,
        }


def median(values: Sequence[float]) -> float:
    """The median (NaN for no values)."""
    return statistics.median(values) if values else math.nan


def fmt(value: Any) -> str:
    """A table cell: floats with 3 significant digits (thousands grouped), others as str."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    versions: dict[str, str] = {}
    for package in ("moto", "aiobotocore", "boto3", "aetcd"):
        with contextlib.suppress(Exception):
            versions[package] = version(package)
    load = os.getloadavg()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_avg_1m": f"{load[0]:.2f}",
        **versions,
    }


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a client subprocess: test credentials, no real AWS or etcd config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "L0GC_"))}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


@dataclass(frozen=True, slots=True)
class ChildRun:
    """One client subprocess: wall time, its CPU time, and what it printed."""

    wall_s: float
    cpu_s: float
    maxrss_kib: int
    returncode: int
    stdout: str
    stderr: str


def run_child(
    argv: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 1800.0
) -> ChildRun:
    """Run `argv` to completion; wall time from spawn to exit, CPU from wait4's rusage."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env if env is not None else child_env(),
        cwd=REPO,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    wall = time.perf_counter() - started
    # The child has been reaped by communicate(); its rusage went into RUSAGE_CHILDREN.
    # Popen does not expose wait4's rusage, so read the per-child figures from the delta.
    return ChildRun(
        wall,
        math.nan,
        0,
        proc.returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
    )


@contextlib.contextmanager
def children_cpu() -> Iterator[Callable[[], tuple[float, int]]]:
    """CPU seconds used by children reaped inside the block (and their max RSS, KiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    state: dict[str, tuple[float, int]] = {}

    def read() -> tuple[float, int]:
        return state.get("v", (math.nan, 0))

    yield read
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    state["v"] = (cpu, int(after.ru_maxrss))


def timed_child(
    argv: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 1800.0
) -> ChildRun:
    """`run_child` with the child's own CPU time filled in."""
    with children_cpu() as read:
        result = run_child(argv, env=env, timeout_s=timeout_s)
    cpu, rss = read()
    return ChildRun(result.wall_s, cpu, rss, result.returncode, result.stdout, result.stderr)


_BACKEND_LOCK = threading.RLock()


def _serialise_moto_listing() -> None:
    """Make moto's LIST and DELETE mutually exclusive (once per process).

    moto's threaded server iterates a bucket's key dict for every LIST while DELETE
    requests on other threads remove keys from it, so a LIST racing a delete fails with
    KeyError (HTTP 500, then a client retry with backoff). S3 does not fail like that;
    one lock around these backend calls keeps the benchmark about the clients.
    """
    from moto.s3.models import S3Backend  # noqa: PLC0415 - moto is a dev-only dependency

    if getattr(S3Backend, "_l0gc_bench_locked", False):
        return
    for name in ("list_objects", "list_objects_v2", "delete_object", "delete_objects"):
        original = getattr(S3Backend, name)

        def locked(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with _BACKEND_LOCK:
                return __original(self, *args, **kwargs)

        setattr(S3Backend, name, locked)
    S3Backend._l0gc_bench_locked = True  # type: ignore[attr-defined]


def quiet_s3() -> Any:
    """A started `LocalS3` (moto) with its access log silenced and LIST/DELETE serialised."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _serialise_moto_listing()
    return LocalS3().start()


def garbage_keys(count: int, *, prefixes: int = 1000, name_width: int = 8) -> list[str]:
    """`count` keys of the default layout spread round-robin over `prefixes` prefixes.

    Epochs run from 1 upwards (about `count / prefixes` per prefix), so every key is at
    or below the safe epoch `count` and is garbage for a sweep with M >= count.
    """
    keys = []
    for index in range(count):
        prefix = index % prefixes
        epoch = index // prefixes + 1
        keys.append(f"{ROOT}/{prefix:03d}/{epoch:018d}/obj-{index:0{name_width}d}")
    return keys


def process_cpu_s() -> float:
    """CPU seconds of this whole process (all threads: moto's server threads included)."""
    return time.process_time()


async def put_objects(endpoint_url: str, bucket: str, keys: list[str]) -> None:
    """PUT every key (1 byte) with obstore, 64 at once: ~1,200 objects/s on SeaweedFS
    here, six times boto3's threads (the store's CPU is the bound)."""
    import obstore  # noqa: PLC0415 - the bench extra
    from obstore.store import S3Store  # noqa: PLC0415

    env = child_env()  # the test servers' credentials
    store = S3Store(
        bucket,
        endpoint=endpoint_url,
        region="us-east-1",
        access_key_id=env["AWS_ACCESS_KEY_ID"],
        secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        client_options={"allow_http": True},
    )
    gate = asyncio.Semaphore(64)

    async def put(key: str) -> None:
        async with gate:
            await obstore.put_async(store, key, b"x")

    for start in range(0, len(keys), 10_000):
        await asyncio.gather(*(put(key) for key in keys[start : start + 10_000]))


def pid_cpu_s(pid: int) -> float:
    """User + system CPU seconds process `pid` has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_kib(field: str, pid: int | str = "self") -> int | None:
    """A /proc/PID/status figure in KiB (VmRSS now, VmHWM peak); None where there is none.
    Not ru_maxrss: Linux carries a parent's peak across fork and exec into the child's."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def metric(url: str, pattern: str) -> float:
    """The sum of the samples of a Prometheus endpoint `url` whose line matches `pattern`."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if not line.startswith("#") and re.match(pattern, line)
    )
