"""A Spark standalone cluster on loopback, and an executor Python without l0gc: for
tests and benchmarks only.

`LocalSparkCluster` runs a master and one worker from the pip pyspark package
(`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`, with
SPARK_HOME the package directory) as child processes on 127.0.0.1, every port free
and chosen here, each process in a session of its own, stopped by its PID. Executors
are launched by the worker as on a real cluster: a JVM of their own whose Python
workers run the interpreter the DRIVER names (PYSPARK_PYTHON /
`spark.pyspark.python`), with only pyspark's zip and the `--py-files` on their path.

`executor_python` makes that interpreter: a virtualenv with the pinned versions
(constraints.txt) of `gcd.spark.package.EXECUTOR_REQUIREMENTS` and nothing else,
so executors can run l0gc only from the `gcd spark-package` zip. It is built once per
constraints hash under a cache directory (atomically: concurrent builders do not
clash) and needs the package index pip is configured with.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gcd.spark.package import EXECUTOR_REQUIREMENTS
from l0gc.errors import ConfigError
from l0lab.testing.local_servers import free_port

__all__ = ["LocalSparkCluster", "executor_python", "spark_home"]

_START_TIMEOUT_S = 60.0
_VENV_FORMAT = "1"  # bump to rebuild every cached executor venv


def spark_home() -> Path:
    """The pip pyspark package directory, which is a complete SPARK_HOME."""
    try:
        import pyspark  # noqa: PLC0415
    except ImportError as exc:
        msg = "the local Spark cluster needs pyspark: pip install 'l0gc[spark]'"
        raise ConfigError(msg) from exc
    assert pyspark.__file__ is not None
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise ConfigError(f"{home} has no bin/spark-class: reinstall pyspark")
    return home


def _cluster_env(home: Path, workdir: Path) -> dict[str, str]:
    """The environment of the master and worker: no Python paths of this process."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "SPARK_")) and k not in {"PYTHONPATH", "VIRTUAL_ENV"}
    }
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    conf_dir = workdir / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)  # empty: no spark-defaults of this machine
    env.update(
        SPARK_HOME=str(home),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(workdir / "logs"),
        SPARK_WORKER_DIR=str(workdir / "work"),
    )
    return env


@dataclass(slots=True)
class LocalSparkCluster:
    """A standalone master and one worker of `cores` cores on 127.0.0.1."""

    workdir: Path
    cores: int = 4
    memory: str = "2g"
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    worker_ui_port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[TextIO] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        """spark://127.0.0.1:PORT, for --master."""
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = (self.workdir / f"{name}.log").open("w", encoding="utf-8")
        self._logs.append(log)
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        # spark-class ends in `exec java ...`: the PID is the JVM's.
        self.processes[name] = subprocess.Popen(  # noqa: S603
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.workdir,
        )

    def start(self) -> LocalSparkCluster:
        """Start the master, then the worker; return once the worker is registered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = _cluster_env(spark_home(), self.workdir)
        try:
            self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    str(self.master_ui_port),
                ],
                env,
            )
            self._wait(lambda: self.state() is not None, "the master to answer")
            self._spawn(
                "worker",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--webui-port",
                    str(self.worker_ui_port),
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.workdir / "work"),
                ],
                env,
            )
            self._wait(lambda: (self.state() or {}).get("aliveworkers") == 1, "the worker")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, Any] | None:
        """The master's status document (/json), or None when it does not answer."""
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                document = json.loads(answer.read())
        except (OSError, ValueError):
            return None
        return document if isinstance(document, dict) else None

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ConfigError(f"spark {name} exited at start:\n{self.log(name)}")
            if time.monotonic() > deadline:
                raise ConfigError(f"timed out after {_START_TIMEOUT_S} s waiting for {what}")
            time.sleep(0.1)

    def log(self, name: str, tail: int = 3000) -> str:
        """The last `tail` characters of the master's or worker's log."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def stop(self) -> None:
        """Stop the worker (and with it its executors), then the master, by PID."""
        for name in ("worker", "master"):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def executor_python(cache_dir: Path, constraints: Path) -> Path:
    """The python of a venv with only `EXECUTOR_REQUIREMENTS` (pinned by `constraints`).

    Reused when a venv of the same constraints, requirements and Python exists under
    `cache_dir`; otherwise built in a temporary directory and renamed into place.
    """
    digest = hashlib.sha256()
    for part in (_VENV_FORMAT, sys.version, " ".join(EXECUTOR_REQUIREMENTS)):
        digest.update(part.encode() + b"\0")
    digest.update(constraints.read_bytes())
    final = cache_dir / f"py{sys.version_info[0]}{sys.version_info[1]}-{digest.hexdigest()[:16]}"
    python = final / "bin" / "python"
    if (final / "READY").is_file():
        return python
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_dir))
    try:
        venv = building / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)  # noqa: S603
        subprocess.run(  # noqa: S603
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-c",
                str(constraints),
                *EXECUTOR_REQUIREMENTS,
            ],
            check=True,
            timeout=900,
        )
        (venv / "READY").write_text(" ".join(EXECUTOR_REQUIREMENTS) + "\n", encoding="utf-8")
        try:
            venv.rename(final)
        except OSError:
            if not (final / "READY").is_file():  # not another builder's finished venv
                raise
    except subprocess.CalledProcessError as exc:
        raise ConfigError(f"building the executor venv failed ({exc}); see pip's output") from exc
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return python
